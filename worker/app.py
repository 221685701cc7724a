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

This module assembles the worker and runs its lifecycle; the parts live by role:
`worker.streams` (stream and consumer declaration), `worker.handling` (one delivery, outage
waits), `worker.publishing` (`memory.extracted` and dead letters), `worker.lifecycle` (signals,
stopping helper tasks); `worker.startup` builds and starts it within its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import TYPE_CHECKING

import nats.errors
from faststream.middlewares import AckPolicy
from faststream.nats import JStream, NatsBroker, PullSub
from nats.js.manager import JetStreamManager

from config import Settings
from extraction.errors import RetryPolicy
from extraction.protocols import Embedder, Extractor
from store.rules.urls import redacted_url
from store.services.settings_cache import SettingsCache
from worker.handling import EventHandler, OutageWaits, pause_unless_stopping, whole_message
from worker.health import HealthServer
from worker.lifecycle import cancel_and_wait
from worker.metrics import Metrics
from worker.pipeline import PipelineDeps
from worker.pubacks import PendingPubAcks
from worker.publishing import PUBLISH_TIMEOUT_S, Publisher
from worker.streams import consumer_config, declare_consumer, declare_streams
from worker.tracing import configure_tracing

if TYPE_CHECKING:
    from store.factory import Store

log = logging.getLogger("pmem.worker")


@dataclasses.dataclass(kw_only=True)
class Worker:
    """One worker process: consumer, pipeline, publishes, health server."""

    settings: Settings
    store: Store
    extractor: Extractor
    embedder: Embedder
    metrics: Metrics = dataclasses.field(default_factory=Metrics)
    serve_http: bool = True

    broker: NatsBroker = dataclasses.field(init=False)
    health: HealthServer | None = dataclasses.field(default=None, init=False)
    _stopping: asyncio.Event = dataclasses.field(default_factory=asyncio.Event, init=False)
    _background: list[asyncio.Task[None]] = dataclasses.field(default_factory=list, init=False)
    _started: bool = dataclasses.field(default=False, init=False)
    phase: str = dataclasses.field(default="not started", init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.broker = NatsBroker(
            s.nats_url,
            name=f"pmem-worker/{s.durable}",
            max_reconnect_attempts=-1,  # a worker outlives NATS restarts
            reconnect_time_wait=1,
            graceful_timeout=s.shutdown_timeout_s,
            logger=logging.getLogger("pmem.faststream"),
            log_level=logging.DEBUG,
            # no dependency injection: the one handler takes the message (see `whole_message`);
            # FastDepends' per-message model solving cost ~10% of the worker's CPU
            apply_types=False,
        )
        subscriber = self.broker.subscriber(
            s.subject,
            stream=JStream(name=s.stream, declare=False),  # declared by `declare_streams`
            durable=s.durable,
            config=consumer_config(s),
            # one message per fetch: at most about one fetched message waits for a free handler
            # (its ack_wait clock running), never a whole batch behind busy handlers
            pull_sub=PullSub(batch_size=1, timeout=1.0),
            max_workers=s.concurrency,
            ack_policy=AckPolicy.MANUAL,
            decoder=whole_message,
        )
        self.publisher = Publisher(
            settings=s, metrics=self.metrics, broker=self.broker, stopping=self._stopping
        )
        self.handler = EventHandler(
            settings=s,
            metrics=self.metrics,
            deps=PipelineDeps(
                store=self.store,
                extractor=self.extractor,
                embedder=self.embedder,
                metrics=self.metrics,
                run_db=OutageWaits(settings=s, metrics=self.metrics, stopping=self._stopping),
                settings_cache=SettingsCache(ttl_s=s.settings_cache_s),
                storing_slots=asyncio.Semaphore(s.writes_in_flight) if s.writes_in_flight else None,
            ),
            publisher=self.publisher,
            stopping=self._stopping,
        )
        subscriber(self.handler.on_message)

    @property
    def deps(self) -> PipelineDeps:
        """What the pipeline runs with (store, extractor, embedder, database runner)."""
        return self.handler.deps

    @property
    def extracted_pubacks(self) -> PendingPubAcks:
        """The `memory.extracted` PubAcks still awaited."""
        return self.publisher.pubacks

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
        self._enter(f"connecting to NATS at {redacted_url(self.settings.nats_url)}")
        await self.broker.connect()
        self.publisher.connected()
        jsm = self.broker.connection.jsm()
        self._enter("declaring the JetStream streams and the consumer")
        await declare_streams(jsm, self.settings)
        await declare_consumer(jsm, self.settings)
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
                if outstanding := await self.publisher.pubacks.wait(PUBLISH_TIMEOUT_S):
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
            await pause_unless_stopping(self._stopping, 15)


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


async def _open_store(settings: Settings, embedder: Embedder) -> Store:
    """The store, with a connection pool sized for the worker.

    Postgres: PMEM_DB_POOL_SIZE connections and no overflow: with more events in flight than
    connections, calls wait a few milliseconds for a connection instead of opening and closing an
    overflow connection each time (measured: that churn cost more CPU than the rest of the database
    work). No pre-ping: a connection broken by a database restart fails its call, and `OutageWaits`
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
