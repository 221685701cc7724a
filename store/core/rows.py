"""The memory, revision and turn columns the stores read, and the decoders of their rows, by name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Column, Table
from sqlalchemy.engine import Row

from store.model import Memory, Revision, Turn
from store.rules.policy import storable_confidence

# what a `Memory` is made of, in the order the raw SQL selects them
MEMORY_COLUMNS = (
    "id", "scope", "owner_id", "user_id", "key", "value", "source_channel_id", "confidence",
    "status", "created_at", "updated_at", "team_id", "evidence", "observed_at",
)  # fmt: skip
REVISION_COLUMNS = (
    "id", "memory_id", "old_value", "new_value", "confidence", "source_event_id", "status",
    "created_at", "evidence", "observed_at",
)  # fmt: skip
# what a `Turn` is made of (its `Turn` fields, in order)
TURN_COLUMNS = (
    "id", "channel_id", "event_id", "user_id", "persona_id", "team_id", "role", "text", "at",
    "position", "speaker",
)  # fmt: skip


def columns_sql(columns: tuple[str, ...], alias: str) -> str:
    """`alias.column, …` for a raw SELECT of these columns."""
    return ", ".join(f"{alias}.{name}" for name in columns)


def memory_columns(table: Table) -> list[Column[Any]]:
    """`MEMORY_COLUMNS` of the memories table, for a SQLAlchemy SELECT."""
    return [table.c[name] for name in MEMORY_COLUMNS]


def turn_columns(table: Table) -> list[Column[Any]]:
    """`TURN_COLUMNS` of the turns table, for a SQLAlchemy SELECT."""
    return [table.c[name] for name in TURN_COLUMNS]


def _mapping(row: Any) -> Mapping[Any, Any]:
    mapping: Mapping[Any, Any] = row._mapping if isinstance(row, Row) else row
    return mapping


def memory_from_row(row: Any) -> Memory:
    """A `Memory` from a SQLAlchemy row or a mapping holding `MEMORY_COLUMNS` by name; a row without the
    evidence, observation time or team reads them as None."""
    data = _mapping(row)
    return Memory(
        id=data["id"],
        scope=data["scope"],
        owner_id=data["owner_id"],
        user_id=data["user_id"],
        key=data["key"],
        value=data["value"],
        source_channel_id=data["source_channel_id"],
        # REAL: 0.7 reads back as 0.69999998
        confidence=storable_confidence(data["confidence"]),
        status=data["status"],
        created_at=data["created_at"],
        updated_at=data["updated_at"],
        team_id=data.get("team_id"),
        evidence=data.get("evidence"),
        observed_at=data.get("observed_at"),
    )


def revision_from_row(row: Any) -> Revision:
    """A `Revision` from a row (or mapping) holding `REVISION_COLUMNS` by name."""
    data = _mapping(row)
    return Revision(
        id=data["id"],
        memory_id=data["memory_id"],
        old_value=data["old_value"],
        new_value=data["new_value"],
        confidence=storable_confidence(data["confidence"]),
        source_event_id=data["source_event_id"],
        status=data["status"],
        created_at=data["created_at"],
        evidence=data.get("evidence"),
        observed_at=data.get("observed_at"),
    )


def turn_from_row(row: Any) -> Turn:
    """A `Turn` from a SQLAlchemy row or a mapping holding `TURN_COLUMNS` by name."""
    data = _mapping(row)
    return Turn(**{name: data[name] for name in TURN_COLUMNS})
