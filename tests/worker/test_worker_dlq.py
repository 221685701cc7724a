"""The dead-letter path on a real nats-server: a record always fits the payload limit, and a DLQ
that cannot be written leaves the event to JetStream's finite max_deliver: nothing cycles forever."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.worker.worker_harness import Harness, conversation, wait_for
from worker.streams import consumer_max_deliver

pytestmark = pytest.mark.asyncio


async def test_a_099_mb_event_reaches_the_dlq_once_and_the_consumer_moves_on(harness: Harness) -> None:
    h = harness
    big = conversation("x" * 100)
    # quotes and newlines: escaped again inside the DLQ record's JSON, the body grows by a third
    big["messages"][0]["content"] = 'She said "hi" and left.\n' * 38_400
    body = json.dumps(big).encode()
    assert 0.98 * 2**20 < len(body) < 0.995 * 2**20 < h.nc.max_payload
    good = conversation("I work at Acme.", "Ok.")
    async with h.worker() as worker:
        await h.publish(body)
        await h.publish(good)

        async def good_processed() -> bool:
            return await h.processed() >= 1

        await wait_for(good_processed, what="the event after the big one to be processed")

        async def settled() -> bool:
            return await h.consumer_state() == (0, 0)

        await wait_for(settled, what="the consumer to have nothing pending")
        failures = worker.metrics.registry.get_sample_value("pmem_publish_failures_total", {"kind": "dlq"})
    (entry,) = await h.dlq()
    assert entry.record.kind == "invalid_oversized"
    assert entry.record.body_truncated and entry.record.body_size == len(body)
    assert entry.record.stream == h.base["stream"] and entry.record.stream_sequence == 1
    assert entry.record.delivery_count == 1
    assert body.startswith(entry.record.original_body())
    assert not failures


async def test_a_dlq_that_cannot_be_written_stops_at_jetstreams_max_deliver(harness: Harness) -> None:
    h = harness
    stream, durable = h.base["stream"], h.base["durable"]
    advisories: asyncio.Queue[bytes] = asyncio.Queue()

    async def on_advisory(msg: object) -> None:
        await advisories.put(getattr(msg, "data", b""))

    await h.nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{durable}", cb=on_advisory)
    async with h.worker(dlq_publish_attempts=2) as worker:
        # nothing captures the DLQ subject any more: every DLQ publish fails
        await h.nc.jsm().delete_stream(h.base["output_stream"])
        await h.publish(b"{not json", msg_id=None)
        await asyncio.wait_for(advisories.get(), timeout=30)
        limit = consumer_max_deliver(worker.settings)
        failures = worker.metrics.registry.get_sample_value("pmem_publish_failures_total", {"kind": "dlq"})
        info = await h.nc.jsm().consumer_info(stream, durable)
    assert limit == worker.settings.max_deliver + 2
    assert failures == 2 * limit  # bounded attempts per delivery, bounded deliveries
    assert info.num_ack_pending == 0 and info.num_pending == 0
