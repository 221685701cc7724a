"""The worker: a FastStream NATS app with one durable JetStream pull consumer.

Delivery semantics (read this first):

- At least once from NATS, exactly once into Postgres: the event's memories and its
  processed-event row are one transaction, and the message is acked only after it committed. A
  redelivery (crash, lost ack, a second publish outside the dedup window) finds the processed-event
  row and writes nothing.
- `memory.extracted` is published after the commit, before the ack, with `Nats-Msg-Id:
  extracted:<event_id>`; the ack follows the publish on the same connection without waiting for
  its PubAck, which `PendingPubAcks` checks in the background (failures are logged and counted).
  A duplicate delivery publishes it again, rebuilt from the audit trail, in case the delivery that
  committed died before publishing; within the output stream's duplicate window JetStream drops
  the second copy, so the republish is idempotent.
- Transient failures (LLM/embeddings 429, 5xx, timeouts, connection errors; unexpected errors) are
  nacked with a delay: the provider's Retry-After when given, else exponential backoff from
  PMEM_RETRY_DELAY_S. The PMEM_MAX_DELIVER-th failed delivery goes to the DLQ.
- A database outage is not the event's fault: a failing database call waits in place (the message
  kept alive with in-progress acks, so no delivery is burnt) for up to PMEM_DB_OUTAGE_TIMEOUT_S,
  then the event is nacked like any transient failure.
- Invalid events and permanent errors go to the DLQ at once. DLQ = publish the original body and
  the reason (also in the `Pmem-Dlq-Reason` header) to PMEM_DLQ_SUBJECT, wait for JetStream to
  store it, then `term` the message. If the DLQ publish fails, the message is nacked, not dropped.
- The worker counts deliveries itself, so a message whose processing crashes the process is
  dead-lettered on its next delivery past PMEM_MAX_DELIVER instead of being silently parked by the
  server. The consumer's own max_deliver is PMEM_MAX_DELIVER + 2: finite, so a message whose DLQ
  publish keeps failing (bounded retries, PMEM_DLQ_PUBLISH_ATTEMPTS) cannot cycle forever.
- A DLQ record always fits the server's max_payload: an over-large body is truncated, with its
  original size and stream sequence recorded.
- Deadlines: one delivery of an event is bounded by PMEM_EVENT_TIMEOUT_S (every LLM chunk and
  retry, embeddings, database waits); its in-progress acks end with it, and it is retried later or
  dead-lettered (`deadline_exhausted`). Start-up is bounded by PMEM_STARTUP_TIMEOUT_S.
- SIGTERM/SIGINT: in any phase, start-up included. Running: stop fetching, let in-flight events
  finish (PMEM_SHUTDOWN_TIMEOUT_S), close; a second signal exits at once.

FastStream owns the connection, the pull loop and the N concurrent handlers (`max_workers`); acks,
nacks, in-progress and publishes use the raw nats-py message and JetStream context underneath.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from faststream.middlewares import AckPolicy
from faststream.nats import JStream, NatsBroker, PullSub
from faststream.nats.message import NatsMessage
from nats.aio.msg import Msg
from nats.js.api import AckPolicy as JsAckPolicy
from nats.js.api import ConsumerConfig, DeliverPolicy, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.manager import JetStreamManager

from extraction.errors import PmemProviderError, RetryPolicy
from extraction.typing import Embedder, Extractor
from store.protocols import MemoryStore
from store.services.settings_cache import SettingsCache
from worker.events import (
    DLQ_REASON_HEADER,
    ConversationEnded,
    DeadLetter,
    EventLimits,
    ExtractedMemoryRef,
    InvalidEvent,
    MemoryExtracted,
    parse_event,
)
from worker.health import HealthServer
from worker.logs import event_context
from worker.metrics import Metrics
from worker.pipeline import (
    EventDeadlineExceeded,
    PipelineDeps,
    Written,
    decide_failure,
    is_database_unavailable,
    one_line,
    process_event,
)
from worker.pubacks import PendingPubAcks
from worker.settings import Settings
from worker.tracing import configure_tracing, event_span, span, traced

log = logging.getLogger("pmem.worker")

T = TypeVar("T")

PUBLISH_TIMEOUT_S = 5.0
# Fields of the consumer config we set; a difference in any of them on an existing durable is
# ignored by NATS, so we warn (ConsumerConfig fields, compared as the server reports them).
CHECKED_CONSUMER_FIELDS = (
    "filter_subject",
    "ack_policy",
    "ack_wait",
    "max_deliver",
    "deliver_policy",
    "max_ack_pending",
)


class ConfigurationError(RuntimeError):
    """The NATS setup cannot work as configured; the message names the fix."""


class StartupError(RuntimeError):
    """The worker could not start (a dependency unreachable, or start-up past its deadline); the
    message is one line naming what it was doing."""


@contextlib.contextmanager
def signals_set(event: asyncio.Event) -> Iterator[None]:
    """SIGTERM/SIGINT set `event` while the block runs (in every phase: start-up included). A
    second signal during the graceful shutdown ends the process at once (nothing unacked is lost:
    JetStream redelivers it)."""
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if event.is_set():
            log.warning("second signal: exiting without waiting for in-flight events")
            logging.shutdown()
            os._exit(1)
        event.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        yield
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def safe_url(url: str) -> str:
    """`url` without user info (a password in a NATS or Postgres URL never reaches a log line)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    host = authority.rsplit("@", 1)[-1]
    return f"{scheme}://{host}{slash}{tail.split('?', 1)[0]}"


