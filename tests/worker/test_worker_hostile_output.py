"""Hostile LLM output on a real nats-server and Postgres: one-word keys, NUL characters, lone
surrogates and rejected items cost only themselves, never the rest of the conversation, and no log
line or error carries a memory value or SQL parameters."""

from __future__ import annotations

import logging
import uuid

import pytest

from extraction.embeddings import HashingEmbedder
from store.postgres.store import PostgresMemoryStore
from tests.database_role import DATABASE_ROLE
from tests.factories import user_fact
from tests.worker.worker_harness import Harness, conversation

pytestmark = pytest.mark.asyncio

HOSTILE_REPLY = (
    '{"memories": ['
    '{"key": "favourite drink", "value": "Drinks green\\u0000 tea \\ud800daily", "confidence": 0.9,'
    ' "scope": "user"},'
    '{"key": "diet", "value": "Is vegetarian", "confidence": 0.9, "scope": "user"},'
    '{"key": "home city", "value": "Lives in Lyon", "confidence": 0.9, "scope": "user"},'
    '{"key": "one two three four five six seven", "value": "Owns a boat", "confidence": 0.9,'
    ' "scope": "user"}'
    "]}"
)


async def test_nul_one_word_key_and_normal_fact_keep_the_good_facts_after_one_llm_call(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    h.fake.set_chat_responder(lambda _body: HOSTILE_REPLY)
    user = uuid.uuid4()
    caplog.set_level(logging.INFO)
    said = conversation("I'm vegetarian, I live in Lyon, green tea daily.", "Ok.", user_id=user)
    dropped = await h.drops_processing(said, "key_too_many_words")
    got = await h.memories_of(user)
    assert got["diet"] == "Is vegetarian"
    assert got["home city"] == "Lives in Lyon"
    assert got["favourite drink"] == "Drinks green tea daily"  # cleaned, not lost
    assert "one two three four five six seven" not in got
    assert h.fake.counters["chat"] == 1
    assert await h.dlq() == []
    assert dropped == 1
    rejected = [r for r in caplog.records if r.getMessage().startswith("candidate rejected")]
    assert len(rejected) == 1 and rejected[0].levelno == logging.INFO
    assert "key_too_many_words" in rejected[0].getMessage()
    assert "item of " in rejected[0].getMessage()  # its size, never its text
    # neither a stored value nor the rejected item's (a personal fact too) is in any log line
    personal = ("Is vegetarian", "Lives in Lyon", "green tea", "Owns a boat", "one two three")
    assert not [r for r in caplog.records for v in personal if v in r.getMessage()]


async def test_store_errors_carry_no_sql_parameters(database_url: str) -> None:
    from store.migrate import migrate_async

    await migrate_async(database_url, 16)
    store = PostgresMemoryStore(database_url, HashingEmbedder(dim=16), database_role=DATABASE_ROLE)
    try:
        # a key too long for the key index (random, so it does not compress): the write fails
        bad = user_fact(
            uuid.uuid4(),
            "secret plan " + "".join(uuid.uuid4().hex for _ in range(200)),
            "the value nobody may log",
            confidence=0.9,
            status="pending_review",
            embedding=[0.25] * 16,
        )
        with pytest.raises(Exception) as caught:
            await store.writes.write_event(event_id=uuid.uuid4(), memories=[bad])
    finally:
        await store.close()
    text = "".join(str(e) for e in (caught.value, caught.value.__cause__, caught.value.__context__) if e)
    assert "the value nobody may log" not in text
    assert "secret plan" not in text
