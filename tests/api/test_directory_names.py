"""`PUT /v1/directory/{kind}/{id}` and its OpenAPI document agree on what a name may be: the
document has no pattern whose meaning differs between its regular expressions (ECMA-262) and the
server's, and says the rule in words; the server refuses what the rule refuses. And a team sets
`known_personas_only` through the settings API."""

from __future__ import annotations

import uuid

import httpx

from tests.api.conftest import People


def service(people: People) -> dict[str, str]:
    return {"Authorization": f"Bearer {people.service_key}"}


async def test_a_name_in_any_script_is_accepted_as_the_document_says(
    client: httpx.AsyncClient, people: People
) -> None:
    document = (await client.get("/openapi.json")).json()
    name = document["components"]["schemas"]["NameBody"]["properties"]["name"]
    assert "pattern" not in name and "letter, digit or emoji" in name["description"]
    for given in ("ç!¢", "Zoë", "日本", "R2-D2"):
        put = await client.put(
            f"/v1/directory/personas/{uuid.uuid4()}", json={"name": given}, headers=service(people)
        )
        assert put.status_code == 200, put.text
        assert put.json()["name"] == given


async def test_a_name_without_a_letter_digit_or_emoji_is_refused(
    client: httpx.AsyncClient, people: People
) -> None:
    for given in ("!!!", "¢ ¢", "\u200b"):
        put = await client.put(
            f"/v1/directory/users/{uuid.uuid4()}", json={"name": given}, headers=service(people)
        )
        assert put.status_code == 422, (given, put.text)


async def test_a_team_turns_known_personas_only_on_through_the_settings_api(
    client: httpx.AsyncClient, people: People
) -> None:
    admin, team = people.headers("admin"), uuid.uuid4()
    before = (await client.get(f"/v1/settings/teams/{team}", headers=admin)).json()
    assert (
        before["own"]["known_personas_only"] is None and before["effective"]["known_personas_only"] is False
    )
    put = await client.put(f"/v1/settings/teams/{team}", json={"known_personas_only": True}, headers=admin)
    assert put.status_code == 200, put.text
    assert put.json()["own"]["known_personas_only"] is True and put.json()["effective"]["known_personas_only"]
    refused = await client.put(
        f"/v1/settings/teams/{team}", json={"known_personas_only": "yes"}, headers=admin
    )
    assert refused.status_code == 422
