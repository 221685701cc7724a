"""The API's request metrics label every request by the template of the route that answered it —
FastAPI's routes, the web UI's, `/openapi.json` and the MCP endpoint alike — and a path no route
matches by `unmatched`, so the `route` label stays bounded whatever paths clients send."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from starlette.routing import BaseRoute, Route

from api.app import create_app
from api.mcp_server import MCP_PATH
from api.metrics import UNMATCHED
from store.postgres.store import PostgresMemoryStore
from tests.api.conftest import AUTH, People

PARAMETER = re.compile(r"\{[^}]+\}")
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def routes_of(routes: list[BaseRoute]) -> Iterator[tuple[str, str]]:
    """(method, template) of every route, the routes of included routers too."""
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)
        if contexts is not None:  # FastAPI's included router
            for context in contexts():
                yield from ((method, context.path) for method in sorted(context.methods))
        elif isinstance(route, Route):
            methods = sorted(route.methods or {"POST"})  # an ASGI endpoint (MCP): POST
            yield ("GET" if "GET" in methods else methods[0]), route.path


def concrete(template: str) -> str:
    """A path the template matches (a UUID in every parameter)."""
    return PARAMETER.sub(str(uuid.uuid4()), template)


@asynccontextmanager
async def client_of(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the app in process, its lifespan running (the MCP session manager
    answers only then)."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://pmem.test") as http,
    ):
        yield http


async def labels_of(http: httpx.AsyncClient, family: str) -> set[tuple[str, ...]]:
    """The label values of every sample of a metric family in /metrics."""
    text = (await http.get("/metrics")).text
    return {
        tuple(sample.labels.get(name, "") for name in ("method", "route", "status"))
        for metric in text_string_to_metric_families(text)
        if metric.name == family
        for sample in metric.samples
    }


async def test_every_route_is_labelled_by_its_template(
    api_store: PostgresMemoryStore, people: People
) -> None:
    app = create_app(store=api_store, auth=AUTH, max_body_bytes=64_000)
    expected = set(routes_of(app.router.routes))
    assert ("POST", MCP_PATH) in expected and ("GET", "/openapi.json") in expected
    assert len(expected) > 50
    async with client_of(app) as http:
        for method, template in sorted(expected):
            body = {} if method in ("POST", "PUT", "PATCH") else None
            await http.request(method, concrete(template), json=body)
        # an authenticated MCP call that reaches the SDK, and a path no route matches
        listed = await http.post(
            f"{MCP_PATH}?user_id={people.user}",
            json=TOOLS_LIST,
            headers={**MCP_HEADERS, "Authorization": f"Bearer {people.service_key}"},
        )
        assert listed.status_code == 200, listed.text
        assert (await http.get(f"/no/such/{uuid.uuid4()}")).status_code == 404

        requests = await labels_of(http, "pmem_api_requests")
        durations = await labels_of(http, "pmem_api_request_duration_seconds")
    labelled = {(method, route) for method, route, _ in requests}
    assert sorted(expected - labelled) == []
    assert sorted(labelled - expected) == [("GET", UNMATCHED)]
    assert ("POST", MCP_PATH, "200") in requests and ("POST", MCP_PATH, "401") in requests
    assert ("GET", UNMATCHED, "404") in requests
    assert {(method, route) for method, route, _ in durations} == labelled
    # no concrete id ever becomes a label value
    assert not [route for _, route, _ in requests if re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-", route)]


async def test_the_review_queue_gauge_counts_every_teams_queue(
    api_store: PostgresMemoryStore, people: People
) -> None:
    from tests.api.conftest import TEAM_A, TEAM_B
    from tests.factories import user_fact

    for n, team in enumerate((TEAM_A, TEAM_B, None)):
        await api_store.writes.upsert(user_fact(uuid.uuid4(), f"fact {n}", f"Value {n}", team_id=team))
    app = create_app(store=api_store, auth=AUTH)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://pmem.test") as http:
        text = (await http.get("/metrics")).text
    depth = {
        sample.labels["scope"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "pmem_review_queue_depth"
        for sample in family.samples
    }
    # the scrape carries no credential, so no team of its own: the gauge reads across teams
    assert depth["user"] == 3.0
