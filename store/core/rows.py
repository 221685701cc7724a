"""The one shape of each row kind the stores read: a memory, a revision and a turn are read as the
columns named like their model's fields (`store.model.Memory`, `Revision`, `Turn`), in that order,
and decoded by name. The tables hold these columns and the decoders read each of them (tests hold
both to the models), the raw SQL selects them (`columns_sql`), SQLAlchemy selects them
(`memory_columns`, `turn_columns`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Column, Table
from sqlalchemy.engine import Row

from store.model import Memory, Revision, Turn
from store.rules.policy import storable_confidence


def field_names(model: type[Any]) -> tuple[str, ...]:
    """The names of a model dataclass's fields, in order: its row's columns."""
    return tuple(field.name for field in dataclasses.fields(model))


def _optional(model: type[Any]) -> tuple[str, ...]:
    """The fields with a default: a row read without them (an older column list) reads None."""
    return tuple(f.name for f in dataclasses.fields(model) if f.default is not dataclasses.MISSING)


# what a `Memory`, a `Revision` and a `Turn` are made of, in the order the raw SQL selects them
MEMORY_COLUMNS = field_names(Memory)
REVISION_COLUMNS = field_names(Revision)
TURN_COLUMNS = field_names(Turn)
_REVISION_REQUIRED = tuple(n for n in REVISION_COLUMNS if n not in _optional(Revision) and n != "confidence")
_REVISION_OPTIONAL = _optional(Revision)


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
    if isinstance(row, dict):
        # the raw statements' rows (psycopg's dict rows) first: `Row` is an ABC, and an ABC's
        # isinstance costs four times a dict's, on every candidate a recall decodes
        return row
    mapping: Mapping[Any, Any] = row._mapping if isinstance(row, Row) else row
    return mapping


def memory_from_row(row: Any) -> Memory:
    """A `Memory` from a SQLAlchemy row or a mapping holding `MEMORY_COLUMNS` by name; a row without the
    evidence, observation time or team reads them as None, without `pinned` as not pinned."""
    data = _mapping(row)
    # each field by name, not a loop over the column list: recall decodes every candidate, and the
    # loop costs half as much again (a test holds this to the model's fields)
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
        pinned=bool(data.get("pinned")),
    )


def revision_from_row(row: Any) -> Revision:
    """A `Revision` from a row (or mapping) holding `REVISION_COLUMNS` by name."""
    data = _mapping(row)
    values = {name: data[name] for name in _REVISION_REQUIRED}
    values.update((name, data.get(name)) for name in _REVISION_OPTIONAL)
    return Revision(confidence=storable_confidence(data["confidence"]), **values)


def turn_from_row(row: Any) -> Turn:
    """A `Turn` from a SQLAlchemy row or a mapping holding `TURN_COLUMNS` by name (each field by
    name, as `memory_from_row`: turn recall decodes every candidate)."""
    data = _mapping(row)
    return Turn(
        id=data["id"],
        channel_id=data["channel_id"],
        event_id=data["event_id"],
        user_id=data["user_id"],
        persona_id=data["persona_id"],
        team_id=data["team_id"],
        role=data["role"],
        text=data["text"],
        at=data["at"],
        position=data["position"],
        speaker=data["speaker"],
    )
