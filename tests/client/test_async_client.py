"""`AsyncMemoryClient` against the real app on a real Postgres store: every wrapped route answers
what the client's types and the OpenAPI document say, and each error shape (401, 403, 404, 409, 413,
422, 503 with Retry-After) arrives as one `MemoryApiError` with the server's status and message."""

from __future__ import annotations

import json
import socket
import uuid
from datetime import UTC, datetime

import httpx
import psycopg
import pytest
from fastapi import FastAPI

from api.answers import ROUTE_ANSWERS
from api.app import create_app
from extraction.embeddings import HashingEmbedder
from pmem_client import AsyncMemoryClient, MemoryApiError, RetryPolicy
from store.postgres.store import PostgresMemoryStore
from tests.api.conftest import AUTH, DIM, TEAM_A, People
from tests.client.conftest import BASE, Connect, Recording, conforms
from tests.database_role import DATABASE_ROLE
from tests.factories import exchange, user_fact

PERSONA = uuid.UUID(int=0x9)
AT = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)


async def seed(store: PostgresMemoryStore, user: uuid.UUID) -> tuple[uuid.UUID, list[uuid.UUID]]:
    """One conversation of the user in team A with four pending memories; its channel and the
    memories' ids."""
    channel = uuid.uuid4()
    turns = exchange(
        ["I am vegetarian and live in Lisbon", "Noted!"],
        channel=channel,
        user=user,
        persona=PERSONA,
        team=TEAM_A,
        at=AT,
    )
    facts = [
        user_fact(
            user, key, value, team_id=TEAM_A, source_channel_id=channel, confidence=0.9, evidence="user: …"
        )
        for key, value in (
            ("diet", "Is vegetarian"),
            ("home", "Lives in Lisbon"),
            ("pet", "Has a cat"),
            ("job", "Is a nurse"),
        )
    ]
    written = await store.writes.write_event(event_id=uuid.uuid4(), memories=facts, turns=turns)
    return channel, [result.memory_id for result in written.results]


async def test_every_route_answers_its_documented_shape(  # noqa: PLR0915 - one walk through every route, in the order a platform meets them
    connect: Connect, recording: Recording, app: FastAPI, api_store: PostgresMemoryStore, people: People
) -> None:
    service, admin, user = connect("service"), connect("admin"), connect("user")
    channel, (diet, home, pet, job) = await seed(api_store, people.user)
    context = {"user_id": people.user, "persona_id": PERSONA, "team_id": TEAM_A}

    # settings: each level read and replaced
    assert (await admin.put_settings("global", {"review_tool_saves": True}))["own"][
        "review_tool_saves"
    ] is True
    assert (await admin.settings("global"))["effective"]["review_tool_saves"] is True
    team = await connect("team_admin").put_settings("team", {"min_confidence": 0.6}, TEAM_A)
    assert (
        team["level"] == "team" and team["target_id"] == str(TEAM_A) and team["own"]["min_confidence"] == 0.6
    )
    assert (await admin.settings("team", TEAM_A))["inherited_from"]["min_confidence"] == "team"
    assert (await admin.put_settings("persona", {"persona_learning": True}, PERSONA))["level"] == "persona"
    assert (await admin.settings("persona", PERSONA))["own"]["persona_learning"] is True

    # tools: the schemas, a save (waiting for review: review_tool_saves) and a recall
    names = [tool["function"]["name"] for tool in await service.tools()]
    assert names[:2] == ["memory_save", "memory_recall"]
    saved = await service.call_tool(
        "memory_save", json.dumps({"key": "favourite dish", "value": "Loves risotto"}), **context
    )
    assert saved["saved"] is True
    found = await service.call_tool("memory_recall", {"query": "food"}, **context)
    assert isinstance(found, dict)

    # review: the queue, approve, reject, edit, bulk, one memory's detail
    queue = await admin.review_queue(team_id=TEAM_A, limit=10)
    assert {item["key"] for item in queue["items"]} >= {"diet", "home", "pet", "job", "favourite dish"}
    assert (await admin.approve(diet))["status"] == "active"
    assert (await admin.reject(pet))["status"] == "archived"
    assert (await admin.edit(home, "Lives in Porto"))["value"] == "Lives in Porto"
    outcome = await admin.bulk("approve", [job, uuid.uuid4()])
    assert sorted(r["status"] for r in outcome["results"]) == ["done", "not_found"]
    detail = await admin.memory(home)
    assert detail["value"] == "Lives in Porto" and [h["action"] for h in detail["history"]][-1] == "edit"
    assert detail["pending_revision"] is None
    assert (await admin.set_pinned(diet, True))["pinned"] is True

    # the platform: recall and the hint see the reviewed facts
    recalled = await service.recall(
        people.user, persona_id=PERSONA, team_id=TEAM_A, query="where do they live"
    )
    assert "Lives in Porto" in [item.get("value") for item in recalled["items"]]
    hint = await service.hint(
        people.user, persona_id=PERSONA, team_id=TEAM_A, query="where to travel", max_tokens=300
    )
    assert "Is vegetarian" in hint  # pinned: in every hint
    turns = await service.recall(people.user, persona_id=PERSONA, team_id=TEAM_A, limit=1, turn_limit=0)
    assert [item["kind"] for item in turns["items"]] == ["memory"]
    assert (await service.set_name("personas", PERSONA, "Chef"))["name"] == "Chef"

    # the person: own memories and conversations, edits, rejection, export and erasure
    mine = await user.my_memories(team_id=TEAM_A, limit=2)
    assert len(mine["items"]) == 2 and mine["next_cursor"] is not None
    rest = await user.my_memories(team_id=TEAM_A, cursor=mine["next_cursor"])
    assert len(mine["items"]) + len(rest["items"]) == 5
    assert (await user.edit_my_memory(diet, "Is vegan"))["value"] == "Is vegan"
    assert (await user.pin_my_memory(diet, False))["pinned"] is False
    assert (await user.reject_my_memory(job, forget=True))["forgotten_turns"] >= 0
    await user.erase_my_memory(pet)
    conversations = await user.my_conversations()
    assert [c["channel_id"] for c in conversations["items"]] == [str(channel)]
    export = await user.export_my_data()
    assert {m["key"] for m in export["memories"]} >= {"diet", "home"}
    assert {t["channel_id"] for t in export["turns"]} == {str(channel)}
    assert await user.erase_my_conversation(channel) == len(export["turns"])
    assert await user.erase_all_my_conversations() == 0
    assert await user.erase_all_my_memories() >= 2
    assert await service.erase_user(people.user) >= 0

    document = app.openapi()
    answered = conforms(document, recording.seen)
    assert set(ROUTE_ANSWERS) <= answered, set(ROUTE_ANSWERS) - answered


