"""Deadlines on a real nats-server and Postgres with the fake LLM: one delivery of an event is
bounded by PMEM_EVENT_TIMEOUT_S, Postgres sessions have a statement and a connect timeout, and
recall's query embedding has a short timeout and at most one retry."""

from __future__ import annotations

import time
import uuid

import pytest
import sqlalchemy
from sqlalchemy import text

from extraction.embeddings import OpenAIEmbedder, OpenAIEmbedderConfig
from extraction.errors import TransientEmbeddingError
from store.migrate import migrate_async
from store.postgres.connections import postgres_connect_args
from store.postgres.store import PostgresMemoryStore
from testkit.fake_openai import FakeOpenAI, Reply
from tests.database_role import DATABASE_ROLE
from tests.worker.worker_harness import Harness, conversation, wait_for

pytestmark = pytest.mark.asyncio

SLOW = {"memories": [{"key": "home city", "value": "Lives in Oslo", "confidence": 0.9, "scope": "user"}]}


async def test_an_event_past_its_deadline_is_retried_then_dead_lettered_with_that_reason(
    harness: Harness,
) -> None:
    h = harness
    # each LLM reply takes 3 s: inside the LLM timeout (5 s), past the event deadline (1 s)
    h.fake.script_chat(*[Reply.json(SLOW, delay_s=3.0)] * 4)
    async with h.worker(event_timeout_s=1.0, max_deliver=2) as worker:
        started = time.monotonic()
        await h.publish(conversation("I live in Oslo.", "Ok."))

        async def dead_lettered() -> bool:
            return len(await h.dlq()) >= 1

        await wait_for(dead_lettered, within=30, what="the event in the DLQ")
        elapsed = time.monotonic() - started
        retried = worker.metrics.registry.get_sample_value("pmem_retries_total", {"reason": "deadline"})
    (entry,) = await h.dlq()
    assert entry.record.kind == "deadline_exhausted"
    assert "PMEM_EVENT_TIMEOUT_S=1" in entry.record.reason
    assert retried == 1
    assert elapsed < 2 * 3.0  # two deliveries, each stopped at 1 s, not at the LLM's 3 s
    assert await h.count("SELECT count(*) FROM memories") == 0


async def test_worker_sessions_have_a_statement_timeout(harness: Harness) -> None:
    async with harness.worker(db_statement_timeout_s=0.5) as worker:
        engine = worker.store.engine  # type: ignore[attr-defined]
        async with engine.connect() as conn:
            assert (await conn.execute(text("SHOW statement_timeout"))).scalar() == "500ms"
            with pytest.raises(sqlalchemy.exc.OperationalError) as caught:
                await conn.execute(text("SELECT pg_sleep(3)"))
    assert "statement timeout" in str(caught.value)


async def test_worker_sessions_allow_generic_plans(harness: Harness) -> None:
    """The worker's statements pick their shape in the SQL text: prepared ones may keep a generic
    plan instead of being planned on every event (recall's force_custom_plan is not theirs)."""
    async with harness.worker() as worker:
        engine = worker.store.engine  # type: ignore[attr-defined]
        async with engine.connect() as conn:
            assert (await conn.execute(text("SHOW plan_cache_mode"))).scalar() == "auto"


async def test_connect_args_carry_both_timeouts() -> None:
    assert postgres_connect_args(2.5, 30) == {"connect_timeout": 3, "options": "-c statement_timeout=30000"}
    assert postgres_connect_args(None, 0) == {}
    assert postgres_connect_args(None, None, parallel_query=False) == {
        "options": "-c max_parallel_workers_per_gather=0"
    }


async def test_recall_query_embedding_gives_up_fast_after_one_retry(database_url: str) -> None:
    await migrate_async(database_url, 8)
    with FakeOpenAI(embedding_dim=8) as fake:
        fake.script_embeddings(*[Reply.embedding([[0.5] * 8], delay_s=5.0)] * 3)
        embedder = OpenAIEmbedder(
            OpenAIEmbedderConfig(model="fake-embedding", dim=8, base_url=fake.base_url, query_timeout_s=0.3)
        )
        store = PostgresMemoryStore(database_url, embedder, database_role=DATABASE_ROLE)
        started = time.monotonic()
        try:
            with pytest.raises(TransientEmbeddingError):
                await store.recall(uuid.uuid4(), None, "where does she live", 5)
        finally:
            await store.close()
            await embedder.close()
        elapsed = time.monotonic() - started
        calls = fake.counters.get("embeddings", 0)
    assert elapsed < 4.0  # one wait for the 5 s reply would be more
    assert calls == 2