async def start_bounded(
    settings: Settings,
    stop: asyncio.Event,
    *,
    migrate_first: bool = False,
    build: Callable[[Settings], Awaitable[Worker]] | None = None,
) -> Worker | None:
    """Open the store, build and start the worker within PMEM_STARTUP_TIMEOUT_S. Returns None when
    `stop` was set first (a signal during start-up); raises `StartupError` (one line: the step and
    why) when a step fails or the deadline passes. Whatever was opened is closed on the way out."""
    phase = f"opening the database {safe_url(settings.database_url)}"
    worker: Worker | None = None
    log.info("start-up: %s", phase)

    async def steps() -> Worker:
        nonlocal phase, worker
        if migrate_first:
            from store.migrate import migrate_async

            phase = f"migrating the database {safe_url(settings.database_url)}"
            from extraction.embeddings import embedding_identity

            report = await migrate_async(
                settings.database_url, settings.embedding_dim, embedding=embedding_identity(settings)
            )
            log.info("schema ready: %s", report)
            phase = f"opening the database {safe_url(settings.database_url)}"
        worker = await (build or build_worker)(settings)
        await worker.start()
        return worker

    def doing() -> str:
        return worker.phase if worker is not None else phase

    task = asyncio.create_task(steps())
    stopped = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait(
            {task, stopped}, timeout=settings.startup_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stopped.cancel()
    if task in done:
        exc = task.exception()
        if exc is None:
            return task.result()
        if worker is not None:
            await worker.close()
        from store.migrate import SchemaError

        if isinstance(exc, ConfigurationError | StartupError | SchemaError):
            raise exc
        raise StartupError(f"start-up failed while {doing()}: {one_line(exc)}") from exc
    what = doing()
    await cancel_and_wait(task, what=f"start-up ({what})")
    if worker is not None:
        await worker.close()
    if stop.is_set():
        log.info("signal received during start-up (%s): exiting", what)
        return None
    raise StartupError(
        f"start-up did not finish within PMEM_STARTUP_TIMEOUT_S={settings.startup_timeout_s:g}s while {what}"
    )


# ---------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------


def consumer_config(settings: Settings) -> ConsumerConfig:
    """The durable pull consumer the worker wants (max_deliver: see `consumer_max_deliver`)."""
    return ConsumerConfig(
        durable_name=settings.durable,
        name=settings.durable,
        filter_subject=settings.subject,
        ack_policy=JsAckPolicy.EXPLICIT,
        ack_wait=settings.ack_wait_s,
        max_deliver=consumer_max_deliver(settings),
        deliver_policy=DeliverPolicy.ALL,
        # Room for every worker's in-flight events plus the nacked ones waiting for their delay.
        max_ack_pending=max(1000, settings.concurrency * 16),
    )


def consumer_max_deliver(settings: Settings) -> int:
    """JetStream's own delivery limit: finite, so nothing cycles forever, and above
    PMEM_MAX_DELIVER so the worker dead-letters first: delivery max_deliver+1 is the one that
    finds a crashed or hung event, one more is room for a DLQ publish that failed."""
    return settings.max_deliver + 2


# Room for the DLQ message's headers (the reason header is capped at 1000 characters).
DLQ_HEADER_ALLOWANCE = 4096


def dlq_record_limit(max_payload: int) -> int:
    """Bytes a DLQ record may take so that record plus headers fit the server's max_payload."""
    return max(1024, max_payload - DLQ_HEADER_ALLOWANCE)


def consumer_config_diff(existing: ConsumerConfig, wanted: ConsumerConfig) -> dict[str, tuple[Any, Any]]:
    """Fields of `CHECKED_CONSUMER_FIELDS` whose existing value differs: {field: (existing, wanted)}."""
    diff: dict[str, tuple[Any, Any]] = {}
    for name in CHECKED_CONSUMER_FIELDS:
        have, want = getattr(existing, name), getattr(wanted, name)
        if name == "filter_subject" and not have and existing.filter_subjects:
            have = ",".join(existing.filter_subjects)
        if isinstance(have, float) or isinstance(want, float):
            if have is None or want is None or abs(float(have) - float(want)) > 1e-3:
                diff[name] = (have, want)
        elif have != want:
            diff[name] = (have, want)
    return diff


def heartbeat_interval(ack_wait_s: float) -> float:
    """How often to send in-progress acks: well inside ack_wait, so one late beat does not expire it."""
    return max(0.1, ack_wait_s / 3)


# How long stopping waits for a cancelled helper task (the consumer watch, an event's in-progress
# acks, an interrupted start-up) before it leaves it behind
TASK_STOP_TIMEOUT_S = 5.0
# A swallowed cancel (nats-py's connect loop retries after a refused connection that lands with
# it) is repeated this often while `cancel_and_wait` waits
RECANCEL_EVERY_S = 0.1


async def unless_stopped(work: Awaitable[T], stop: asyncio.Event, *, what: str) -> T | None:
    """`work`'s result, or None when `stop` is set first: then `work` is cancelled and waited for
    (`cancel_and_wait`, which outlasts a swallowed cancellation)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        return task.result()
    await cancel_and_wait(task, what=what)
    return None


async def cancel_and_wait(
    task: asyncio.Task[Any], *, what: str, timeout_s: float = TASK_STOP_TIMEOUT_S
) -> None:
    """Cancel `task` and wait at most `timeout_s` for it to end. A task can swallow its
    cancellation (Python 3.11's `asyncio.wait_for`, used inside nats-py's requests and its connect,
    returns the result when the awaited call completes at the moment it is cancelled), so the
    cancel is repeated every `RECANCEL_EVERY_S`; a task still running at the deadline is left
    behind with a warning: stopping must not hang on it."""
    deadline = time.monotonic() + timeout_s
    done: set[asyncio.Task[Any]] = set()
    while not done and (left := deadline - time.monotonic()) > 0:
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=min(RECANCEL_EVERY_S, left))
    if not done:
        log.warning("%s did not stop within %.0fs of being cancelled; leaving it behind", what, timeout_s)
    elif not task.cancelled() and task.exception() is not None:
        log.debug("%s ended with %r", what, task.exception())


def dlq_headers(*, reason: str, label: str, msg_id: str) -> dict[str, str]:
    """Headers of a DLQ message: reason (one line, bounded), label, and a Nats-Msg-Id for dedup."""
    one_line = " ".join(reason.split())
    return {
        DLQ_REASON_HEADER: one_line[:1000],
        "Pmem-Dlq-Label": label,
        "Nats-Msg-Id": msg_id,
        "Content-Type": "application/json",
    }


# ---------------------------------------------------------------------------------------------
# Shell
# ---------------------------------------------------------------------------------------------


async def _whole_message(msg: Any) -> Any:
    # Our own decoder: the handler gets FastStream's message itself (raw nats-py message inside)
    # and parses the body with `parse_event`. FastStream's default would json-decode by
    # Content-Type before the handler runs, and a malformed body would fail outside the DLQ logic.
    return msg


@dataclasses.dataclass(kw_only=True)
class Worker:
    """One worker process: consumer, pipeline, publishes, health server."""

    settings: Settings
    store: MemoryStore
    extractor: Extractor
    embedder: Embedder
    metrics: Metrics = dataclasses.field(default_factory=Metrics)
    serve_http: bool = True

    broker: NatsBroker = dataclasses.field(init=False)
    health: HealthServer | None = dataclasses.field(default=None, init=False)
    _stopping: asyncio.Event = dataclasses.field(default_factory=asyncio.Event, init=False)
    _background: list[asyncio.Task[None]] = dataclasses.field(default_factory=list, init=False)
    _started: bool = dataclasses.field(default=False, init=False)
    _extracted_js: JetStreamContext | None = dataclasses.field(default=None, init=False)
    phase: str = dataclasses.field(default="not started", init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.limits = EventLimits.from_settings(s)
        self.deps = PipelineDeps(
            store=self.store,
            extractor=self.extractor,
            embedder=self.embedder,
            metrics=self.metrics,
            run_db=self._run_db,
            settings_cache=SettingsCache(ttl_s=s.settings_cache_s),
            storing_slots=asyncio.Semaphore(s.writes_in_flight) if s.writes_in_flight else None,
        )
        self.extracted_pubacks = PendingPubAcks(
            timeout_s=PUBLISH_TIMEOUT_S, on_failure=self._extracted_publish_failed
        )
        self.broker = NatsBroker(
            s.nats_url,
            name=f"pmem-worker/{s.durable}",
            max_reconnect_attempts=-1,  # a worker outlives NATS restarts
            reconnect_time_wait=1,
            graceful_timeout=s.shutdown_timeout_s,
            logger=logging.getLogger("pmem.faststream"),
            log_level=logging.DEBUG,
            # no dependency injection: the one handler takes the message (see `_whole_message`);
            # FastDepends' per-message model solving cost ~10% of the worker's CPU
            apply_types=False,
        )
        subscriber = self.broker.subscriber(
            s.subject,
            stream=JStream(name=s.stream, declare=False),  # declared by `_ensure_streams`
            durable=s.durable,
            config=consumer_config(s),
            # one message per fetch: at most about one fetched message waits for a free handler
            # (its ack_wait clock running), never a whole batch behind busy handlers
            pull_sub=PullSub(batch_size=1, timeout=1.0),
            max_workers=s.concurrency,
            ack_policy=AckPolicy.MANUAL,
            decoder=_whole_message,
        )
        subscriber(self._on_message)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the health server (so /readyz reports a stuck start-up), connect, declare streams
        and the consumer, start consuming. `self.phase` names the step (for start-up errors)."""
        if self.serve_http and self.health is None:
            self._enter(f"starting the health server on port {self.settings.http_port}")
            self.health = await HealthServer(
                metrics=self.metrics,
                readiness=self.readiness,
                host=self.settings.http_host,
                port=self.settings.http_port,
            ).start()
        self._enter(f"connecting to NATS at {safe_url(self.settings.nats_url)}")
        await self.broker.connect()
        # one context for every `memory.extracted` publish: its PubAck inbox is subscribed once
        self._extracted_js = self.broker.connection.jetstream()
        jsm = self.broker.connection.jsm()
        self._enter("declaring the JetStream streams and the consumer")
        await self._ensure_streams(jsm)
        await self._ensure_consumer(jsm)
        self._enter("starting the consumer")
        await self.broker.start()
        self._started = True
        self.phase = "running"
        self._background.append(asyncio.create_task(self._watch_consumer(jsm)))
        log.info(
            "consuming %s (stream %s, durable %s) with %d handlers",
            self.settings.subject,
            self.settings.stream,
            self.settings.durable,
            self.settings.concurrency,
        )

    def _enter(self, phase: str) -> None:
        self.phase = phase
        log.info("start-up: %s", phase)

    async def stop(self) -> None:
        """Stop fetching, let in-flight events finish (PMEM_SHUTDOWN_TIMEOUT_S), then disconnect."""
        self._stopping.set()
        for task in self._background:
            await cancel_and_wait(task, what="the consumer watch")
        self._background.clear()
        if self._started:
            started = time.monotonic()
            try:
                # running handlers first, then the PubAcks they left outstanding, then the drain
                # (which would drop a PubAck still on its way)
                for subscriber in self.broker.subscribers:
                    await subscriber.stop()
                if outstanding := await self.extracted_pubacks.wait(PUBLISH_TIMEOUT_S):
                    log.warning("stopping with %d memory.extracted PubAcks outstanding", outstanding)
                await self.broker.stop()
            except (nats.errors.ConnectionReconnectingError, nats.errors.ConnectionClosedError) as exc:
                # NATS went away first (a Ctrl-C reaching the demo's nats-server too, or both
                # stopped by the platform): nothing to drain; what is unacked is redelivered
                log.warning(
                    "NATS connection lost during shutdown (%s); unacknowledged events will be redelivered",
                    type(exc).__name__,
                )
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.broker.connection.close(), timeout=2.0)
            log.info("consumer stopped after %.1fs", time.monotonic() - started)
            self._started = False
        else:
            # start-up was interrupted (signal, timeout): close a half-open connection, bounded
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.broker.stop(), timeout=2.0)
        if self.health is not None:
            await self.health.stop()
            self.health = None

    async def close(self) -> None:
        """Stop, then close the extractor, the embedder (if it holds a client) and the store."""
        await self.stop()
        await self.extractor.close()
        from extraction.embeddings import close_embedder

        await close_embedder(self.embedder)
        await self.store.close()

    async def run_until(self, stop: asyncio.Event) -> None:
        """Run (started) until `stop` is set, then shut down gracefully."""
        try:
            await stop.wait()
            log.info("signal received: finishing in-flight events, then exiting")
        finally:
            await self.close()

    async def readiness(self) -> str | None:
        """None when NATS is connected and the database answers; else what is wrong."""
        if not self._started or not self.broker.connection.is_connected:
            return "not connected to NATS"
        try:
            await asyncio.wait_for(self.store.ping(), timeout=3)
        except Exception as exc:
            return f"database unreachable: {type(exc).__name__}: {exc}"
        return None

    # -- NATS setup ----------------------------------------------------------------------------

    async def _ensure_streams(self, jsm: JetStreamManager) -> None:
        s = self.settings
        await ensure_stream(jsm, s.stream, [s.subject], create=s.create_stream, max_age_s=s.stream_max_age)
        await ensure_stream(
            jsm,
            s.output_stream,
            [s.dlq_subject, s.extracted_subject],
            create=s.create_stream,
            max_age_s=s.dlq_max_age,
        )

    async def _ensure_consumer(self, jsm: JetStreamManager) -> None:
        s = self.settings
        wanted = consumer_config(s)
        try:
            info = await jsm.consumer_info(s.stream, s.durable)
        except nats.js.errors.NotFoundError:
            await jsm.add_consumer(s.stream, config=wanted)
            log.info("created durable consumer %s on stream %s", s.durable, s.stream)
            return
        diff = consumer_config_diff(info.config, wanted)
        if diff:
            details = ", ".join(f"{k}: existing={v[0]!r} configured={v[1]!r}" for k, v in diff.items())
            log.warning(
                "durable consumer %s on stream %s already exists with a DIFFERENT configuration, and "
                "NATS keeps the existing one: %s. To apply the configured values, delete the consumer "
                "(nats consumer rm %s %s) while no worker runs, or use a new PMEM_DURABLE.",
                s.durable,
                s.stream,
                details,
                s.stream,
                s.durable,
                extra={"consumer_config_diff": {k: [str(v[0]), str(v[1])] for k, v in diff.items()}},
            )

    async def _watch_consumer(self, jsm: JetStreamManager) -> None:
        # Backlog and readiness as metrics, also when no probe calls /readyz (docker-compose), for
        # the "events waiting but none processed" and "not ready" alerts.
        # Ends when stopping starts, also if a swallowed cancellation (see cancel_and_wait) let it
        # run on.
        while not self._stopping.is_set():
            with contextlib.suppress(Exception):
                info = await jsm.consumer_info(self.settings.stream, self.settings.durable)
                self.metrics.consumer_pending.set((info.num_pending or 0) + (info.num_ack_pending or 0))
            with contextlib.suppress(Exception):
                self.metrics.ready.set(0 if await self.readiness() else 1)
            await self._pause(15)

    # -- per message -----------------------------------------------------------------------------

    async def _on_message(self, message: NatsMessage) -> None:
        """FastStream handler: one JetStream message (ack/nack/term are ours, AckPolicy.MANUAL)."""
        raw: Msg = message.raw_message
        started = time.perf_counter()
        self.metrics.in_flight.inc()
        try:
            with event_span(raw.headers, **{"messaging.destination.name": raw.subject}):
                await self._handle(raw)
        except Exception:
            # Nothing acked: JetStream redelivers after ack_wait. Should not happen; logged loudly.
            log.exception("unhandled error while handling a message; it will be redelivered")
        finally:
            self.metrics.in_flight.dec()
            self.metrics.event_duration.observe(time.perf_counter() - started)

    async def _handle(self, raw: Msg) -> None:
        s = self.settings
        delivered = raw.metadata.num_delivered or 1
        with span("pmem.parse"):
            parsed = parse_event(raw.data, self.limits)
        if isinstance(parsed, InvalidEvent):
            with event_context(parsed.event_id):
                await self._dead_letter(
                    raw,
                    label=f"invalid_{parsed.kind}",
                    reason=f"invalid event: {parsed.reason}",
                    event_id=parsed.event_id,
                )
            return
        event_id = str(parsed.event_id)
        with event_context(event_id):
            if delivered > s.max_deliver:
                # the previous delivery ended without an ack/nack: the process died or hung on it
                await self._dead_letter(
                    raw,
                    label="delivery_limit",
                    reason=f"delivered {delivered} times (PMEM_MAX_DELIVER={s.max_deliver}) without "
                    "completing; the worker probably crashed or timed out on it",
                    event_id=event_id,
                )
                return
            # PMEM_EVENT_TIMEOUT_S bounds the whole delivery; when it passes, the in-progress
            # acks stop with it (they live inside the deadline) and the event is retried or
            # dead-lettered like any transient failure
            deadline = asyncio.timeout(s.event_timeout_s)
            try:
                async with self._keep_alive(raw), deadline:
                    outcome = await process_event(parsed, self.deps, check_processed=delivered > 1)
            except Exception as exc:
                failure: Exception = exc
                if deadline.expired():
                    failure = EventDeadlineExceeded(
                        f"the event took longer than PMEM_EVENT_TIMEOUT_S={s.event_timeout_s:g}s"
                    )
                await self._on_failure(raw, failure, delivered=delivered, event_id=event_id)
                return
            if outcome.status == "processed":
                await self._publish_extracted(parsed, outcome.written)
                self.metrics.last_processed.set(time.time())
            elif outcome.status == "duplicate" and outcome.earlier:
                # a duplicate: the delivery that committed it may have died before publishing
                await self._publish_extracted(parsed, outcome.earlier)
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

    async def _on_failure(self, raw: Msg, exc: Exception, *, delivered: int, event_id: str) -> None:
        s = self.settings
        if isinstance(exc, PmemProviderError):  # tokens spent by failed attempts still cost money
            self.metrics.llm_tokens.labels(kind="prompt").inc(exc.usage.prompt_tokens)
            self.metrics.llm_tokens.labels(kind="completion").inc(exc.usage.completion_tokens)
        if self._stopping.is_set() and is_database_unavailable(exc):
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
        await self._dead_letter(raw, label=decision.label, reason=decision.reason, event_id=event_id)

    @contextlib.asynccontextmanager
    async def _keep_alive(self, raw: Msg) -> AsyncIterator[None]:
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

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or less when stopping starts meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)

    async def _run_db(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
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
                if time.monotonic() >= deadline or self._stopping.is_set():
                    raise
                self.metrics.db_waits.inc()
                log.warning(
                    "database unavailable during %s (%s: %s); waiting %.1fs",
                    operation,
                    type(exc).__name__,
                    str(exc).splitlines()[0] if str(exc) else "",
                    pause,
                )
                await self._pause(pause)
                pause = min(pause * 2, 5.0)

    # -- publishes -----------------------------------------------------------------------------

    @property
    def _js(self) -> JetStreamContext:
        return self.broker.connection.jetstream()

    @traced("pmem.publish")
    async def _publish_extracted(self, event: ConversationEnded, written: Sequence[Written]) -> None:
        """Announce the event's memories without waiting for the PubAck (`extracted_pubacks` checks
        it); the Nats-Msg-Id makes a republish (duplicate delivery) a no-op within the output
        stream's duplicate window."""
        s = self.settings
        payload = MemoryExtracted(
            event_id=event.event_id,
            channel_id=event.channel_id,
            user_id=event.user_id,
            persona_id=event.persona_id,
            memories=tuple(
                ExtractedMemoryRef(id=w.id, action=w.action, scope=w.scope, key=w.key) for w in written
            ),
        )
        assert self._extracted_js is not None, "publishing before start()"
        try:
            puback = await self._extracted_js.publish_async(
                s.extracted_subject,
                payload.model_dump_json().encode(),
                wait_stall=PUBLISH_TIMEOUT_S,
                headers={"Nats-Msg-Id": f"extracted:{event.event_id}", "Content-Type": "application/json"},
            )
        except Exception as exc:
            self._extracted_publish_failed(exc)
            return
        self.extracted_pubacks.track(puback)

    def _extracted_publish_failed(self, exc: BaseException) -> None:
        # The memories are committed and the event is acked anyway: count it and say so rather
        # than fail the event (only a redelivery, e.g. after a crash, publishes it again).
        self.metrics.publish_failures.labels(kind="extracted").inc()
        log.error(
            "could not publish %s after commit: %s: %s",
            self.settings.extracted_subject,
            type(exc).__name__,
            exc,
        )

    @traced("pmem.publish")
    async def _dead_letter(self, raw: Msg, *, label: str, reason: str, event_id: str | None) -> None:
        """Publish the original body and the reason to the DLQ subject, wait until JetStream stored
        it, then terminate the message. If the publish fails the message is nacked, never dropped."""
        s = self.settings
        meta = raw.metadata
        stream_seq = meta.sequence.stream if meta.sequence else None
        record = DeadLetter.for_body(
            raw.data,
            reason=reason,
            kind=label,
            subject=raw.subject,
            stream=meta.stream,
            stream_sequence=stream_seq,
            delivery_count=meta.num_delivered or 1,
            event_id=event_id,
            failed_at=datetime.now(UTC),
            max_bytes=dlq_record_limit(self.broker.connection.max_payload),
        )
        headers = dlq_headers(reason=reason, label=label, msg_id=f"dlq:{meta.stream}:{stream_seq}")
        for attempt in range(1, s.dlq_publish_attempts + 1):
            try:
                await self._js.publish(
                    s.dlq_subject, record.encode(), headers=headers, timeout=PUBLISH_TIMEOUT_S
                )
                break
            except (nats.errors.Error, nats.js.errors.Error, TimeoutError, OSError) as exc:
                self.metrics.publish_failures.labels(kind="dlq").inc()
                if attempt < s.dlq_publish_attempts and not self._stopping.is_set():
                    await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
                    continue
                # Bounded: the event goes back to JetStream, whose finite max_deliver (see
                # consumer_config) stops redelivering it; it stays in the stream until max_age.
                log.error(
                    "could not publish to the DLQ %s after %d attempts (%s); nacking the event "
                    "(delivery %d of at most %d)",
                    s.dlq_subject,
                    attempt,
                    one_line(exc),
                    meta.num_delivered or 1,
                    consumer_max_deliver(s),
                )
                await raw.nak(delay=s.retry_delay_s)
                return
        await raw.term()
        self.metrics.events.labels(outcome="dlq").inc()
        self.metrics.dlq.labels(reason=label).inc()
        log.warning("dead-lettered (%s): %s", label, reason, extra={"dlq_label": label})


async def ensure_stream(
    jsm: JetStreamManager, name: str, subjects: list[str], *, create: bool, max_age_s: float = 0.0
) -> None:
    """Make sure stream `name` exists and captures `subjects`: create it when missing (if `create`,
    keeping messages `max_age_s` seconds, 0 = forever), fail with the fix when it exists without
    them. An existing stream is never modified; a different max_age is warned about (retention is
    a privacy control: raw transcripts and DLQ copies of them)."""
    try:
        info = await jsm.stream_info(name)
    except nats.js.errors.NotFoundError:
        if not create:
            raise ConfigurationError(
                f"JetStream stream {name!r} does not exist; create it (subjects {subjects}) "
                "or set PMEM_CREATE_STREAM=true"
            ) from None
        try:
            # duplicate_window: a re-publish with the same Nats-Msg-Id within 2 minutes is dropped
            await jsm.add_stream(
                StreamConfig(
                    name=name,
                    subjects=subjects,
                    duplicate_window=min(120.0, max_age_s) if max_age_s > 0 else 120.0,
                    max_age=max_age_s if max_age_s > 0 else None,
                )
            )
        except nats.js.errors.BadRequestError as exc:
            raise ConfigurationError(
                f"could not create stream {name!r} for {subjects}: {exc.description}. If another "
                "stream already captures these subjects, set PMEM_STREAM/PMEM_OUTPUT_STREAM to it"
            ) from exc
        log.info("created JetStream stream %s for %s", name, subjects)
        return
    existing_age = float(info.config.max_age or 0.0)
    if abs(existing_age - max_age_s) > 1.0:
        log.warning(
            "stream %s keeps messages for %s, configured %s; NATS keeps the existing retention "
            "(change it with `nats stream edit %s --max-age=…`)",
            name,
            f"{existing_age:g}s" if existing_age else "ever",
            f"{max_age_s:g}s" if max_age_s else "forever",
            name,
        )
    have = set(info.config.subjects or ())
    missing = [subject for subject in subjects if not _covered(subject, have)]
    if missing:
        raise ConfigurationError(
            f"stream {name!r} exists but does not capture {missing} (it has {sorted(have)}); "
            "add the subjects to the stream or point PMEM_STREAM/PMEM_OUTPUT_STREAM elsewhere"
        )


def _covered(subject: str, patterns: set[str]) -> bool:
    """Whether `subject` is matched by one of the stream's subject patterns (`*`, `>` wildcards)."""
    tokens = subject.split(".")
    for pattern in patterns:
        parts = pattern.split(".")
        for index, part in enumerate(parts):
            if part == ">":
                if len(tokens) > index:
                    return True
                break
            if index >= len(tokens) or (part != "*" and part != tokens[index]):
                break
        else:
            if len(parts) == len(tokens):
                return True
    return False


async def build_worker(
    settings: Settings,
    *,
    metrics: Metrics | None = None,
    serve_http: bool = True,
    retry: RetryPolicy | None = None,
) -> Worker:
    """A worker wired from settings: embedder, store (the database must be migrated), extractor.
    `retry` overrides the extractor's in-process LLM retry schedule (tests use tiny waits)."""
    from extraction.factory import build_embedder, build_extractor

    configure_tracing()  # OTLP export when the OTEL_* variables ask for it (extra `otel`)
    metrics = metrics or Metrics()
    counter = metrics.llm_retries
    embedder = build_embedder(settings)
    store = await _open_store(settings, embedder)
    return Worker(
        settings=settings,
        store=store,
        extractor=build_extractor(
            settings, retry=retry, on_retry=lambda reason: counter.labels(reason=reason).inc()
        ),
        embedder=embedder,
        metrics=metrics,
        serve_http=serve_http,
    )


async def _open_store(settings: Settings, embedder: Embedder) -> MemoryStore:
    """The store, with a connection pool sized for the worker.

    Postgres: PMEM_DB_POOL_SIZE connections and no overflow: with more events in flight than
    connections, calls wait a few milliseconds for a connection instead of opening and closing an
    overflow connection each time (measured: that churn cost more CPU than the rest of the database
    work). No pre-ping: a connection broken by a database restart fails its call, and `_run_db`
    retries it on a fresh one. `plan_cache_mode = auto` (recall's force_custom_plan is not the
    worker's concern): the prepared claim and insert of every write then keep a generic plan
    instead of being planned on every event; Postgres keeps custom plans where it judges them
    cheaper (the prompt and near-duplicate reads; bench/README.md, "What the worker's design rests on").
    Once open, the pool × PMEM_EXPECTED_REPLICAS is checked against the server's max_connections
    (a WARNING when it does not fit: worker/connection_budget.py)."""
    from store.factory import open_store
    from store.postgres.recall_sql import RecallTuning
    from worker.connection_budget import warn_if_over_budget

    options = dataclasses.replace(
        settings.store_options(),
        pool_size=settings.db_pool_size,
        max_overflow=0,
        pool_pre_ping=False,
        parallel_query=False,
        tuning=RecallTuning(plan_cache_mode="auto"),
    )
    store = await open_store(settings.database_url, embedder, options)
    await warn_if_over_budget(
        store,
        process="pmem worker",
        replicas=settings.expected_replicas,
        pool_source=f"PMEM_DB_POOL_SIZE={settings.db_pool_size}",
    )
    return store
