"""The one shape of each row kind the stores read: a memory, a revision and a turn are read as the
columns named like their model's fields (`store.model.Memory`, `Revision`, `Turn`), in that order,
and decoded by name. The tables hold these columns (a test checks the schema against them), the
raw SQL selects them (`columns_sql`), SQLAlchemy selects them (`memory_columns`, `turn_columns`)."""

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
_MEMORY_REQUIRED = tuple(n for n in MEMORY_COLUMNS if n not in _optional(Memory) and n != "confidence")
_MEMORY_OPTIONAL = _optional(Memory)
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
    mapping: Mapping[Any, Any] = row._mapping if isinstance(row, Row) else row
    return mapping


def memory_from_row(row: Any) -> Memory:
    """A `Memory` from a SQLAlchemy row or a mapping holding `MEMORY_COLUMNS` by name; a row without the
    evidence, observation time or team reads them as None."""
    data = _mapping(row)
    values = {name: data[name] for name in _MEMORY_REQUIRED}
    values.update((name, data.get(name)) for name in _MEMORY_OPTIONAL)
    # REAL: 0.7 reads back as 0.69999998
    return Memory(confidence=storable_confidence(data["confidence"]), **values)


def revision_from_row(row: Any) -> Revision:
    """A `Revision` from a row (or mapping) holding `REVISION_COLUMNS` by name."""
    data = _mapping(row)
    values = {name: data[name] for name in _REVISION_REQUIRED}
    values.update((name, data.get(name)) for name in _REVISION_OPTIONAL)
    return Revision(confidence=storable_confidence(data["confidence"]), **values)


def turn_from_row(row: Any) -> Turn:
    """A `Turn` from a SQLAlchemy row or a mapping holding `TURN_COLUMNS` by name."""
    data = _mapping(row)
    return Turn(**{name: data[name] for name in TURN_COLUMNS})
