"""Work per event does not grow with the owner's memories, and concurrent events of one owner do
not store one fact twice: real nats-server, real Postgres, the fake LLM."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from extraction.embeddings import hashing_vector
from tests.worker.worker_harness import Harness, conversation, wait_for

pytestmark = pytest.mark.asyncio

ACME = "Works as a senior engineer at Acmecorp in Lyon since 2019"


def reply(key: str, value: str) -> str:
    return json.dumps({"memories": [{"key": key, "value": value, "confidence": 0.9, "scope": "user"}]})


async def seed(h: Harness, owner: uuid.UUID, count: int, extra: list[tuple[str, str]]) -> None:
    """`count` filler memories of a user (plus `extra`), straight into the table."""
    rows = [(f"topic {i}", f"Talked about subject number {i}") for i in range(count)] + extra
    async with await psycopg.AsyncConnection.connect(h.database_url) as conn:
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO memories (id, scope, owner_id, key, value, confidence, status, embedding,"
                " created_at, updated_at) VALUES (%s, 'user', %s, %s, %s, 0.9, 'active', %s, %s, %s)",
                [  # one second apart, the last one newest
                    (
                        uuid.uuid4(),
                        owner,
                        k,
                        v,
                        str(hashing_vector(f"{k}: {v}", 384)).replace(" ", ""),
                        at,
                        at,
                    )
                    for i, (k, v) in enumerate(rows)
                    for at in [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i)]
                ],
            )
        await conn.commit()


def prompt_keys(body: dict[str, Any]) -> list[str]:
    system = " ".join(str(m.get("content")) for m in body["messages"] if m.get("role") == "system")
    found = re.search(r"Existing keys \(reuse for the same fact\): user: ([^.;]*)", system)
    return [k.strip() for k in found.group(1).split(",")] if found else []


async def test_a_large_owner_gets_the_relevant_keys_and_a_restated_fact_is_not_stored(
    harness: Harness,
) -> None:
    h = harness
    user = uuid.uuid4()
    await seed(h, user, 3000, [("employer", ACME)])
    # the LLM restates the stored fact under another key
    h.fake.set_chat_responder(lambda _body: reply("workplace", ACME))
    async with h.worker():
        await h.publish(conversation("I still work at Acmecorp, in Lyon.", "Nice.", user_id=user))

        async def processed() -> bool:
            return await h.processed() >= 1

        await wait_for(processed, what="the event to be processed")
    (request,) = h.fake.chat_requests()
    shown = prompt_keys(request)
    assert "employer" in shown  # relevant to the conversation, among 3,001
    assert len(shown) <= 40
    assert h.fake.counters["prompt_tokens"] < 600  # the fixed budget, not 3,000 keys
    count = await h.count("SELECT count(*) FROM memories WHERE owner_id = %s", user)
    assert count == 3001  # "workplace" restated "employer": not written


async def test_the_same_fact_from_two_concurrent_events_of_one_owner_is_one_memory(
    harness: Harness,
) -> None:
    h = harness
    user = uuid.uuid4()

    def responder(body: dict[str, Any]) -> str:
        text = json.dumps(body["messages"])
        key = "city" if "first" in text else "home city"
        return reply(key, "Lives in Lyon, France")

    h.fake.set_chat_responder(responder)
    h.fake.chat_latency_s = 0.5  # both events are in flight at once
    async with h.worker():
        await h.publish(conversation("My first note: I live in Lyon.", "Ok.", user_id=user))
        await h.publish(conversation("Another note: I live in Lyon.", "Ok.", user_id=user))

        async def both_processed() -> bool:
            return await h.processed() >= 2

        await wait_for(both_processed, what="both events to be processed")
    assert h.fake.counters["max_in_flight"] == 2
    rows = await h.sql("SELECT key FROM memories WHERE owner_id = %s", user)
    assert len(rows) == 1


@pytest.mark.parametrize(("writes_in_flight", "expected_peak"), [(2, 2), (0, 8)])
async def test_writes_in_flight_bounds_the_events_storing_at_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, writes_in_flight: int, expected_peak: int
) -> None:
    h = harness
    h.fake.chat_latency_s = 0.3  # the eight events finish their LLM calls together
    storing = peak = peak_embedding = embedding = 0
    async with h.worker(concurrency=8, writes_in_flight=writes_in_flight) as worker:
        write_event, embed = worker.store.writes.write_event, worker.embedder.embed

        async def slow_embed(texts: Any) -> Any:
            nonlocal storing, peak, embedding, peak_embedding
            storing += 1  # an event's storing starts with its embeddings call ...
            embedding += 1
            peak, peak_embedding = max(peak, storing), max(peak_embedding, embedding)
            try:
                await asyncio.sleep(0.5)  # a slow provider: the others queue behind the limit
                return await embed(texts)
            finally:
                embedding -= 1

        async def slow_write(**kwargs: Any) -> Any:
            nonlocal storing
            try:
                await asyncio.sleep(0.1)  # a slow transaction
                return await write_event(**kwargs)
            finally:
                storing -= 1  # ... and ends with its write

        monkeypatch.setattr(worker.embedder, "embed", slow_embed)
        monkeypatch.setattr(worker.store.writes, "write_event", slow_write)
        users = [uuid.uuid4() for _ in range(8)]
        for user in users:
            await h.publish(conversation("I live in Lyon.", "Ok.", user_id=user))

        async def all_processed() -> bool:
            return await h.processed() >= 8

        await wait_for(all_processed, what="the eight events to be processed")
        waits = worker.metrics.registry.get_sample_value("pmem_storing_wait_seconds_count")
    assert peak == expected_peak and peak_embedding == expected_peak
    assert waits == (8 if writes_in_flight else 0)
    rows = await h.sql("SELECT count(*) FROM memories WHERE owner_id = ANY(%s)", users)
    assert rows == [(8,)]
