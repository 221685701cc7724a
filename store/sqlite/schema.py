"""The SQLite side of the tables (`store.core.schema`): UUIDs as dashed text, embeddings as JSON
text (vectors are scored in-process), plain integer keys; full text lives in FTS5 tables the
store keeps beside them (`store.sqlite.store`)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import Dialect, Float, Integer, Table, Text, TypeDecorator

from store.core.schema import SchemaDialect

__all__ = ["SQLITE", "JsonVector", "TextUuid"]

NIL_UUID_TEXT = "'00000000-0000-0000-0000-000000000000'"


class TextUuid(TypeDecorator[uuid.UUID]):
    """UUID stored as canonical dashed TEXT on SQLite."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        """UUID (or its string) → dashed text."""
        return None if value is None else str(uuid.UUID(str(value)))

    def process_result_value(self, value: Any, dialect: Dialect) -> uuid.UUID | None:
        """Dashed text → UUID."""
        return None if value is None else uuid.UUID(str(value))


class JsonVector(TypeDecorator[list[float]]):
    """An embedding as a JSON array in TEXT (SQLite has no vector type)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        """List of floats → compact JSON."""
        return None if value is None else json.dumps([float(x) for x in value], separators=(",", ":"))

    def process_result_value(self, value: Any, dialect: Dialect) -> list[float] | None:
        """JSON → list of floats."""
        return None if value is None else [float(x) for x in json.loads(value)]


def _nothing_more(memories: Table, turns: Table, dim: int) -> None:
    """SQLite's full text is in FTS5 tables outside the metadata, its vectors scored in Python."""


SQLITE = SchemaDialect(
    guid=TextUuid(),
    real=Float(),
    embedding=lambda dim: JsonVector(),
    serial=Integer(),
    numbered=tuple,
    nil=NIL_UUID_TEXT,
    new_id=None,
    extend=_nothing_more,
)
