"""What the worker publishes on its NATS connection: `memory.extracted` after an event's commit
(its PubAck checked in the background), and dead letters (stored by JetStream before the event is
terminated; nacked, never dropped, when that fails).

Every message is bounded by the server's `max_payload` (1 MB by default; `max_payload` in the
nats-server configuration raises it): an event over it is refused at its publisher and never
arrives here, and a dead-letter record is cut to fit it (`dlq_record_limit`)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext

from config import Settings
from worker.events import (
    DLQ_REASON_HEADER,
    ConversationEnded,
    DeadLetter,
    ExtractedMemoryRef,
    MemoryExtracted,
)
from worker.metrics import Metrics
from worker.pipeline import Written
from worker.planning import exception_line
from worker.pubacks import PendingPubAcks
from worker.streams import consumer_max_deliver
from worker.tracing import traced

if TYPE_CHECKING:
    from faststream.nats import NatsBroker

log = logging.getLogger("pmem.worker")

PUBLISH_TIMEOUT_S = 5.0
# Room for the DLQ message's headers (the reason header is capped at 1000 characters).
DLQ_HEADER_ALLOWANCE = 4096


def dlq_record_limit(max_payload: int) -> int:
    """Bytes a DLQ record may take so that record plus headers fit the server's max_payload."""
    return max(1024, max_payload - DLQ_HEADER_ALLOWANCE)


def dlq_headers(*, reason: str, label: str, msg_id: str) -> dict[str, str]:
    """Headers of a DLQ message: reason (one line, bounded), label, and a Nats-Msg-Id for dedup."""
    exception_line = " ".join(reason.split())
    return {
        DLQ_REASON_HEADER: exception_line[:1000],
        "Pmem-Dlq-Label": label,
        "Nats-Msg-Id": msg_id,
        "Content-Type": "application/json",
    }


@dataclasses.dataclass(kw_only=True)
class Publisher:
    """The worker's publishes, on the broker's connection (once it is connected: `connected`)."""

    settings: Settings
    metrics: Metrics
    broker: NatsBroker
    stopping: asyncio.Event
    pubacks: PendingPubAcks = dataclasses.field(init=False)
    _extracted_js: JetStreamContext | None = dataclasses.field(default=None, init=False)

    def __post_init__(self) -> None:
        self.pubacks = PendingPubAcks(timeout_s=PUBLISH_TIMEOUT_S, on_failure=self.extracted_failed)

    def connected(self) -> None:
        """The broker is connected: one context for every `memory.extracted` publish (its PubAck
        inbox is subscribed once)."""
        self._extracted_js = self.broker.connection.jetstream()

    @property
    def _js(self) -> JetStreamContext:
        return self.broker.connection.jetstream()

    @traced("pmem.publish")
    async def extracted(self, event: ConversationEnded, written: Sequence[Written]) -> None:
        """Announce the event's memories without waiting for the PubAck (`pubacks` checks it); the
        Nats-Msg-Id makes a republish (duplicate delivery) a no-op within the output stream's
        duplicate window."""
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
            self.extracted_failed(exc)
            return
        self.pubacks.track(puback)

    def extracted_failed(self, exc: BaseException) -> None:
        """Count and log a `memory.extracted` publish that failed."""
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
    async def dead_letter(
        self, raw: Msg, *, label: str, reason: str, event_id: str | None, team_id: str | None = None
    ) -> None:
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
            team_id=team_id,
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
                if attempt < s.dlq_publish_attempts and not self.stopping.is_set():
                    await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
                    continue
                # Bounded: the event goes back to JetStream, whose finite max_deliver (see
                # consumer_config) stops redelivering it; it stays in the stream until max_age.
                log.error(
                    "could not publish to the DLQ %s after %d attempts (%s); nacking the event "
                    "(delivery %d of at most %d)",
                    s.dlq_subject,
                    attempt,
                    exception_line(exc),
                    meta.num_delivered or 1,
                    consumer_max_deliver(s),
                )
                await raw.nak(delay=s.retry_delay_s)
                return
        await raw.term()
        self.metrics.events.labels(outcome="dlq").inc()
        self.metrics.dlq.labels(reason=label).inc()
        log.warning("dead-lettered (%s): %s", label, reason, extra={"dlq_label": label})
