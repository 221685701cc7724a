"""Helpers for the store tests: a tiny concept embedder, memory builders, and a Postgres store whose
connections record what it sends."""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import sqlalchemy
from psycopg import pq

from extraction.embeddings import hashing_vector
from store.model import NewMemory, Scope, Status
from store.postgres.connections import PgConnections
from store.postgres.store import PostgresMemoryStore
from store.protocols import Embedder
from store.sqlite.store import SqliteMemoryStore
from tests.database_role import DATABASE_ROLE
from tests.factories import user_fact

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


@dataclass(frozen=True, slots=True)
class Sent:
    """One statement a store sent on a psycopg driver connection, and whether in a pipeline."""

    sql: str
    pipelined: bool

    @property
    def words(self) -> str:
        """Its first two words, upper case (what a statement's shape is told by)."""
        return " ".join(self.sql.split()[:2]).upper()


@dataclass(slots=True)
class Traffic:
    """What a store sent while recorded: its driver statements, its SQLAlchemy statements, and
    the round trips (a pipeline, or a statement sent on its own)."""

    sent: list[Sent] = field(default_factory=list)
    through_sqlalchemy: list[str] = field(default_factory=list)
    round_trips: int = 0

    @property
    def statements(self) -> list[str]:
        """The SQL of every statement, driver and SQLAlchemy ones alike."""
        return [s.sql for s in self.sent] + self.through_sqlalchemy


class RecordingConnections(PgConnections):
    """`PgConnections` that records what goes through it while `recording` (given to the store
    as its `connections`): nothing in psycopg or SQLAlchemy is patched."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.traffic: Traffic | None = None
        sqlalchemy.event.listen(self.engine.sync_engine, "before_cursor_execute", self._sqlalchemy_statement)
        self._cursor_type = _recording_cursor(self)

    @contextmanager
    def recording(self) -> Iterator[Traffic]:
        """Record the traffic inside the block."""
        self.traffic = Traffic()
        try:
            yield self.traffic
        finally:
            self.traffic = None

    def sent_on_driver(self, driver: psycopg.AsyncConnection[Any], sql: str) -> None:
        """Record a statement sent on a driver connection (a round trip unless pipelined)."""
        if self.traffic is None:
            return
        pipelined = driver.pgconn.pipeline_status != pq.PipelineStatus.OFF
        self.traffic.sent.append(Sent(sql, pipelined))
        self.traffic.round_trips += not pipelined

    def _sqlalchemy_statement(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self.traffic is not None:
            self.traffic.through_sqlalchemy.append(statement)
            self.traffic.round_trips += 1

    @asynccontextmanager
    async def driver(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with super().driver() as driver:
            driver.cursor_factory = self._cursor_type
            try:
                yield driver
            finally:
                driver.cursor_factory = psycopg.AsyncCursor

    @asynccontextmanager
    async def round_trip(self, driver: psycopg.AsyncConnection[Any]) -> AsyncIterator[Any]:
        if self.traffic is not None:
            self.traffic.round_trips += 1
        async with super().round_trip(driver) as pipeline:
            yield pipeline


def _recording_cursor(connections: RecordingConnections) -> type[psycopg.AsyncCursor[Any]]:
    """A cursor class that tells `connections` each statement it executes."""

    class RecordingCursor(psycopg.AsyncCursor[Any]):
        async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            connections.sent_on_driver(self.connection, str(query))
            return await super().execute(query, params, **kwargs)

    return RecordingCursor


def postgres_store(url: str, embedder: Embedder, **kwargs: Any) -> PostgresMemoryStore:
    """A Postgres store whose connections record (`recorded`), as the product connects: as
    `pmem_app` unless `database_role` says otherwise (the test's own calls run in the platform
    scope, `the_test_sees_every_team`)."""
    kwargs.setdefault("database_role", DATABASE_ROLE)
    return PostgresMemoryStore(url, embedder, connections=RecordingConnections, **kwargs)


@contextmanager
def recorded(store: PostgresMemoryStore | SqliteMemoryStore) -> Iterator[Traffic]:
    """What the store sends inside the block. A Postgres store must come from `postgres_store`;
    on SQLite, every statement goes through SQLAlchemy."""
    if isinstance(store, PostgresMemoryStore):
        connections = store.connections
        assert isinstance(connections, RecordingConnections), "open the store with postgres_store"
        with connections.recording() as traffic:
            yield traffic
        return
    traffic = Traffic()

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        traffic.through_sqlalchemy.append(statement)
        traffic.round_trips += 1

    sqlalchemy.event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield traffic
    finally:
        sqlalchemy.event.remove(store.engine.sync_engine, "before_cursor_execute", record)


def reopened(store: PostgresMemoryStore) -> PostgresMemoryStore:
    """Another store on the same database, as another worker process opens it (nothing cached)."""
    url = store.engine.url.render_as_string(hide_password=False)
    return postgres_store(url, store.embedder)


def fact(
    owner: uuid.UUID, key: str, value: str, *, team: uuid.UUID | None = None, scope: str = "user"
) -> NewMemory:
    """A pending fact of a user-less owner, embedded by the 384-d hashing embedder."""
    return user_fact(
        owner,
        key,
        value,
        scope=scope,
        confidence=0.9,
        status="pending_review",
        embedding=hashing_vector(f"{key}: {value}", 384),
        team_id=team,
    )
