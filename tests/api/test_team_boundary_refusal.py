"""A write Postgres refuses at the team boundary (row-level security) answers as a refusal that names
it: 403 over HTTP, a JSON-RPC error over MCP, and a log line with the database's reason; never a
bare 500. Reaching past the boundary needs a bug, so one is planted: the scope of a tool call's
request swapped for another team's."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from api import access
from api.app import create_app
from api.errors import TEAM_BOUNDARY_REFUSED
from api.principal import Principal
from store.model import MemoryFilter
from store.postgres.store import PostgresMemoryStore
from store.team_scope import TeamScope, teams_scope
from tests.api.conftest import AUTH, TEAM_A, TEAM_B, People

SAVE = {"name": "memory_save", "arguments": {"key": "home city", "value": "Lives in Porto"}}


def another_teams_scope(principal: Principal, team_id: uuid.UUID | None) -> TeamScope:
    """The planted bug: every request acts in team B's scope, whatever team it names."""
    return teams_scope([TEAM_B])


@asynccontextmanager
async def serving(api_store: PostgresMemoryStore) -> AsyncIterator[httpx.AsyncClient]:
    """The app in process with its lifespan running (MCP's session manager needs it; its task
    group is entered and left in the test's own task)."""
    app = create_app(store=api_store, auth=AUTH, max_body_bytes=64_000)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://pmem.test") as http,
    ):
        yield http


async def save_over_http(http: httpx.AsyncClient, people: People, user: uuid.UUID) -> httpx.Response:
    body = {**SAVE, "user_id": str(user), "team_id": str(TEAM_A)}
    return await http.post("/v1/tools/call", json=body, headers=people.headers("service"))


async def save_over_mcp(http: httpx.AsyncClient, people: People, user: uuid.UUID) -> dict[str, Any]:
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": SAVE}
    headers = {**people.headers("service"), "Accept": "application/json, text/event-stream"}
    answer = await http.post(f"/mcp?user_id={user}&team_id={TEAM_A}", json=call, headers=headers)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def test_a_write_refused_at_the_team_boundary_is_a_403_naming_it_and_logged(
    api_store: PostgresMemoryStore,
    people: People,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user, other = uuid.uuid4(), uuid.uuid4()
    async with serving(api_store) as served:
        # without the bug the same call saves, in team A
        assert (await save_over_http(served, people, user)).status_code == 200
        monkeypatch.setattr(access, "request_scope", another_teams_scope)
        with caplog.at_level(logging.WARNING, logger="pmem.api"):
            answer = await save_over_http(served, people, other)
    assert answer.status_code == 403, answer.text
    assert answer.json() == {"error": TEAM_BOUNDARY_REFUSED}
    assert "team boundary" in answer.json()["error"]
    logged = [r.getMessage() for r in caplog.records if r.name == "pmem.api"]
    assert any("/v1/tools/call" in line and "row-level security" in line for line in logged), logged
    assert all("Porto" not in line for line in logged)
    assert await api_store.listing.list_memories(MemoryFilter(owner_id=other)) == []


async def test_over_mcp_it_is_a_json_rpc_error_naming_the_team_boundary(
    api_store: PostgresMemoryStore,
    people: People,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user, other = uuid.uuid4(), uuid.uuid4()
    async with serving(api_store) as served:
        saved = await save_over_mcp(served, people, user)
        assert "result" in saved and not saved["result"].get("isError"), saved
        monkeypatch.setattr(access, "request_scope", another_teams_scope)
        with caplog.at_level(logging.WARNING, logger="pmem.api.mcp"):
            refused = await save_over_mcp(served, people, other)
    assert refused["id"] == 7 and "result" not in refused, refused
    assert refused["error"]["message"] == TEAM_BOUNDARY_REFUSED
    logged = [r.getMessage() for r in caplog.records if r.name == "pmem.api.mcp"]
    assert any("memory_save" in line and "row-level security" in line for line in logged), logged
    assert await api_store.listing.list_memories(MemoryFilter(owner_id=other)) == []
