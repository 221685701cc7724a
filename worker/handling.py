"""Handling one JetStream delivery: parse, process within PMEM_EVENT_TIMEOUT_S while in-progress
acks keep it alive, publish `memory.extracted`, ack; a failure is retried later (nack with a delay)
or dead-lettered (`worker.publishing`). Database calls wait out an outage in place (`OutageWaits`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from faststream.nats.message import NatsMessage
from nats.aio.msg import Msg

from config import Settings
from extraction.errors import PmemProviderError
from worker.events import EventLimits, InvalidEvent, parse_event
from worker.lifecycle import cancel_and_wait
from worker.logs import event_context
from worker.metrics import Metrics
from worker.pipeline import PipelineDeps, process_event
from worker.planning import EventDeadlineExceeded, decide_failure, is_database_unavailable
from worker.publishing import Publisher
from worker.tracing import event_span, span

log = logging.getLogger("pmem.worker")

T = TypeVar("T")


def heartbeat_interval(ack_wait_s: float) -> float:
    """How often to send in-progress acks: well inside ack_wait, so one late beat does not expire it."""
    return max(0.1, ack_wait_s / 3)


async def pause_unless_stopping(stopping: asyncio.Event, seconds: float) -> None:
    """Wait `seconds`, or less when stopping starts meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)


