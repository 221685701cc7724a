"""The OpenAPI document tells the truth: every status a route answers is documented (with the error
schema), for anonymous, forged, person and service callers, malformed ids, bad and oversized bodies;
/metrics is text; an empty `cursor=` is the first page; OPTIONS lists every method of the path."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import jwt

from tests.api.conftest import People

CALLERS = ("anonymous", "forged", "user", "team_admin", "admin", "service")


def fill(path: str, parameters: list[dict[str, Any]], value: str) -> str:
    for parameter in parameters:
        if parameter["in"] == "path":
            enum = parameter["schema"].get("enum")
            path = path.replace("{" + parameter["name"] + "}", enum[0] if enum else value)
    return path


def headers_of(caller: str, people: People) -> dict[str, str]:
    if caller == "forged":
        token = jwt.encode(
            {"sub": str(uuid.uuid4()), "exp": 4102444800}, "not-the-secret-" * 3, algorithm="HS256"
        )
        return {"Authorization": f"Bearer {token}"}
    return people.headers(caller)


async def test_every_answered_status_is_documented_with_the_error_schema(
    client: httpx.AsyncClient, people: People
) -> None:
    document = (await client.get("/openapi.json")).json()
    assert "ErrorBody" in document["components"]["schemas"]
    seen: set[tuple[str, str, int]] = set()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            documented = {int(code) for code in operation["responses"]}
            parameters = operation.get("parameters", [])
            bodies: list[Any] = [None]
            if "requestBody" in operation:
                bodies = [{}, [], {"unexpected": 1}, "x" * 70_000]
            for caller in CALLERS:
                for id_value in (str(uuid.uuid4()), "not-a-uuid"):
                    for body in bodies:
                        url = fill(path, parameters, id_value)
                        kwargs: dict[str, Any] = {"headers": headers_of(caller, people)}
                        if isinstance(body, str):
                            kwargs["content"] = body
                        elif body is not None:
                            kwargs["json"] = body
                        response = await client.request(method.upper(), url, **kwargs)
                        status = response.status_code
                        seen.add((method, path, status))
                        assert status < 500, (method, url, caller, response.text)
                        assert status in documented, (
                            method,
                            path,
                            caller,
                            body if not isinstance(body, str) else "big",
                            status,
                            sorted(documented),
                        )
                        if status >= 400 and path not in ("/readyz",):
                            assert set(response.json()) == {"error"}, (method, path, response.text)
                            code = str(status)
                            ref = operation["responses"][code]["content"]["application/json"]["schema"][
                                "$ref"
                            ]
                            assert ref == "#/components/schemas/ErrorBody"
    # the probe really reached the statuses it documents: auth, roles, missing, validation, size
    assert {status for _, _, status in seen} >= {200, 401, 403, 404, 413, 422}


async def test_metrics_are_documented_and_served_as_text(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    content = document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert "application/json" not in content and all(kind.startswith("text/plain") for kind in content)
    response = await client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")


async def test_an_empty_cursor_is_the_first_page(client: httpx.AsyncClient, people: People) -> None:
    for path, role in (("/v1/me/memories", "user"), ("/v1/review", "admin")):
        response = await client.get(path, params={"cursor": ""}, headers=people.headers(role))
        assert response.status_code == 200, response.text
        assert response.json()["next_cursor"] is None


async def test_options_allows_every_method_of_the_path(client: httpx.AsyncClient, people: People) -> None:
    document = (await client.get("/openapi.json")).json()
    for path, operations in document["paths"].items():
        url = fill(
            path,
            [
                {"in": "path", "name": name.strip("{}"), "schema": {}}
                for name in path.split("/")
                if name.startswith("{")
            ],
            str(uuid.uuid4()),
        )
        if "{kind}" in path:
            url = url.replace(url.split("/")[3], "teams")
        response = await client.options(url)
        assert response.status_code == 204, (path, response.text)
        allowed = set(response.headers["allow"].split(", "))
        assert allowed == {m.upper() for m in operations} | {"OPTIONS"}
        for method in allowed - {"OPTIONS"}:
            answer = await client.request(method, url, headers=people.headers("admin"))
            assert answer.status_code != 405, (method, path)
