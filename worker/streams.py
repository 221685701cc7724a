"""The worker's JetStream setup: the event stream and the output stream (DLQ, `memory.extracted`)
it captures, and the durable pull consumer. An existing stream or consumer is never modified: a
missing subject is a `ConfigurationError` naming the fix, a different consumer configuration a
warning."""

from __future__ import annotations

import logging
from typing import Any

import nats.js.errors
from nats.js.api import AckPolicy as JsAckPolicy
from nats.js.api import ConsumerConfig, DeliverPolicy, StreamConfig
from nats.js.manager import JetStreamManager

from config import Settings

log = logging.getLogger("pmem.worker")

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


async def declare_streams(jsm: JetStreamManager, s: Settings) -> None:
    """The event stream (PMEM_STREAM) and the output stream (PMEM_OUTPUT_STREAM: DLQ and
    `memory.extracted`), created when missing (PMEM_CREATE_STREAM)."""
    await ensure_stream(jsm, s.stream, [s.subject], create=s.create_stream, max_age_s=s.stream_max_age)
    await ensure_stream(
        jsm,
        s.output_stream,
        [s.dlq_subject, s.extracted_subject],
        create=s.create_stream,
        max_age_s=s.dlq_max_age,
    )


async def declare_consumer(jsm: JetStreamManager, s: Settings) -> None:
    """The durable pull consumer (PMEM_DURABLE): created when missing; an existing one with another
    configuration is kept (NATS does not change it) and warned about with the fix."""
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