@dataclasses.dataclass(kw_only=True)
class OutageWaits:
    """The worker's `DbRunner`: a database call that finds the database unreachable waits and is
    tried again, the message kept alive meanwhile, instead of burning a delivery."""

    settings: Settings
    metrics: Metrics
    stopping: asyncio.Event

    async def __call__(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run a database call; while the database is unreachable, wait and try again (up to
        PMEM_DB_OUTAGE_TIMEOUT_S, or until shutdown) instead of burning a delivery."""
        deadline = time.monotonic() + self.settings.db_outage_timeout_s
        pause = 0.1
        while True:
            try:
                return await call()
            except Exception as exc:
                if not is_database_unavailable(exc):
                    raise
                if time.monotonic() >= deadline or self.stopping.is_set():
                    raise
                self.metrics.db_waits.inc()
                log.warning(
                    "database unavailable during %s (%s: %s); waiting %.1fs",
                    operation,
                    type(exc).__name__,
                    str(exc).splitlines()[0] if str(exc) else "",
                    pause,
                )
                await pause_unless_stopping(self.stopping, pause)
                pause = min(pause * 2, 5.0)


async def whole_message(msg: Any) -> Any:
    """The subscriber's decoder: the message as it came."""
    # Our own decoder: the handler gets FastStream's message itself (raw nats-py message inside)
    # and parses the body with `parse_event`. FastStream's default would json-decode by
    # Content-Type before the handler runs, and a malformed body would fail outside the DLQ logic.
    return msg


@dataclasses.dataclass(kw_only=True)
class EventHandler:
    """The subscriber's handler: one delivery at a time per call, up to PMEM_CONCURRENCY at once."""

    settings: Settings
    metrics: Metrics
    deps: PipelineDeps
    publisher: Publisher
    stopping: asyncio.Event

    def __post_init__(self) -> None:
        self.limits = EventLimits.from_settings(self.settings)

    async def on_message(self, message: NatsMessage) -> None:
        """FastStream handler: one JetStream message (ack/nack/term are ours, AckPolicy.MANUAL)."""
        raw: Msg = message.raw_message
        started = time.perf_counter()
        self.metrics.in_flight.inc()
        try:
            with event_span(raw.headers, **{"messaging.destination.name": raw.subject}):
                await self.handle(raw)
        except Exception:
            # Nothing acked: JetStream redelivers after ack_wait. Should not happen; logged loudly.
            log.exception("unhandled error while handling a message; it will be redelivered")
        finally:
            self.metrics.in_flight.dec()
            self.metrics.event_duration.observe(time.perf_counter() - started)

    async def handle(self, raw: Msg) -> None:
        """Parse, process, publish and ack one delivery; dead-letter or retry it when it fails."""
        s = self.settings
        delivered = raw.metadata.num_delivered or 1
        with span("pmem.parse"):
            parsed = parse_event(raw.data, self.limits)
        if isinstance(parsed, InvalidEvent):
            with event_context(parsed.event_id):
                await self.publisher.dead_letter(
                    raw,
                    label=f"invalid_{parsed.kind}",
                    reason=f"invalid event: {parsed.reason}",
                    event_id=parsed.event_id,
                    team_id=parsed.team_id,
                )
            return
        event_id = str(parsed.event_id)
        team_id = None if parsed.team_id is None else str(parsed.team_id)
        with event_context(event_id):
            if delivered > s.max_deliver:
                # the previous delivery ended without an ack/nack: the process died or hung on it
                await self.publisher.dead_letter(
                    raw,
                    label="delivery_limit",
                    reason=f"delivered {delivered} times (PMEM_MAX_DELIVER={s.max_deliver}) without "
                    "completing; the worker probably crashed or timed out on it",
                    event_id=event_id,
                    team_id=team_id,
                )
                return
            # PMEM_EVENT_TIMEOUT_S bounds the whole delivery; when it passes, the in-progress
            # acks stop with it (they live inside the deadline) and the event is retried or
            # dead-lettered like any transient failure
            deadline = asyncio.timeout(s.event_timeout_s)
            try:
                async with self.keep_alive(raw), deadline:
                    outcome = await process_event(parsed, self.deps, check_processed=delivered > 1)
            except Exception as exc:
                failure: Exception = exc
                if deadline.expired():
                    failure = EventDeadlineExceeded(
                        f"the event took longer than PMEM_EVENT_TIMEOUT_S={s.event_timeout_s:g}s"
                    )
                await self.on_failure(raw, failure, delivered=delivered, event_id=event_id, team_id=team_id)
                return
            if outcome.status == "processed":
                await self.publisher.extracted(parsed, outcome.written)
                self.metrics.last_processed.set(time.time())
            elif outcome.status == "duplicate" and outcome.earlier:
                # a duplicate: the delivery that committed it may have died before publishing
                await self.publisher.extracted(parsed, outcome.earlier)
            await raw.ack()
            self.metrics.events.labels(outcome=outcome.status).inc()
            log.info(
                "event %s: %d written, %d dropped, %d rejected",
                outcome.status,
                len(outcome.written),
                len(outcome.dropped),
                outcome.rejected,
                extra={
                    "outcome": outcome.status,
                    "delivery": delivered,
                    "written": [f"{w.scope}:{w.key}:{w.action}" for w in outcome.written],
                },
            )

    async def on_failure(
        self, raw: Msg, exc: Exception, *, delivered: int, event_id: str, team_id: str | None = None
    ) -> None:
        """Retry a failed delivery later (nack with a delay) or dead-letter it (`decide_failure`)."""
        s = self.settings
        if isinstance(exc, PmemProviderError):  # tokens spent by failed attempts still cost money
            self.metrics.llm_tokens.labels(kind="prompt").inc(exc.usage.prompt_tokens)
            self.metrics.llm_tokens.labels(kind="completion").inc(exc.usage.completion_tokens)
        if self.stopping.is_set() and is_database_unavailable(exc):
            # shutting down in the middle of a database outage: hand the event back untouched
            await raw.nak(delay=s.retry_delay_s)
            self.metrics.events.labels(outcome="shutdown").inc()
            return
        decision = decide_failure(
            exc,
            delivery_count=delivered,
            max_deliver=s.max_deliver,
            retry_delay_s=s.retry_delay_s,
            max_retry_delay_s=s.max_retry_delay_s,
        )
        if decision.action == "retry":
            await raw.nak(delay=decision.delay_s)
            self.metrics.events.labels(outcome="retried").inc()
            self.metrics.retries.labels(reason=decision.label).inc()
            log.warning(
                "delivery %d/%d failed (%s), retrying in %.1fs: %s",
                delivered,
                s.max_deliver,
                decision.label,
                decision.delay_s,
                decision.reason,
                extra={"failure": decision.label},
            )
            return
        await self.publisher.dead_letter(
            raw, label=decision.label, reason=decision.reason, event_id=event_id, team_id=team_id
        )

    @contextlib.asynccontextmanager
    async def keep_alive(self, raw: Msg) -> AsyncIterator[None]:
        """In-progress acks every ack_wait/3 while the block runs (long LLM calls, database waits)."""
        interval = heartbeat_interval(self.settings.ack_wait_s)

        async def beat() -> None:
            while True:
                await asyncio.sleep(interval)
                with contextlib.suppress(Exception):  # a missed beat is not fatal; ack_wait has slack
                    await raw.in_progress()  # a plain publish: nothing in it swallows a cancel

        task = asyncio.create_task(beat())
        try:
            yield
        finally:
            await cancel_and_wait(task, what="the in-progress acks of an event")
