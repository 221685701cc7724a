"""Wire models of the worker: `conversation.ended` (in), `memory.extracted` and the DLQ record (out).

`parse_event` is pure and total: any bytes give either a valid `ConversationEnded` or an
`InvalidEvent` naming what is wrong. It never raises, so a malformed event can always be sent to the
DLQ instead of looping through redeliveries.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from config import Settings
from store.model import DirectoryEntry, Scope, UpsertAction
from store.rules.admission import admit
from store.rules.directory import directory_entries
from store.rules.input_errors import describe, json_type

log = logging.getLogger("pmem.worker.events")

DLQ_REASON_HEADER = "Pmem-Dlq-Reason"

Role = Literal["user", "assistant", "system", "tool"]
# a message's speaker name as kept: longer names keep their beginning
MESSAGE_NAME_MAX_CHARS = 80
# Bounded set: used as a metric label, so never free text.
InvalidKind = Literal["not_utf8", "not_json", "schema", "empty", "oversized"]


class EventMessage(BaseModel):
    """One message of the ended conversation."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=False)

    role: Role
    content: str
    at: datetime | None = None
    name: str | None = Field(
        default=None,
        description="Who said the message, as the platform names them (optional; kept with the "
        "remembered turn and erased with it).",
    )

    @field_validator("name", mode="before")
    @classmethod
    def _lenient_name(cls, value: object) -> object:
        # a name that is not a string, or a blank one, is left out: the message itself stays. It is
        # admitted (store.rules.admission) before it is cut, so a cut cannot hide a secret's end
        if isinstance(value, str):
            return admit(value, one_line=True).text[:MESSAGE_NAME_MAX_CHARS] or None
        if value is not None:
            log.info("ignored a message name that is not a string (%s)", type(value).__name__)
        return None


