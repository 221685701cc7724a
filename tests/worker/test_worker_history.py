"""Conversation memory and evidence through the real worker: nats-server, Postgres + pgvector and
the fake OpenAI-compatible server (its rules answer cites the message each fact was matched in)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from store.model import SettingsRow
from tests.worker.test_worker_e2e import _outcome, _settled, processed_at_least
from tests.worker.worker_harness import Harness, conversation, wait_for

pytestmark = pytest.mark.asyncio

SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz123456"


def with_times(event: dict[str, object]) -> dict[str, object]:
    """The event with a time on its second message only."""
    messages = event["messages"]
    assert isinstance(messages, list)
    messages[1]["at"] = "2026-11-29T18:59:30Z"
    return event


async def test_history_on_stores_the_turns_redacted_and_the_evidence_of_each_fact(harness: Harness) -> None:
    h = harness
    event = with_times(
        conversation(
            "Hi there, my key is " + SECRET,
            "Hello! How can I help?",
            "I live in Lisbon.",
            "Noted!",
        )
    )
    async with h.worker():
        await h.publish(event)
        await processed_at_least(h, 1)
    turns = await h.sql("SELECT position, role, text, at FROM conversation_turns ORDER BY position")
    assert [(p, r) for p, r, _, _ in turns] == [(1, "user"), (2, "assistant"), (3, "user"), (4, "assistant")]
    assert SECRET not in str(turns) and "[REDACTED:api_key]" in turns[0][2]
    occurred = datetime(2026, 11, 29, 19, 0, tzinfo=UTC)
    assert turns[1][3] == datetime(2026, 11, 29, 18, 59, 30, tzinfo=UTC) and turns[2][3] == occurred
    assert await h.count("SELECT count(*) FROM conversation_turns WHERE embedding IS NOT NULL") == 4
    [(key, evidence, observed_at)] = await h.sql("SELECT key, evidence, observed_at FROM memories")
    assert key == "home location"
    assert evidence == "user: I live in Lisbon." and observed_at == occurred
    # one embeddings call for the event: facts, their evidence and the turns together
    assert h.fake.counters["embeddings"] == 1


async def test_history_off_stores_no_turn_but_the_facts_with_their_evidence(harness: Harness) -> None:
    h = harness
    persona = uuid.uuid4()
    async with h.worker(history=False) as worker:
        # the deployment default off (PMEM_HISTORY), one persona on
        await worker.store.settings.replace_settings(
            SettingsRow(level="persona", target_id=persona, history=True)
        )
        await h.publish(conversation("I live in Lisbon.", "Noted!"))
        await h.publish(conversation("I work as a nurse.", "Ok.", persona_id=persona))
        await processed_at_least(h, 2)
    assert await h.count("SELECT count(*) FROM memories WHERE evidence IS NOT NULL") == 2
    personas = await h.sql("SELECT DISTINCT persona_id FROM conversation_turns")
    assert personas == [(persona,)]


async def test_a_redelivered_event_writes_its_turns_once(harness: Harness) -> None:
    h = harness
    event = conversation("I live in Porto and I work as a nurse.", "Nice.", "Thanks", "Bye")
    async with h.worker() as worker:
        await h.publish(event)
        await processed_at_least(h, 1)
        await wait_for(lambda: _settled(h), what="consumer drained")
        # the same event again as a new message (a publisher retry outside the dedup window)
        await h.publish(event, msg_id=f"{event['event_id']}-again")
        await wait_for(lambda: _outcome(worker, "duplicate", 1), what="duplicate outcome")
    assert await h.count("SELECT count(*) FROM conversation_turns") == 4
