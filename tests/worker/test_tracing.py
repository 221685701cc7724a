"""Tracing of a real worker with the OpenTelemetry SDK's in-memory exporter: one consumer span per
event, continuing the platform's W3C traceparent from the NATS headers, with a child span per stage."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import worker.tracing
from tests.worker.worker_harness import Harness, conversation, wait_for
from worker.tracing import export_requested, span

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"

_exporter = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The in-memory exporter behind the global tracer provider (installed once per process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    _exporter.clear()
    yield _exporter
    _exporter.clear()


async def test_an_event_is_one_trace_continuing_the_platforms_traceparent(
    harness: Harness, spans: InMemorySpanExporter
) -> None:
    h = harness
    event = conversation("I'm vegetarian.", "Noted!")
    headers = {"Nats-Msg-Id": event["event_id"], "traceparent": f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"}
    async with h.worker():
        await h.ensure_streams()
        await h.nc.jetstream().publish(h.base["subject"], json.dumps(event).encode(), headers=headers)

        async def traced_to_the_end() -> bool:
            return any(s.name == "pmem.event" for s in spans.get_finished_spans())

        await wait_for(traced_to_the_end, what="the event's span to end")
    finished = spans.get_finished_spans()
    [root] = [s for s in finished if s.name == "pmem.event"]
    assert root.kind == trace.SpanKind.CONSUMER
    assert format(root.context.trace_id, "032x") == TRACE_ID
    assert root.parent is not None and format(root.parent.span_id, "016x") == PARENT_SPAN_ID
    in_trace = {s.name for s in finished if s.context.trace_id == root.context.trace_id}
    for stage in (
        "pmem.parse",
        "pmem.policy",
        "pmem.llm",
        "pmem.embeddings",
        "pmem.db write_event",
        "pmem.publish",
    ):
        assert stage in in_trace, f"no {stage} span in {sorted(in_trace)}"


async def test_an_event_without_traceparent_starts_its_own_trace(
    harness: Harness, spans: InMemorySpanExporter
) -> None:
    h = harness
    async with h.worker():
        await h.publish(conversation("I live in Oslo.", "Ok."))

        async def traced() -> bool:
            return any(s.name == "pmem.event" for s in spans.get_finished_spans())

        await wait_for(traced, what="the event's span")
    [root] = [s for s in spans.get_finished_spans() if s.name == "pmem.event"]
    assert root.parent is None


def test_without_opentelemetry_spans_are_no_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker.tracing, "AVAILABLE", False)
    ran = []
    with span("pmem.parse"):
        ran.append(True)
    assert ran == [True]


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
    ],
)
def test_export_follows_the_standard_otel_variables(environ: dict[str, str], expected: bool) -> None:
    assert export_requested(environ) is expected
