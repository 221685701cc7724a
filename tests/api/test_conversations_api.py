"""`/v1/me/conversations`: a person's remembered conversations (one per channel), paged like the
other lists, deleted one at a time or all at once; memories and review items carry their evidence."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx

from store.postgres.store import PostgresMemoryStore
from tests.api.conftest import TEAM_A, People
from tests.factories import exchange, user_fact

PERSONA = uuid.UUID(int=0x9)
T0 = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)


async def said(
    store: PostgresMemoryStore, user: uuid.UUID, channel: uuid.UUID, lines: list[str], at: datetime
) -> None:
    """One event of `lines` in `channel` with the persona, in team A."""
    turns = exchange(lines, channel=channel, user=user, persona=PERSONA, team=TEAM_A, at=at)
    await store.writes.write_event(event_id=uuid.uuid4(), memories=[], turns=turns)


async def test_conversations_are_listed_newest_first_across_pages_and_deleted(
    client: httpx.AsyncClient, api_store: PostgresMemoryStore, people: People
) -> None:
    channels = [uuid.uuid4() for _ in range(3)]
    for day, channel in enumerate(channels):
        await said(
            api_store,
            people.user,
            channel,
            [f"Day {day}: planning a trip", "Where to?"],
            T0 + timedelta(days=day),
        )
    await said(api_store, people.other_user, channels[0], ["Not the user's words"], T0 + timedelta(days=9))
    me = people.headers("user")
    first = (await client.get("/v1/me/conversations?limit=2", headers=me)).json()
    assert [c["channel_id"] for c in first["items"]] == [str(channels[2]), str(channels[1])]
    assert first["items"][0] == {
        "channel_id": str(channels[2]),
        "persona_ids": [str(PERSONA)],
        "team_ids": [str(TEAM_A)],
        "started_at": (T0 + timedelta(days=2)).isoformat(),
        "last_at": (T0 + timedelta(days=2, seconds=1)).isoformat(),
        "first_line": "Day 2: planning a trip",
        "turn_count": 2,
        "conversation_count": 1,
    }
    rest = (
        await client.get(f"/v1/me/conversations?limit=2&cursor={first['next_cursor']}", headers=me)
    ).json()
    assert [c["channel_id"] for c in rest["items"]] == [str(channels[0])] and rest["next_cursor"] is None

    one = await client.delete(f"/v1/me/conversations/{channels[0]}", headers=me)
    assert one.status_code == 200 and one.json() == {"erased": 2}
    again = await client.delete(f"/v1/me/conversations/{channels[0]}", headers=me)
    assert again.status_code == 404 and "error" in again.json()
    # the other person's turns in the same channel stay
    assert [t.text for t in await api_store.turns.export_turns(people.other_user)] == ["Not the user's words"]

    forged = await client.get("/v1/me/conversations?cursor=forged", headers=me)
    assert forged.status_code == 422 and "cursor" in forged.json()["error"]
    everything = await client.delete("/v1/me/conversations", headers=me)
    assert everything.status_code == 200 and everything.json() == {"erased": 4}
    assert (await client.get("/v1/me/conversations", headers=me)).json() == {"items": [], "next_cursor": None}


async def test_memories_and_review_items_carry_their_evidence_and_when_it_was_said(
    client: httpx.AsyncClient, api_store: PostgresMemoryStore, people: People
) -> None:
    written = await api_store.writes.upsert(
        user_fact(
            people.user,
            "diet",
            "Is vegan",
            status="pending_review",
            team_id=TEAM_A,
            evidence="user: I have been vegan since 2020",
            observed_at=T0,
        )
    )
    mine = (await client.get("/v1/me/memories", headers=people.headers("user"))).json()["items"]
    assert [(m["evidence"], m["observed_at"]) for m in mine] == [
        ("user: I have been vegan since 2020", T0.isoformat())
    ]
    queue = (await client.get("/v1/review", headers=people.headers("admin"))).json()["items"]
    assert [(i["evidence"], i["observed_at"]) for i in queue] == [
        ("user: I have been vegan since 2020", T0.isoformat())
    ]
    detail = (await client.get(f"/v1/memories/{written.memory_id}", headers=people.headers("admin"))).json()
    assert (
        detail["evidence"] == "user: I have been vegan since 2020" and detail["observed_at"] == T0.isoformat()
    )
