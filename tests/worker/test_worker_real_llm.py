"""The worker end to end with a real LLM: `pmem demo`'s conversations through the real nats-server,
the real `LLMExtractor` against a real llama.cpp server (SmolLM2-135M-Instruct) and the real
Postgres. Every event ends processed or dead-lettered with a classified reason; none is lost, and
whatever is stored obeys the validation limits."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from extraction.validate import DEFAULT_LIMITS
from testkit.llama_server import LlamaServer
from tests.worker.worker_harness import Harness, wait_for

# its own deadline for the events is 10 minutes, and starting llama-server may take 2 more: above the
# suite's per-test limit (pyproject.toml), so the test's deadline is the one that speaks
pytestmark = [pytest.mark.asyncio, pytest.mark.slow, pytest.mark.timeout(900)]

SAMPLES = Path(__file__).resolve().parents[2] / "cli" / "samples" / "conversations.jsonl"


async def test_demo_conversations_through_a_real_llm_are_each_processed_or_dead_lettered(
    harness: Harness, llama_server: LlamaServer
) -> None:
    h = harness
    events = [json.loads(line) for line in SAMPLES.read_text().splitlines() if line.strip()]
    for event in events:
        event["event_id"] = str(uuid.uuid4())
    async with h.worker(
        llm_base_url=llama_server.base_url,
        llm_model="smollm2",
        llm_timeout_s=120.0,
        llm_max_output_tokens=1024,
        llm_max_input_tokens=llama_server.slot_context - 1024,
        embedding_provider="hashing",
        ack_wait_s=180.0,
        concurrency=2,
    ) as worker:
        for event in events:
            await h.publish(event)

        async def all_accounted_for() -> bool:
            return await h.processed() + len(await h.dlq()) >= len(events)

        await wait_for(all_accounted_for, within=600, what="every event processed or dead-lettered")
        calls = worker.metrics.registry.get_sample_value("pmem_llm_calls_total") or 0.0

    dead = await h.dlq()
    processed = {str(row[0]) for row in await h.sql("SELECT event_id FROM processed_events")}
    assert processed | {d.record.event_id for d in dead} == {e["event_id"] for e in events}
    assert all(d.record.reason and d.record.kind for d in dead)  # classified, with the reason
    assert len(processed) >= len(events) - len(dead)
    assert calls >= len(events)
    rows = await h.sql("SELECT key, value, confidence, status FROM memories")
    for key, value, confidence, status in rows:
        assert 1 <= len(key.split()) <= DEFAULT_LIMITS.max_key_words
        assert 0 < len(value) <= DEFAULT_LIMITS.max_value_chars
        assert 0.0 <= confidence <= 1.0
        assert status in ("pending_review", "active")
