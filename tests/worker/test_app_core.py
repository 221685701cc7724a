"""Pure helpers of the app, the health server over real HTTP, and the JSON logs."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading

import httpx
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from config import load_settings
from tests.worker.worker_harness import http_get
from worker.events import DLQ_REASON_HEADER
from worker.handling import heartbeat_interval
from worker.health import HealthServer
from worker.logs import JsonFormatter, event_context
from worker.metrics import Metrics
from worker.publishing import dlq_headers
from worker.streams import _covered, consumer_config, consumer_config_diff


def test_consumer_config_diff_names_what_differs() -> None:
    wanted = consumer_config(load_settings(subject="a.b", durable="d", ack_wait_s=30))
    same = ConsumerConfig.from_response(wanted.as_dict())
    assert consumer_config_diff(same, wanted) == {}
    existing = ConsumerConfig.from_response(
        {**wanted.as_dict(), "ack_wait": 60_000_000_000, "max_deliver": 5}
    )
    diff = consumer_config_diff(existing, wanted)
    assert diff == {"ack_wait": (60.0, 30.0), "max_deliver": (5, wanted.max_deliver)}
    other_filter = ConsumerConfig(filter_subject="x.y", ack_policy=AckPolicy.EXPLICIT)
    assert "filter_subject" in consumer_config_diff(other_filter, wanted)


def test_heartbeat_is_well_inside_ack_wait() -> None:
    assert heartbeat_interval(60) == 20
    assert heartbeat_interval(0.1) == 0.1


def test_dlq_headers_are_one_line() -> None:
    headers = dlq_headers(reason="bad\nthing\r\n here", label="invalid_schema", msg_id="dlq:S:1")
    assert headers[DLQ_REASON_HEADER] == "bad thing here"
    assert headers["Nats-Msg-Id"] == "dlq:S:1"


def test_subject_coverage() -> None:
    assert _covered("chat.conversation.ended", {"chat.>"})
    assert _covered("chat.conversation.ended", {"chat.*.ended"})
    assert _covered("chat.conversation.ended", {"chat.conversation.ended"})
    assert not _covered("chat.conversation.ended", {"chat.*"})
    assert not _covered("chat", {"chat.>"})
    assert not _covered("pmem.dlq.x", {"chat.>"})


async def test_health_endpoints() -> None:
    metrics = Metrics()
    problem: list[str | None] = ["database unreachable: refused"]

    async def readiness() -> str | None:
        return problem[0]

    server = await HealthServer(metrics=metrics, readiness=readiness, host="127.0.0.1").start()
    try:
        assert await http_get(server.port, "/healthz") == (200, "ok\n")
        status, body = await http_get(server.port, "/readyz")
        assert status == 503 and "database unreachable" in body
        problem[0] = None
        # a client that holds the server to its Content-Length: after a longer answer, each answer
        # still announces its own length
        async with httpx.AsyncClient() as client:
            ready = await client.get(f"http://127.0.0.1:{server.port}/readyz")
            assert (ready.status_code, ready.text) == (200, "ready\n")
            alive = await client.get(f"http://127.0.0.1:{server.port}/healthz")
            assert (alive.status_code, alive.text) == (200, "ok\n")
        metrics.events.labels(outcome="processed").inc()
        status, body = await http_get(server.port, "/metrics")
        assert status == 200
        assert 'pmem_events_total{outcome="processed"} 1.0' in body
        assert "pmem_ready 1.0" in body
        assert (await http_get(server.port, "/nope"))[0] == 404
    finally:
        await server.stop()


async def test_liveness_fails_while_the_event_loop_is_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib.error
    import urllib.request

    import worker.health

    monkeypatch.setattr(worker.health, "LOOP_TIMEOUT_S", 0.2)

    async def readiness() -> str | None:
        return None

    server = await HealthServer(metrics=Metrics(), readiness=readiness, host="127.0.0.1").start()

    def probe() -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    try:
        assert await asyncio.to_thread(probe) == 200
        result: list[int] = []
        prober = threading.Thread(target=lambda: result.append(probe()))
        prober.start()
        prober.join(timeout=10)  # blocks the event loop on purpose until the probe has answered
        assert result == [503]
    finally:
        await server.stop()


def test_json_logs_carry_the_event_id() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("pmem.test.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with event_context("e-1"):
            logger.info("inside", extra={"outcome": "processed"})
        logger.info("outside")
    finally:
        logger.removeHandler(handler)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["event_id"] == "e-1" and first["outcome"] == "processed" and first["message"] == "inside"
    assert "event_id" not in second
