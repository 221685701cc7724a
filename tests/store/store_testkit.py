"""Helpers for the store tests: a tiny concept embedder and memory builders."""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import sqlalchemy

from extraction.embeddings import hashing_vector
from store.model import NewMemory, Scope, Status
from store.postgres.store import PostgresMemoryStore
from store.sqlite.store import SqliteMemoryStore

Store = PostgresMemoryStore | SqliteMemoryStore
MakeStore = Callable[..., Awaitable[Store]]

_WORD = re.compile(r"[a-z]+")

# words that share a meaning share an axis; everything else carries no meaning
CONCEPTS: dict[str, int] = {
    "dog": 0,
    "puppy": 0,
    "canine": 0,
    "retriever": 0,
    "coffee": 1,
    "espresso": 1,
    "latte": 1,
    "city": 2,
    "lisbon": 2,
    "porto": 2,
    "project": 3,
    "launch": 3,
    "deadline": 3,
    "park": 4,
    "garden": 4,
    "vet": 6,
}
FALLBACK_AXIS = 7


@dataclass(frozen=True, kw_only=True, slots=True)
class ConceptEmbedder:
    """Deterministic 8-dimension embedder: synonyms land on the same axis, other words nowhere."""

    dim: int = 8

    def vector(self, text: str) -> list[float]:
        """Unit vector of the text's concepts (the fallback axis when it has none)."""
        vector = [0.0] * self.dim
        for word in _WORD.findall(text.lower()):
            axis = CONCEPTS.get(word)
            if axis is not None:
                vector[axis] += 1.0
        if not any(vector):
            vector[FALLBACK_AXIS] = 1.0
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One concept vector per text."""
        return [self.vector(t) for t in texts]


def mem(
    *,
    scope: Scope = "user",
    owner: uuid.UUID,
    user: uuid.UUID | None = None,
    key: str,
    value: str,
    status: Status = "active",
    confidence: float = 1.0,
    channel: uuid.UUID | None = None,
    team: uuid.UUID | None = None,
) -> NewMemory:
    """A NewMemory with test-friendly defaults (explicit, active)."""
    return NewMemory(
        scope=scope,
        owner_id=owner,
        user_id=user,
        key=key,
        value=value,
        status=status,
        confidence=confidence,
        source_channel_id=channel,
        team_id=team,
    )


@contextmanager
def recorded_statements(store: PostgresMemoryStore | SqliteMemoryStore) -> Iterator[list[str]]:
    """The SQL text of every statement the store sends inside the block. On Postgres they are
    taken where psycopg sends them, so the statements the store sends past SQLAlchemy (pipelined
    writes, recall) count too."""
    statements: list[str] = []
    if isinstance(store, PostgresMemoryStore):
        real = psycopg.AsyncCursor.execute

        async def execute(cursor: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
            statements.append(query if isinstance(query, str) else str(query))
            return await real(cursor, query, params, **kwargs)

        psycopg.AsyncCursor.execute = execute  # type: ignore[method-assign]
        try:
            yield statements
        finally:
            psycopg.AsyncCursor.execute = real  # type: ignore[method-assign]
        return

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    sqlalchemy.event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        sqlalchemy.event.remove(store.engine.sync_engine, "before_cursor_execute", record)


def fact(
    owner: uuid.UUID, key: str, value: str, *, team: uuid.UUID | None = None, scope: str = "user"
) -> NewMemory:
    """A pending fact of a user-less owner, embedded by the 384-d hashing embedder."""
    return NewMemory(
        scope=scope,  # type: ignore[arg-type]
        owner_id=owner,
        user_id=None,
        key=key,
        value=value,
        confidence=0.9,
        status="pending_review",
        embedding=hashing_vector(f"{key}: {value}", 384),
        team_id=team,
    )
