"""Request bodies (validated by pydantic: a bad field is a 422 naming it) and the JSON shapes of
answers, built from the store's plain types."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.operations import BulkResult, MemoryDetail, SettingsView
from store.model import (
    AuditEntry,
    ChannelConversation,
    Rejection,
    ReviewItem,
    SettingsRow,
    UserExport,
)
from store.services.context_recall import DEFAULT_TURN_LIMIT, ContextRecall
from store.services.json_shapes import id_json, memory_json, revision_json, time_json, turn_json


def integral_number(value: object) -> object:
    """An integer as JSON Schema defines it (30 or 30.0) as an int, for a strict int field; a
    fraction, a string or a boolean is left for the field to refuse."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class _Body(BaseModel):
    """A request body: unknown fields refused. Its numbers and booleans are `strict`: `"5"`, or `0`
    for false, is refused as the OpenAPI document says, rather than converted."""

    model_config = ConfigDict(extra="forbid")


class ValueBody(_Body):
    """A new value for a memory."""

    value: str = Field(min_length=1, max_length=2000)


class PinnedBody(_Body):
    """Pin (`true`) or unpin (`false`) a memory: a pinned active memory is in every hint."""

    pinned: bool = Field(strict=True)


class MyMemoryBody(_Body):
    """A person's change to their own memory: a new `value` (it becomes active), `pinned`, or both;
    a field left out (or null) is left as it is."""

    value: str | None = Field(default=None, min_length=1, max_length=2000)
    pinned: bool | None = Field(default=None, strict=True)


class RejectBody(_Body):
    """How to reject: `forget` also erases what was said that the memory comes from (the
    conversation turns its evidence cites), leaving no text of them."""

    forget: bool = Field(default=False, strict=True)


class BulkBody(_Body):
    """Approve or reject many review items at once."""

    action: Literal["approve", "reject"]
    ids: list[uuid.UUID] = Field(min_length=1, max_length=200)
    # with reject: erase what was said that each rejected memory comes from
    forget: bool = Field(default=False, strict=True)


class RecallBody(_Body):
    """Who a service recalls for, in which context, and what for."""

    user_id: uuid.UUID
    persona_id: uuid.UUID | None = None
    team_id: uuid.UUID | None = None
    query: str = Field(default="", max_length=4000)
    # how many memories (by relevance), then how many turns of earlier conversations (0: none)
    limit: int = Field(default=20, ge=1, le=200, strict=True)
    turn_limit: int = Field(default=DEFAULT_TURN_LIMIT, ge=0, le=200, strict=True)
    # what to recall: stored memories, earlier conversations' turns (default both)
    include: list[Literal["memories", "turns"]] = Field(
        default=["memories", "turns"], min_length=1, max_length=2
    )

    _integral_limit = field_validator("limit", "turn_limit", mode="before")(integral_number)

    def asked(self) -> ContextRecall:
        """What the service asks, as the operations take it."""
        return ContextRecall(**self.model_dump(exclude={"max_tokens"}))


class HintBody(RecallBody):
    """A recall formatted as the prompt hint, at most `max_tokens` long (absent, or more than the
    setting PMEM_HINT_MAX_TOKENS: the setting)."""

    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000, strict=True)

    _integral_tokens = field_validator("max_tokens", mode="before")(integral_number)


class SettingsBody(_Body):
    """One level's settings; null (or absent) inherits from the level above."""

    enabled: bool | None = Field(default=None, strict=True)
    persona_learning: bool | None = Field(default=None, strict=True)
    extraction_prompt: str | None = Field(default=None, max_length=20_000)
    min_confidence: float | None = Field(default=None, ge=0.0, le=1.0, strict=True)
    pending_days: int | None = Field(default=None, ge=1, le=36_500, strict=True)
    archived_days: int | None = Field(default=None, ge=1, le=36_500, strict=True)
    history: bool | None = Field(default=None, strict=True)
    history_days: int | None = Field(default=None, ge=1, le=36_500, strict=True)
    review_tool_saves: bool | None = Field(default=None, strict=True)
    known_personas_only: bool | None = Field(default=None, strict=True)

    _integral_days = field_validator("pending_days", "archived_days", "history_days", mode="before")(
        integral_number
    )

    def row(self) -> SettingsRow:
        """The values as a settings row (level and target are set by the route)."""
        return SettingsRow(level="global", target_id=None, **self.model_dump())


