"""Prometheus metrics of the worker (prefix `pmem_`), on a dedicated registry so tests and the
benchmark can create a fresh set. Names are referenced by deploy/ (dashboard and alert rules);
tests/deploy checks that every name used there exists here and that a real Prometheus scraping
a real worker answers every dashboard query."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Up to 300 s: a slow LLM under rate limiting can take minutes end to end. 50 ms steps over the
# 0.25–0.5 s an event takes with a fast LLM and 100 ms steps up to 1 s, so that a p99 compares
# between runs: interpolated inside 250 ms buckets, a p99 just past 0.5 s read as 0.68 s
# (bench/README.md, "What the worker's design rests on"). Database operations get 25 ms steps up to 0.1 s.
DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
    0.6, 0.7, 0.8, 0.9, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip

# `outcome` label values of pmem_events_total (bounded).
OUTCOMES: tuple[str, ...] = ("processed", "duplicate", "disabled", "retried", "dlq", "shutdown")

# `kind` label values of pmem_publish_failures_total (bounded; exported as zeros from the start).
PUBLISH_KINDS: tuple[str, ...] = ("extracted", "dlq")


def _duration_histogram(
    name: str, documentation: str, registry: CollectorRegistry, labels: Sequence[str] = ()
) -> Histogram:
    """A histogram of seconds over `DURATION_BUCKETS`."""
    return Histogram(name, documentation, labels, buckets=DURATION_BUCKETS, registry=registry)


@dataclass(kw_only=True)
class Metrics:
    """All worker metrics, registered on `registry`."""

    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        r = self.registry
        self.events = Counter(
            "pmem_events_total", "conversation.ended events handled, by outcome", ["outcome"], registry=r
        )
        self.in_flight = Gauge("pmem_events_in_flight", "events being processed right now", registry=r)
        self.event_duration = _duration_histogram(
            "pmem_event_duration_seconds", "end-to-end handling time of one event (receive to ack)", r
        )
        self.llm_duration = _duration_histogram(
            "pmem_llm_duration_seconds",
            "time spent in extraction (LLM calls incl. client retries) per event",
            r,
        )
        self.embedding_duration = _duration_histogram(
            "pmem_embedding_duration_seconds", "time of the batched embeddings call per event", r
        )
        self.storing_wait = _duration_histogram(
            "pmem_storing_wait_seconds",
            "time an event waited for a storing slot (PMEM_WRITES_IN_FLIGHT) after its LLM call",
            r,
        )
        self.db_duration = _duration_histogram(
            "pmem_db_duration_seconds", "database time per operation", r, ["operation"]
        )
        self.llm_tokens = Counter(
            "pmem_llm_tokens_total", "LLM tokens spent, by kind (prompt, completion)", ["kind"], registry=r
        )
        self.llm_calls = Counter("pmem_llm_calls_total", "LLM calls made by the extractor", registry=r)
        self.llm_retries = Counter(
            "pmem_llm_retries_total",
            "LLM calls retried inside the extractor, by reason (rate_limited, server_error, malformed, …)",
            ["reason"],
            registry=r,
        )
        self.memories_written = Counter(
            "pmem_memories_written_total",
            "memories written, by scope and store action (created, updated, revision_proposed, unchanged)",
            ["scope", "action"],
            registry=r,
        )
        self.candidates_dropped = Counter(
            "pmem_candidates_dropped_total",
            "extracted candidates not written, by reason",
            ["reason"],
            registry=r,
        )
        self.retries = Counter(
            "pmem_retries_total", "events nacked for redelivery, by failure reason", ["reason"], registry=r
        )
        self.db_waits = Counter(
            "pmem_db_unavailable_total",
            "database calls that failed because the database was unreachable (then waited for)",
            registry=r,
        )
        self.dlq = Counter(
            "pmem_dlq_total", "events sent to the dead-letter subject, by reason", ["reason"], registry=r
        )
        self.publish_failures = Counter(
            "pmem_publish_failures_total",
            "publishes that failed, by subject kind (extracted, dlq)",
            ["kind"],
            registry=r,
        )
        self.ready = Gauge("pmem_ready", "1 when NATS is connected and the database reachable", registry=r)
        self.consumer_pending = Gauge(
            "pmem_consumer_pending_messages",
            "messages waiting in the durable consumer (not yet delivered + delivered but unacked)",
            registry=r,
        )
        self.last_processed = Gauge(
            "pmem_last_processed_timestamp_seconds",
            "unix time of the last event whose transaction committed",
            registry=r,
        )
        for outcome in OUTCOMES:
            self.events.labels(outcome=outcome)  # export zeros so rate() works from the start
        for kind in ("prompt", "completion"):
            self.llm_tokens.labels(kind=kind)
        for kind in PUBLISH_KINDS:
            self.publish_failures.labels(kind=kind)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)