class ConversationEnded(BaseModel):
    """The `conversation.ended` event (docs/events.md). Unknown fields are ignored so
    that publishers can add fields without breaking older workers."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    event_id: uuid.UUID
    type: Literal["conversation.ended"]
    occurred_at: datetime | None = None
    team_id: uuid.UUID | None = None
    channel_id: uuid.UUID
    user_id: uuid.UUID
    persona_id: uuid.UUID | None = None
    messages: tuple[EventMessage, ...] = Field(min_length=1)
    # display names for the web UI (the latest one wins); a name that is not a string is ignored
    team_name: str | None = Field(default=None, description="The team's display name (optional).")
    persona_name: str | None = Field(default=None, description="The persona's display name (optional).")
    user_name: str | None = Field(
        default=None, description="The user's display name (optional; erased with the user)."
    )

    @field_validator("team_name", "persona_name", "user_name", mode="before")
    @classmethod
    def _lenient_name(cls, value: object) -> object:
        if value is None or isinstance(value, str):
            return value
        log.info("ignored a display name that is not a string (%s)", type(value).__name__)
        return None


def event_fingerprint(event: ConversationEnded) -> str:
    """The SHA-256 of the event's content as parsed (key order and spacing of the JSON aside): two
    bodies under one `event_id` with different fingerprints are different conversations."""
    canonical = json.dumps(event.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def event_names(event: ConversationEnded) -> list[DirectoryEntry]:
    """The display names an event carries, for the ids it names."""
    return directory_entries(
        team=(event.team_id, event.team_name),
        persona=(event.persona_id, event.persona_name),
        user=(event.user_id, event.user_name),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class EventLimits:
    """Size limits of one event; anything larger is rejected to the DLQ, never truncated silently."""

    max_messages: int = 500
    max_message_chars: int = 20_000
    max_total_chars: int = 200_000

    @classmethod
    def from_settings(cls, settings: Settings) -> EventLimits:
        """The limits configured by PMEM_MAX_MESSAGES / PMEM_MAX_MESSAGE_CHARS / PMEM_MAX_TOTAL_CHARS."""
        return cls(
            max_messages=settings.max_messages,
            max_message_chars=settings.max_message_chars,
            max_total_chars=settings.max_total_chars,
        )

    @property
    def max_body_bytes(self) -> int:
        """Upper bound on a valid event's encoded size: JSON escapes take up to 6 bytes a character
        (`\\uXXXX`), plus room for ids and per-message overhead. Checked before parsing, so a huge
        body is rejected without being parsed."""
        return 6 * self.max_total_chars + 256 * self.max_messages + 64 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class InvalidEvent:
    """An event that can never succeed: `kind` is a bounded category, `reason` the details."""

    kind: InvalidKind
    reason: str
    event_id: str | None = None  # best effort, for logs and the DLQ record
    team_id: str | None = None  # best effort, for the DLQ record


def parse_event(raw: bytes, limits: EventLimits) -> ConversationEnded | InvalidEvent:
    """Validate one event body against the contract and the limits. Pure; never raises."""
    if len(raw) > limits.max_body_bytes:
        return InvalidEvent(
            kind="oversized",
            reason=f"event body is {len(raw)} bytes, over the {limits.max_body_bytes}-byte bound "
            "implied by PMEM_MAX_TOTAL_CHARS/PMEM_MAX_MESSAGES",
        )
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # the ids are still worth finding for the DLQ record: read the rest with the bad bytes replaced
        event_id, team_id = _best_effort_ids(_json_or_none(raw.decode("utf-8", errors="replace")))
        return InvalidEvent(
            kind="not_utf8",
            reason=f"event body is not UTF-8: {exc.reason} at byte {exc.start}",
            event_id=event_id,
            team_id=team_id,
        )
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return InvalidEvent(kind="not_json", reason=f"event body is not JSON: {_short(str(exc))}")
    if not isinstance(document, dict):
        return InvalidEvent(kind="schema", reason=f"event: expected a JSON object, got {json_type(document)}")
    event_id, team_id = _best_effort_ids(document)

    def invalid(kind: InvalidKind, reason: str) -> InvalidEvent:
        return InvalidEvent(kind=kind, reason=reason, event_id=event_id, team_id=team_id)

    try:
        event = ConversationEnded.model_validate(document)
    except ValidationError as exc:
        return invalid("schema", _describe(exc))
    except (ValueError, TypeError, RecursionError) as exc:  # pydantic wraps most; belt and braces
        return invalid("schema", _short(str(exc)))
    problem = _limit_problem(event, limits)
    if problem is not None:
        return invalid("oversized", problem)
    problem = _text_problem(event)
    if problem is not None:
        return invalid("schema", problem)
    if not any(message.content.strip() for message in event.messages):
        return invalid("empty", "every message content is blank")
    return event


def _json_or_none(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _best_effort_ids(document: object) -> tuple[str | None, str | None]:
    """(event_id, team_id) of a decoded body when they are strings (bounded), else None."""
    if not isinstance(document, dict):
        return None, None
    event_id, team_id = document.get("event_id"), document.get("team_id")
    return (
        event_id[:100] if isinstance(event_id, str) else None,
        team_id[:100] if isinstance(team_id, str) else None,
    )


def _limit_problem(event: ConversationEnded, limits: EventLimits) -> str | None:
    if len(event.messages) > limits.max_messages:
        return f"{len(event.messages)} messages, over PMEM_MAX_MESSAGES={limits.max_messages}"
    total = 0
    for index, message in enumerate(event.messages):
        size = len(message.content)
        if size > limits.max_message_chars:
            return (
                f"message {index} has {size} characters, over "
                f"PMEM_MAX_MESSAGE_CHARS={limits.max_message_chars}"
            )
        total += size
    if total > limits.max_total_chars:
        return f"{total} characters in total, over PMEM_MAX_TOTAL_CHARS={limits.max_total_chars}"
    return None


def _text_problem(event: ConversationEnded) -> str | None:
    # JSON can carry NUL and unpaired surrogates; Postgres text and the LLM API cannot.
    for index, message in enumerate(event.messages):
        if "\x00" in message.content:
            return f"message {index} contains a NUL character"
        if not _encodable(message.content):
            return f"message {index} contains an unpaired UTF-16 surrogate"
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _describe(exc: ValidationError) -> str:
    return _short(describe(exc.errors()))


def _short(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ExtractedMemoryRef(BaseModel):
    """One memory written for an event, as announced on `memory.extracted`."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    action: UpsertAction
    scope: Scope
    key: str