async def test_each_error_is_one_exception_with_the_servers_status_and_message(
    connect: Connect, recording: Recording, app: FastAPI, people: People
) -> None:
    async def failure(call: object) -> MemoryApiError:
        with pytest.raises(MemoryApiError) as caught:
            await call  # type: ignore[misc]
        return caught.value

    unknown = await failure(connect("pmem_sk_not-a-key").tools())
    assert unknown.status == 401 and unknown.message
    forbidden = await failure(connect("user").review_queue())
    assert forbidden.status == 403 and forbidden.message
    missing = await failure(connect("admin").approve(uuid.uuid4()))
    assert missing.status == 404 and missing.path.startswith("/v1/review/")
    oversized = await failure(connect("service").call_tool("memory_save", "x" * 70_000, user_id=people.user))
    assert oversized.status == 413 and "64000" in oversized.message
    invalid = await failure(connect("service").recall(people.user, limit=0))
    assert invalid.status == 422 and "limit" in invalid.message
    tool_error = await failure(connect("service").call_tool("memory_save", {"key": "k"}, user_id=people.user))
    assert tool_error.status == 422 and tool_error.message
    assert str(invalid).startswith("POST /v1/recall: 422 ")
    assert conforms(app.openapi(), recording.seen)


async def test_a_decided_item_is_a_409(
    connect: Connect, api_store: PostgresMemoryStore, people: People
) -> None:
    _, ids = await seed(api_store, people.user)
    admin = connect("admin")
    await admin.approve(ids[0])
    again = None
    try:
        await admin.approve(ids[0])
    except MemoryApiError as error:
        again = error
    assert again is not None and again.status == 409 and again.message


def unreachable_database() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/gone"


async def test_a_503_is_retried_after_retry_after_within_the_policy_then_raised(people: People) -> None:
    store = PostgresMemoryStore(unreachable_database(), HashingEmbedder(dim=DIM))
    app = create_app(store=store, auth=AUTH)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with AsyncMemoryClient(
            BASE, people.service_key, transport=transport, retry=RetryPolicy(max_attempts=3), sleep=sleep
        ) as client:
            with pytest.raises(MemoryApiError) as caught:
                await client.recall(people.user)
        assert caught.value.status == 503 and caught.value.retry_after == 5.0
        assert "database" in caught.value.message
        assert waits == [5.0, 5.0]  # three attempts in all, each after the server's Retry-After

        waits.clear()  # a wait past the policy's longest is not waited for
        async with AsyncMemoryClient(
            BASE, people.service_key, transport=transport, retry=RetryPolicy(max_wait_s=1), sleep=sleep
        ) as client:
            with pytest.raises(MemoryApiError) as caught:
                await client.hint(people.user)
        assert caught.value.status == 503 and waits == []
    finally:
        await store.close()


async def test_a_503_then_an_answer_is_one_successful_call(api_db_url: str, people: People) -> None:
    store = PostgresMemoryStore(
        api_db_url, HashingEmbedder(dim=DIM), statement_timeout_s=0.3, database_role=DATABASE_ROLE
    )
    app = create_app(store=store, auth=AUTH)
    lock = await psycopg.AsyncConnection.connect(api_db_url)
    await lock.execute("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE")  # recall times out: 503
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await lock.rollback()  # the cause goes away while the client waits

    _, key = await store.api_keys.create_api_key("retrying")
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with AsyncMemoryClient(BASE, key, transport=transport, sleep=sleep) as client:
            answer = await client.recall(people.user, query="anything")
        assert answer == {"items": []} and waits == [5.0]
    finally:
        await lock.close()
        await store.close()
