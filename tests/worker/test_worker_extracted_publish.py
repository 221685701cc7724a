"""`memory.extracted` on a real nats-server: the event's ack does not wait for the publish's
PubAck, a publish JetStream does not store is counted and logged (the event is acked anyway), and
shutdown collects the PubAcks still outstanding."""

from __future__ import annotations

import time

import pytest

from tests.worker.worker_harness import Harness, conversation, wait_for

pytestmark = pytest.mark.asyncio


async def _extracted_failures(worker: object) -> float:
    registry = worker.metrics.registry  # type: ignore[attr-defined]
    return registry.get_sample_value("pmem_publish_failures_total", {"kind": "extracted"}) or 0.0


async def test_a_memory_extracted_publish_nothing_stores_is_counted_and_the_event_acked(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    async with h.worker() as worker:
        await h.nc.jsm().delete_stream(h.base["output_stream"])  # nothing captures the subject now
        await h.publish(conversation("I live in Porto and I work as a nurse.", "Nice."))

        async def counted() -> bool:
            return await _extracted_failures(worker) == 1

        await wait_for(counted, what="the failed memory.extracted publish to be counted")
        await wait_for(lambda: _settled(h), what="the event to be acked")
    assert await h.processed() == 1
    assert any("could not publish" in r.getMessage() for r in caplog.records)


async def test_the_ack_does_not_wait_for_the_memory_extracted_puback(harness: Harness) -> None:
    h = harness
    async with h.worker() as worker:
        # a listener that never answers stands in for a JetStream that is slow to store: the
        # publish finds a responder, and no PubAck ever comes
        await h.nc.jsm().delete_stream(h.base["output_stream"])
        await h.nc.subscribe(h.base["extracted_subject"])
        await h.nc.flush()
        worker.extracted_pubacks.timeout_s = 3.0
        started = time.monotonic()
        await h.publish(conversation("I live in Porto and I work as a nurse.", "Nice."))
        await wait_for(lambda: _settled(h), within=10, what="the event to be acked")
        acked_after = time.monotonic() - started
        assert acked_after < 2.0, f"the ack waited {acked_after:.1f}s, as long as the PubAck deadline"
        assert len(worker.extracted_pubacks) == 1  # the PubAck is still awaited in the background
        assert await _extracted_failures(worker) == 0
        closing = time.monotonic()
    closed_after = time.monotonic() - closing
    # shutdown collected the outstanding PubAck (failed at its deadline) before draining
    assert await _extracted_failures(worker) == 1
    assert closed_after < 3.0 + 2.0
    assert await h.processed() == 1


async def _settled(h: Harness) -> bool:
    return await h.consumer_state() == (0, 0) and await h.processed() >= 1
