"""`Backend`: what the shared store code asks of its database where Postgres and SQLite differ.

The shared modules (`store.core`) build their statements with SQLAlchemy Core and never test which
database they run on; the store holds its backend (`store.postgres.backend.PgBackend`,
`store.sqlite.backend.SqliteBackend`) and hands it every database-specific operation: its
connections and transactions, its clock, where a read may run (a read replica), memory recall, an
event's write when it has a faster one, the schema check and closing.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sqlalchemy import ColumnElement, Table
from sqlalchemy.ext.asyncio import AsyncConnection

from store.model import (
    ContextFacts,
    DedupRule,
    EventWrite,
    Memory,
    Neighbour,
    NewMemory,
    NewTurn,
    OwnerRef,
    RecallHit,
    RecallQuery,
    Revision,
    TurnHit,
)

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class EventBatch:
    """One event's write as `write_event` hands it on: the memories with their embeddings, how to
    dedup them, and the event's conversation turns."""

    event_id: uuid.UUID
    memories: Sequence[NewMemory]
    embeddings: Sequence[list[float]]
    actor: str
    dedup: DedupRule | None
    neighbours: int
    turns: Sequence[NewTurn] = ()
    body_sha256: str | None = None


# the query vector for the query words' shares of a context's recent turns, when it is not the
# recall's `vector` (other words dropped: `store.rules.recall.embedding_queries`), else None
FocusedVector = Callable[[Mapping[str, float]], Awaitable[list[float] | None]]


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnRecall:
    """A checked turn recall as a backend ranks it: the context (user, persona or none, team or
    none), the query (its cues lift turns as the memory recall's do), its words to match (`text`)
    and its vector (`vector`: the one the context's last counted word shares choose, or the
    caller's); `focus` (None: the vector stands) gives the vector for the words' shares of the
    context's recent turns, which the backend counts with the ranking, where it differs; `k`
    candidates per ranking, `limit` results."""

    user_id: uuid.UUID
    persona_id: uuid.UUID | None
    team_id: uuid.UUID | None
    query: str
    text: str
    vector: Sequence[float]
    focus: FocusedVector | None
    k: int
    limit: int


class Backend(Protocol):
    """The database-specific part of the shared store code."""

    def now(self) -> Any:
        """The timestamp written on changes (a value, or a SQL expression of the server's clock)."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A connection in a transaction, committed when the block ends (database errors as
        `store.errors` ones)."""
        ...

    def reading(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A connection for reads (on a read replica inside `routed_read` when one serves it)."""
        ...

    async def routed_read(self, read: Callable[[], Awaitable[T]]) -> T:
        """`read()` where the database serves a read a replica may answer (a replica when one is
        fit and the caller's read scope allows it, else the primary)."""
        ...

    async def recall_memories(self, asked: RecallQuery) -> list[RecallHit]:
        """The ranked memories of a checked recall (`limit` above 0)."""
        ...

    async def context_facts(
        self, asked: RecallQuery, *, standing: int, pinned: int, standing_budget: int | None
    ) -> ContextFacts | None:
        """A hint's facts of the context in one statement (`CoreStore.context_facts`), or None where
        the database has no such statement: the shared store then reads them apart."""
        ...

    async def pinned_memories(
        self, user_id: uuid.UUID, persona_id: uuid.UUID | None, *, team_id: uuid.UUID | None, limit: int
    ) -> list[Memory] | None:
        """The context's active pinned memories on the driver, or None: the shared store's read."""
        ...

    async def pending_changes(self, memory_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Revision] | None:
        """The open proposal of each memory on the driver, or None: the shared store's read."""
        ...

    async def write_event(self, batch: EventBatch) -> EventWrite | None:
        """The database's own write of an event when it has one for this batch, else None (the
        shared write, one statement at a time, writes it)."""
        ...

    async def check_schema(self) -> None:
        """Raise `store.migrate.SchemaError` unless the database's tables are this version's
        (SQLite creates them)."""
        ...

    async def close(self) -> None:
        """Close every pooled connection."""
        ...

    def nil(self) -> ColumnElement[Any]:
        """The nil uuid as a SQL literal: what the key and context indexes coalesce a NULL id to."""
        ...

    def insert(self, table: Table) -> Any:
        """An INSERT into `table` in this database's dialect (it has `on_conflict_do_nothing`)."""
        ...

    async def lock_owners(self, conn: AsyncConnection, memories: Sequence[NewMemory]) -> None:
        """Make the writers of these memories' owners wait for each other until the transaction
        ends, so two concurrent events of one owner cannot both miss each other's fact."""
        ...

    async def neighbours(
        self,
        conn: AsyncConnection,
        memories: Sequence[NewMemory],
        embeddings: Sequence[Sequence[float]],
        k: int,
    ) -> list[list[Neighbour]]:
        """Per new memory: its k nearest stored memories of the same owner (active or pending,
        visible in its team context) plus a stored row under the same key, best first."""
        ...

    async def prompt_memories(
        self, owners: Sequence[OwnerRef], *, team_id: uuid.UUID | None, words: Sequence[str], limit: int
    ) -> list[Memory]:
        """At most `limit` active or pending memories of these owners in the team context, the
        most relevant to `words` first where the database can rank them."""
        ...

    async def insert_turns(
        self, conn: AsyncConnection, event_id: uuid.UUID, turns: Sequence[NewTurn]
    ) -> None:
        """Store an event's turns in the caller's transaction; a turn already stored is kept."""
        ...

    async def recall_turns(self, asked: TurnRecall) -> list[TurnHit]:
        """The `limit` turns of the context that best match the query (`TurnRecall`), among its
        most recent ones, each message once."""
        ...
