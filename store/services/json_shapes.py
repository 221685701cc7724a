"""The JSON shape of a memory, a revision, a remembered turn and a recall item: one writer each,
for the API, the CLI (`pmem recall --json`, `pmem review list --json`) and the tools (which show a
model a few of the same fields)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from store.model import Memory, RecallItem, Revision, Turn


def id_json(value: uuid.UUID | None) -> str | None:
    """An optional id as JSON."""
    return None if value is None else str(value)


def time_json(value: datetime | None) -> str | None:
    """An optional time as JSON (ISO 8601)."""
    return None if value is None else value.isoformat()


def memory_json(memory: Memory) -> dict[str, Any]:
    """A memory as JSON (embedding excluded)."""
    return {
        "id": str(memory.id),
        "scope": memory.scope,
        "owner_id": str(memory.owner_id),
        "user_id": id_json(memory.user_id),
        "team_id": id_json(memory.team_id),
        "key": memory.key,
        "value": memory.value,
        "confidence": memory.confidence,
        "status": memory.status,
        "source_channel_id": id_json(memory.source_channel_id),
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
        "evidence": memory.evidence,
        "observed_at": time_json(memory.observed_at),
        "pinned": memory.pinned,
    }


def revision_json(revision: Revision) -> dict[str, Any]:
    """A proposed change to an active memory as JSON."""
    return {
        "id": str(revision.id),
        "memory_id": str(revision.memory_id),
        "old_value": revision.old_value,
        "new_value": revision.new_value,
        "confidence": revision.confidence,
        "status": revision.status,
        "source_event_id": id_json(revision.source_event_id),
        "created_at": revision.created_at.isoformat(),
        "evidence": revision.evidence,
        "observed_at": time_json(revision.observed_at),
    }


def turn_json(turn: Turn) -> dict[str, Any]:
    """A remembered conversation turn as JSON (its conversation is `event_id`)."""
    return {
        "id": str(turn.id),
        "channel_id": str(turn.channel_id),
        "event_id": str(turn.event_id),
        "user_id": str(turn.user_id),
        "persona_id": id_json(turn.persona_id),
        "team_id": id_json(turn.team_id),
        "role": turn.role,
        "speaker": turn.speaker,
        "text": turn.text,
        "at": turn.at.isoformat(),
        "position": turn.position,
    }


def pending_change_json(revision: Revision | None) -> dict[str, Any] | None:
    """A memory's change awaiting review as recall shows it: the proposal's `id`, the `new_value`
    and when it was proposed (`created_at`); None without one."""
    if revision is None:
        return None
    return {
        "id": str(revision.id),
        "new_value": revision.new_value,
        "created_at": revision.created_at.isoformat(),
    }


def recall_item_json(item: RecallItem) -> dict[str, Any]:
    """One item of recall as JSON: its `kind`, the memory's (`memory_json`) or the turn's
    (`turn_json`) fields, its `score` in its own kind's ranking and, for a memory, the recall
    branches that found it (`sources`) and its change awaiting review (`pending_change`, or null)."""
    if item.kind == "memory" and item.memory is not None:
        return {
            "kind": item.kind,
            **memory_json(item.memory),
            "score": item.score,
            "sources": list(item.sources),
            "pending_change": pending_change_json(item.pending_change),
        }
    if item.kind == "turn" and item.turn is not None:
        return {"kind": item.kind, **turn_json(item.turn), "score": item.score}
    raise ValueError(f"a recall item of kind {item.kind!r} without its {item.kind}")