def rejection_json(rejection: Rejection, *, forget: bool) -> dict[str, Any]:
    """A rejected memory as JSON; having forgotten what was said, with `forgotten_turns`: how many
    conversation turns were erased."""
    body = memory_json(rejection.memory)
    if forget:
        body["forgotten_turns"] = rejection.forgotten_turns
    return body


def review_item_json(item: ReviewItem) -> dict[str, Any]:
    """A review-queue item as JSON (DESIGN: id, kind, memory_id, scope, owner_id, user_id, team_id,
    key, value or old_value/new_value, confidence, source_channel_id, created_at, evidence,
    observed_at) and whether the memory is `pinned`."""
    body: dict[str, Any] = {
        "id": str(item.id),
        "kind": item.kind,
        "memory_id": str(item.memory_id),
        "scope": item.scope,
        "owner_id": str(item.owner_id),
        "user_id": id_json(item.user_id),
        "team_id": id_json(item.team_id),
        "key": item.key,
        "confidence": item.confidence,
        "source_channel_id": id_json(item.source_channel_id),
        "created_at": item.created_at.isoformat(),
        "evidence": item.evidence,
        "observed_at": time_json(item.observed_at),
        "pinned": item.pinned,
    }
    if item.kind == "memory":
        body["value"] = item.value
    else:
        body["old_value"] = item.old_value
        body["new_value"] = item.new_value
    return body


def audit_json(entry: AuditEntry) -> dict[str, Any]:
    """An audit row as JSON."""
    return {
        "id": entry.id,
        "memory_id": id_json(entry.memory_id),
        "action": entry.action,
        "scope": entry.scope,
        "key": entry.key,
        "old_value": entry.old_value,
        "new_value": entry.new_value,
        "actor": entry.actor,
        "event_id": id_json(entry.event_id),
        "revision_id": id_json(entry.revision_id),
        "at": entry.at.isoformat(),
    }


def conversation_json(conversation: ChannelConversation) -> dict[str, Any]:
    """One remembered conversation (a channel's turns of the caller) as JSON."""
    return {
        "channel_id": str(conversation.channel_id),
        "persona_ids": [id_json(p) for p in conversation.persona_ids],
        "team_ids": [id_json(t) for t in conversation.team_ids],
        "started_at": conversation.started_at.isoformat(),
        "last_at": conversation.last_at.isoformat(),
        "first_line": conversation.first_line,
        "turn_count": conversation.turn_count,
        "conversation_count": conversation.conversation_count,
    }


def detail_json(detail: MemoryDetail) -> dict[str, Any]:
    """A memory with its open proposal and history."""
    return {
        **memory_json(detail.memory),
        "pending_revision": None
        if detail.pending_revision is None
        else revision_json(detail.pending_revision),
        "history": [audit_json(entry) for entry in detail.history],
    }


def export_json(export: UserExport) -> dict[str, Any]:
    """Everything about a person: memories and revisions (with their evidence), audit rows and the
    remembered conversation turns."""
    return {
        "memories": [memory_json(m) for m in export.memories],
        "revisions": [revision_json(r) for r in export.revisions],
        "audit": [audit_json(a) for a in export.audit],
        "turns": [turn_json(t) for t in export.turns],
    }


def settings_json(view: SettingsView) -> dict[str, Any]:
    """A level's own values (null = inherit), the effective values and their sources."""
    own = view.own
    effective = view.effective
    return {
        "level": own.level,
        "target_id": id_json(own.target_id),
        "own": {
            "enabled": own.enabled,
            "persona_learning": own.persona_learning,
            "extraction_prompt": own.extraction_prompt,
            "min_confidence": own.min_confidence,
            "pending_days": own.pending_days,
            "archived_days": own.archived_days,
            "history": own.history,
            "history_days": own.history_days,
            "review_tool_saves": own.review_tool_saves,
            "known_personas_only": own.known_personas_only,
        },
        "effective": {
            "enabled": effective.enabled,
            "persona_learning": effective.persona_learning,
            "extraction_prompt": effective.extraction_prompt,
            "min_confidence": effective.min_confidence,
            "pending_days": effective.pending_days,
            "archived_days": effective.archived_days,
            "history": effective.history,
            "history_days": effective.history_days,
            "review_tool_saves": effective.review_tool_saves,
            "known_personas_only": effective.known_personas_only,
        },
        "inherited_from": view.inherited_from,
    }


def bulk_json(results: list[BulkResult]) -> dict[str, Any]:
    """Per-id outcomes of a bulk decision."""
    return {
        "results": [
            {"id": str(r.id), "status": r.status}
            | ({} if r.forgotten_turns is None else {"forgotten_turns": r.forgotten_turns})
            for r in results
        ]
    }