class MemoryExtracted(BaseModel):
    """Published on `memory.extracted` after the event's transaction committed."""

    model_config = ConfigDict(frozen=True)

    event_id: uuid.UUID
    channel_id: uuid.UUID
    user_id: uuid.UUID
    persona_id: uuid.UUID | None
    memories: tuple[ExtractedMemoryRef, ...]


DLQ_MAX_REASON_CHARS = 2000


class DeadLetter(BaseModel):
    """Published on `pmem.dlq.conversation.ended`: the original body (text when it is UTF-8, else
    base64), why it failed and how often it was delivered, so it can be inspected and replayed.

    A record always fits the NATS payload limit: a body too large for it is truncated
    (`body_truncated`, `body_size` = the original size in bytes), and `stream` + `stream_sequence`
    find the whole original in the event stream (while its retention keeps it). `event_id` is the
    body's when it has one (also when the body is not valid UTF-8); `body_sha256`, the hash of the
    whole original body, names it either way."""

    model_config = ConfigDict(frozen=True)

    reason: str
    kind: str
    subject: str
    stream: str | None = None
    stream_sequence: int | None = None
    delivery_count: int
    event_id: str | None = None
    team_id: str | None = None
    body_sha256: str | None = None
    body_text: str | None = None
    body_base64: str | None = None
    body_size: int = 0
    body_truncated: bool = False
    failed_at: datetime

    @classmethod
    def for_body(
        cls,
        body: bytes,
        *,
        reason: str,
        kind: str,
        subject: str,
        delivery_count: int,
        failed_at: datetime,
        stream: str | None = None,
        stream_sequence: int | None = None,
        event_id: str | None = None,
        team_id: str | None = None,
        max_bytes: int | None = None,
    ) -> DeadLetter:
        """Build the record, keeping the body byte-exact (text if UTF-8, else base64) when the
        serialised record fits `max_bytes`; else with the longest body prefix that fits."""
        base = cls(
            reason=reason[:DLQ_MAX_REASON_CHARS],
            kind=kind,
            subject=subject,
            stream=stream,
            stream_sequence=stream_sequence,
            delivery_count=delivery_count,
            event_id=event_id,
            team_id=team_id,
            body_sha256=hashlib.sha256(body).hexdigest(),
            body_size=len(body),
            failed_at=failed_at,
        )
        try:
            body.decode("utf-8")
            is_text = True
        except UnicodeDecodeError:
            is_text = False
        record = base._with_body(body, is_text=is_text, truncated=False)
        if max_bytes is None or len(record.encode()) <= max_bytes:
            return record
        budget = max(0, max_bytes - len(base.model_copy(update={"body_truncated": True}).encode()))
        # JSON escaping (and base64) can grow a body: shrink the prefix until the record fits
        while True:
            record = base._with_body(body[:budget], is_text=is_text, truncated=True)
            if len(record.encode()) <= max_bytes or budget == 0:
                return record
            budget = budget * 3 // 4

    def _with_body(self, body: bytes, *, is_text: bool, truncated: bool) -> DeadLetter:
        text: str | None = None
        encoded: str | None = None
        if is_text:  # a prefix may end inside a UTF-8 sequence: only that broken tail is dropped
            text = body.decode("utf-8", errors="ignore")
        else:
            encoded = base64.b64encode(body).decode("ascii")
        changes = {"body_text": text, "body_base64": encoded, "body_truncated": truncated}
        return self.model_copy(update=changes)

    def encode(self) -> bytes:
        """The record as published (JSON)."""
        return self.model_dump_json().encode()

    def original_body(self) -> bytes:
        """The original event body, byte for byte (only its prefix when `body_truncated`)."""
        if self.body_base64 is not None:
            return base64.b64decode(self.body_base64)
        return (self.body_text or "").encode("utf-8")
