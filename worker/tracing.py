"""OpenTelemetry tracing of the worker (optional extra `otel`; without it every call here is a no-op).

One span per event (`pmem.event`, a consumer span whose parent is the W3C `traceparent` the
platform put in the NATS headers, when it did), with a child span per stage: `pmem.parse`,
`pmem.policy`, `pmem.llm`, `pmem.embeddings`, `pmem.db <operation>` (the write among them) and
`pmem.publish`.

Export: `configure_tracing()` installs an SDK tracer provider with the OTLP exporter when the
standard variables ask for it (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
or `OTEL_TRACES_EXPORTER=otlp`); the exporter itself reads the other `OTEL_*` variables (headers,
protocol, timeout), and `OTEL_SERVICE_NAME` names the service (default `pmem-worker`).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger("pmem.tracing")

P = ParamSpec("P")
R = TypeVar("R")

TRACER_NAME = "persona_memory.worker"
AVAILABLE = importlib.util.find_spec("opentelemetry") is not None


def _tracer() -> Any:
    from opentelemetry import trace

    return trace.get_tracer(TRACER_NAME)


def recording() -> bool:
    """Whether a tracer provider is installed (by `configure_tracing` or the host application):
    without one every span would be a no-op that still costs a context switch-over per stage."""
    if not AVAILABLE:
        return False
    global _idle_providers
    if _idle_providers is None:
        from opentelemetry import trace

        _idle_providers = (trace.get_tracer_provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    get_provider, idle = _idle_providers
    return not isinstance(get_provider(), idle)


_idle_providers: tuple[Callable[[], Any], tuple[type, ...]] | None = None


# what `span` and `event_span` return without a tracer provider: one shared, stateless no-op
# (a generator-based context manager per stage cost more than the stage's own bookkeeping)
_NOT_TRACED: AbstractContextManager[None] = nullcontext()


def span(name: str, **attributes: str | int | float | bool) -> AbstractContextManager[None]:
    """A child span of the current one for the `with` block (exceptions are recorded on it)."""
    if not recording():
        return _NOT_TRACED
    return _tracer().start_as_current_span(name, attributes=attributes)  # type: ignore[no-any-return]


def event_span(
    headers: Mapping[str, str] | None, **attributes: str | int | float | bool
) -> AbstractContextManager[None]:
    """The span of one event, continuing the trace of the `traceparent` header when present."""
    if not recording():
        return _NOT_TRACED
    return _event_span(headers, attributes)


@contextmanager
def _event_span(
    headers: Mapping[str, str] | None, attributes: Mapping[str, str | int | float | bool]
) -> Iterator[None]:
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    parent = propagate.extract(dict(headers or {}))
    with _tracer().start_as_current_span(
        "pmem.event", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
    ):
        yield


def traced(name: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Decorator: each call of the coroutine function runs in a span called `name`."""

    def wrap(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(function)
        async def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            with span(name):
                return await function(*args, **kwargs)

        return inner

    return wrap


def export_requested(environ: Mapping[str, str]) -> bool:
    """Whether the standard OTEL_* variables ask for an OTLP export of traces."""
    if environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporters = {e.strip() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()}
    if "none" in exporters:
        return False
    endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return bool(endpoint) or "otlp" in exporters


def configure_tracing(environ: Mapping[str, str] | None = None) -> bool:
    """Install the OTLP-exporting tracer provider when the environment asks for it and the `otel`
    extra is installed; True when installed."""
    env = os.environ if environ is None else environ
    if not export_requested(env):
        return False
    if not AVAILABLE or importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is None:
        log.warning(
            "OTEL_* asks for trace export but the otel extra is not installed: "
            "pip install 'persona-memory[otel]'; tracing stays off"
        )
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", "pmem-worker")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True
