"""The setting `history` off for a context (its team's or its persona's settings): `/v1/recall`,
`/v1/hint` and the `conversation_search` tool (over HTTP and in Python) give no turn said there,
though turns stored while it was on are still in the table; the context's memories are still
recalled. On Postgres and on SQLite."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from store.postgres.store import PostgresMemoryStore
from store.services.tools import MemoryTools, ToolContext
from store.sqlite.store import SqliteMemoryStore
from tests.api.conftest import TEAM_A, People
from tests.factories import exchange, user_fact

PERSONA = uuid.UUID(int=0x9)
SAID = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)
TURN_WORDS = "kayak trip to the Azores"
QUERY = "kayak Azores trip"


async def remembered(store: PostgresMemoryStore | SqliteMemoryStore, user: uuid.UUID) -> None:
    """Turns said with the persona in team A (stored while history was on) and an active memory."""
    turns = exchange(
        [f"I am planning a {TURN_WORDS} in May", "A kayak trip sounds great"],
        channel=uuid.uuid4(),
        user=user,
        persona=PERSONA,
        team=TEAM_A,
        at=SAID,
    )
    await store.writes.write_event(event_id=uuid.uuid4(), memories=[], turns=turns)
    await store.writes.upsert(
        user_fact(user, "holiday plan", "Kayak trip to the Azores", status="active", team_id=TEAM_A)
    )


async def what_is_recalled(
    client: httpx.AsyncClient, store: PostgresMemoryStore | SqliteMemoryStore, people: People
) -> dict[str, Any]:
    """Every way a turn of the context can come back, asked once each."""
    service = people.headers("service")
    context = {"user_id": str(people.user), "persona_id": str(PERSONA), "team_id": str(TEAM_A)}
    recall = await client.post("/v1/recall", json={**context, "query": QUERY}, headers=service)
    hint = await client.post("/v1/hint", json={**context, "query": QUERY}, headers=service)
    tool = await client.post(
        "/v1/tools/call",
        json={**context, "name": "conversation_search", "arguments": {"query": QUERY}},
        headers=service,
    )
    assert recall.status_code == hint.status_code == tool.status_code == 200, (recall, hint, tool)
    python_tool = MemoryTools(
        ToolContext(user_id=people.user, persona_id=PERSONA, team_id=TEAM_A, store=store)
    )
    return {
        "recall_kinds": sorted({item["kind"] for item in recall.json()["items"]}),
        "hint": hint.json()["hint"],
        "http_tool": tool.json()["result"]["count"],
        "python_tool": (await python_tool.conversation_search(QUERY))["count"],
    }


@pytest.mark.parametrize("level", ["teams", "personas"])
async def test_with_history_off_no_turn_is_recalled_hinted_or_searched(
    level: str,
    each_client: httpx.AsyncClient,
    each_store: PostgresMemoryStore | SqliteMemoryStore,
    each_people: People,
) -> None:
    await remembered(each_store, each_people.user)
    on = await what_is_recalled(each_client, each_store, each_people)
    # the check below is not empty by accident: with history on, every way finds the turns
    assert on["recall_kinds"] == ["memory", "turn"]
    assert TURN_WORDS in on["hint"]
    assert on["http_tool"] >= 1 and on["python_tool"] >= 1

    target = TEAM_A if level == "teams" else PERSONA
    saved = await each_client.put(
        f"/v1/settings/{level}/{target}", json={"history": False}, headers=each_people.headers("admin")
    )
    assert saved.status_code == 200, saved.text
    off = await what_is_recalled(each_client, each_store, each_people)
    assert off == {
        "recall_kinds": ["memory"],  # the memories of the context still are
        "hint": off["hint"],
        "http_tool": 0,
        "python_tool": 0,
    }
    assert TURN_WORDS not in off["hint"] and "Kayak trip to the Azores" in off["hint"]
    # the turns are still stored: only recall leaves them out
    assert len(await each_store.turns.export_turns(each_people.user)) == 2
    turns_only = await each_client.post(
        "/v1/recall",
        json={
            "user_id": str(each_people.user),
            "persona_id": str(PERSONA),
            "team_id": str(TEAM_A),
            "query": QUERY,
            "include": ["turns"],
        },
        headers=each_people.headers("service"),
    )
    assert turns_only.status_code == 200 and turns_only.json()["items"] == []
