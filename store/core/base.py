"""The base every role of the store builds on (writes, review, listing, …: the objects `CoreStore`
holds): the backend it holds (connections, transactions, the clock: `store.core.backend.Backend`),
schema, row conversion, embeddings, locked reads and the audit trail; `replica_read` marks the
reads a read replica may serve."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

from sqlalchemy import ColumnElement, Select, and_, delete, false, func, or_, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store.core.backend import Backend
from store.core.rows import memory_columns, memory_from_row, revision_from_row
from store.core.schema import Schema
from store.errors import StoreError
from store.model import (
    AuditAction,
    AuditEntry,
    Memory,
    MemorySettings,
    NewMemory,
    OwnerRef,
    Revision,
)
from store.protocols import Embedder
from store.rules.keys import embedding_text
from store.rules.pagination import decode_cursor
from store.rules.recall import ScoreFusion, embedding_queries, mean_direction

# audit rows collected during a transaction, written together (`StoreBase._flush_audits`)
AuditRows = list[dict[str, Any]]


class OnBackend(Protocol):
    """Anything that holds a backend: a role of the store, or the store itself."""

    _backend: Backend


Store = TypeVar("Store", bound=OnBackend)
P = ParamSpec("P")
R = TypeVar("R")


def replica_read(
    read: Callable[Concatenate[Store, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Store, P], Coroutine[Any, Any, R]]:
    """Mark a store method as a read a read replica may serve: the store's backend runs it where
    it routes such reads (`Backend.routed_read`; a backend without replicas runs it as it is)."""

    @functools.wraps(read)
    async def routed(self: Store, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._backend.routed_read(lambda: read(self, *args, **kwargs))

    return routed


def _vector(value: Any) -> list[float] | None:
    if value is None:
        return None
    return [float(x) for x in (value.tolist() if hasattr(value, "tolist") else value)]


def audit_values(
    action: AuditAction,
    *,
    memory: Memory | NewMemory,
    memory_id: uuid.UUID,
    old_value: str | None,
    new_value: str | None,
    actor: str,
    event_id: uuid.UUID | None = None,
    revision_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    """One audit row's columns but its time (for one INSERT or a multi-row one)."""
    return {
        "memory_id": memory_id,
        "action": action,
        "scope": memory.scope,
        "owner_id": memory.owner_id,
        "user_id": memory.user_id,
        "key": memory.key,
        "old_value": old_value,
        "new_value": new_value,
        "actor": actor,
        "event_id": event_id,
        "revision_id": revision_id,
        "team_id": memory.team_id,
    }


def change_audit_values(
    action: AuditAction,
    memory: Memory,
    new_value: str | None,
    *,
    actor: str,
    event_id: uuid.UUID | None = None,
    revision_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    """`audit_values` of a stored memory whose value `new_value` replaces, confirms or is proposed
    to replace (None: the memory leaves, archived or rejected)."""
    return audit_values(
        action,
        memory=memory,
        memory_id=memory.id,
        old_value=memory.value,
        new_value=new_value,
        actor=actor,
        event_id=event_id,
        revision_id=revision_id,
    )


def checked_vector(vector: Sequence[float], dim: int, what: str) -> list[float]:
    """`vector` as a list of floats; `StoreError` unless it has the store's `dim` dimensions."""
    if len(vector) != dim:
        raise StoreError(
            f"{what} has {len(vector)} dimensions but the store is configured for "
            f"{dim} (PMEM_EMBEDDING_DIM); use the same embedding model for "
            "writing and recall"
        )
    if type(vector) is list and set(map(type, vector)) == {float}:
        return vector  # what the embedders return: no copy (a tenth of the time)
    return [float(x) for x in vector]


async def embed_queries(embedder: Embedder, queries: Sequence[str], dim: int) -> list[list[float]]:
    """Recall's query embeddings, dimension-checked. An embedder with `embed_queries` (a query
    role, e5's "query: "; a short timeout, at most one retry: a person is waiting) is asked
    through it; any other embeds queries as it embeds memories."""
    embed = getattr(embedder, "embed_queries", None)
    if embed is not None:
        vectors: list[list[float]] = await embed(list(queries))
    else:
        vectors = await embedder.embed(list(queries))
    return [checked_vector(vector, dim, "query embedding") for vector in vectors]


async def query_vector(
    embedder: Embedder, text: str, word_share: Mapping[str, float], fusion: ScoreFusion, dim: int
) -> list[float]:
    """A recall's query vector: the mean direction of the query's embedding texts (the query, and
    the query without the words most of the rows hold: `store.rules.recall.embedding_queries`)."""
    return await texts_vector(embedder, embedding_queries(text, word_share, fusion), dim)


async def texts_vector(embedder: Embedder, texts: Sequence[str], dim: int) -> list[float]:
    """The mean direction of these texts' query embeddings, embedded together (one text: its
    embedding)."""
    vectors = await embed_queries(embedder, texts, dim)
    return vectors[0] if len(vectors) == 1 else mean_direction(vectors)


def owner_clause(table: Any, owners: Sequence[OwnerRef]) -> ColumnElement[bool]:
    """SQL for "a row of `table` belongs to one of these owners"; an empty list matches nothing."""
    clauses: list[ColumnElement[bool]] = []
    for owner in owners:
        parts = [table.c.scope == owner.scope, table.c.owner_id == owner.owner_id]
        if owner.scope == "persona_user":
            if owner.user_id is None:
                raise ValueError("a persona_user owner needs user_id")
            parts.append(table.c.user_id == owner.user_id)
        clauses.append(and_(*parts))
    return or_(*clauses) if clauses else false()


def team_clause(table: Any, team_id: uuid.UUID | None) -> ColumnElement[bool]:
    """SQL for "a row of `table` is visible in this team's context": of no team, or of `team_id`."""
    if team_id is None:
        return cast(ColumnElement[bool], table.c.team_id.is_(None))
    return or_(table.c.team_id.is_(None), table.c.team_id == team_id)


class StoreBase:
    """State and helpers every role of the store shares (writes, review, listing, erasure,
    settings…); a role inherits this and no other role."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        schema: Schema,
        backend: Backend,
        embedder: Embedder,
        settings_defaults: MemorySettings | None = None,
    ) -> None:
        self._engine = engine
        self._schema = schema
        self._backend = backend
        self._embedder = embedder
        # what the settings merge starts from (the deployment's PMEM_* defaults)
        self._settings_defaults = settings_defaults or MemorySettings()
        m = schema.memories
        self._memory_columns = memory_columns(m)
        self._key_index = [
            m.c.scope,
            m.c.owner_id,
            func.coalesce(m.c.user_id, backend.nil()),
            func.coalesce(m.c.team_id, backend.nil()),
            m.c.key,
        ]

    def _insert(self, table: Any) -> Any:
        return self._backend.insert(table)

    # -- row conversion -------------------------------------------------------------------------

    _memory = staticmethod(memory_from_row)
    _revision = staticmethod(revision_from_row)

    def _about_user(self, user_id: uuid.UUID) -> ColumnElement[bool]:
        """Memories about one person: their `user` scope and their `persona_user` rows."""
        m = self._schema.memories
        return or_(
            and_(m.c.scope == "user", m.c.owner_id == user_id),
            and_(m.c.scope == "persona_user", m.c.user_id == user_id),
        )

    @staticmethod
    def _after(column_at: Any, column_id: Any, cursor: str | None) -> list[ColumnElement[bool]]:
        if cursor is None:
            return []
        at, item_id = decode_cursor(cursor)
        return [or_(column_at < at, and_(column_at == at, column_id < item_id))]

    def _team_clause(self, team_id: uuid.UUID | None, table: Any = None) -> ColumnElement[bool]:
        """SQL for "visible in this team's context": rows of no team, or of `team_id`."""
        return team_clause(self._schema.memories if table is None else table, team_id)

    # -- embeddings -----------------------------------------------------------------------------

    def _check_dim(self, vector: Sequence[float], what: str) -> list[float]:
        return checked_vector(vector, self._schema.embedding_dim, what)

    async def _embeddings_for(self, memories: Sequence[NewMemory]) -> list[list[float]]:
        """The given embeddings, computing the missing ones in one batch."""
        missing = [i for i, m in enumerate(memories) if m.embedding is None]
        computed: dict[int, list[float]] = {}
        if missing:
            texts = [embedding_text(memories[i].key, memories[i].value) for i in missing]
            vectors = await self._embedder.embed(texts)
            computed = dict(zip(missing, vectors, strict=True))
        result: list[list[float]] = []
        for i, memory in enumerate(memories):
            vector = memory.embedding if memory.embedding is not None else computed[i]
            result.append(self._check_dim(vector, f"embedding of {memory.key!r}"))
        return result

    async def embed_queries(self, queries: Sequence[str]) -> list[list[float]]:
        """Recall's query embeddings, dimension-checked (`embed_queries`)."""
        return await embed_queries(self._embedder, queries, self._schema.embedding_dim)

    async def embed_memory(self, key: str, value: str) -> list[float]:
        """The embedding a memory with this key and value is stored with (the document role)."""
        (vector,) = await self._embedder.embed([embedding_text(key, value)])
        return self._check_dim(vector, f"embedding of {key!r}")

    # -- locked reads inside a transaction ------------------------------------------------------

    async def _memory_in(
        self, conn: AsyncConnection, memory_id: uuid.UUID, *, lock: bool = False
    ) -> Memory | None:
        """One memory by id, any status, read on `conn` (locked for the transaction with `lock`)."""
        m = self._schema.memories
        stmt = select(*self._memory_columns).where(m.c.id == memory_id)
        if lock:
            stmt = stmt.with_for_update()
        row = (await conn.execute(stmt)).first()
        return None if row is None else self._memory(row)

    async def _open_revision(
        self, conn: AsyncConnection, memory_id: uuid.UUID, *, lock: bool
    ) -> tuple[Revision, list[float] | None] | None:
        r = self._schema.revisions
        stmt: Select[Any] = select(r).where(r.c.memory_id == memory_id, r.c.status == "pending")
        if lock:
            stmt = stmt.with_for_update()
        row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        return self._revision(row), _vector(row._mapping["embedding"])

    # -- audit ----------------------------------------------------------------------------------

    async def _set_archived(
        self, conn: AsyncConnection, memory: Memory, *, action: AuditAction, actor: str
    ) -> None:
        """Archive `memory` and audit it as `action` (an archive, or the rejection of a pending one)."""
        m = self._schema.memories
        await conn.execute(
            update(m).where(m.c.id == memory.id).values(status="archived", updated_at=self._backend.now())
        )
        await self._audit(conn, change_audit_values(action, memory, None, actor=actor))

    async def _audit(
        self, conn: AsyncConnection, columns: dict[str, Any], *, into: AuditRows | None = None
    ) -> None:
        """Write one audit row (`audit_values`, stamped now) at once, or append it to `into` for
        `_flush_audits` (one statement for all of a transaction's rows, in order)."""
        values = self._stamped(columns)
        if into is not None:
            into.append(values)
            return
        await conn.execute(self._insert(self._schema.audit).values(values))

    async def _flush_audits(self, conn: AsyncConnection, rows: AuditRows) -> None:
        """Insert the audit rows `_audit(into=rows)` collected, in one statement, and forget them."""
        if not rows:
            return
        await conn.execute(self._insert(self._schema.audit).values(list(rows)))
        rows.clear()

    def _stamped(self, columns: dict[str, Any]) -> dict[str, Any]:
        """An audit row's columns (`audit_values`) with its time."""
        return {**columns, "at": self._backend.now()}

    async def _close_revision(
        self,
        conn: AsyncConnection,
        revision: Revision,
        memory: Memory,
        *,
        status: str,
        actor: str,
        audit: bool,
        audits_into: AuditRows | None = None,
    ) -> None:
        r = self._schema.revisions
        await conn.execute(
            update(r)
            .where(r.c.id == revision.id)
            .values(status=status, decided_by=actor, decided_at=self._backend.now())
        )
        if audit:
            action: AuditAction = "approve" if status == "approved" else "reject"
            await self._audit(
                conn,
                change_audit_values(action, memory, revision.new_value, actor=actor, revision_id=revision.id),
                into=audits_into,
            )

    async def _erase_rows(self, conn: AsyncConnection, memories: Sequence[Memory], *, actor: str) -> None:
        """Erase memories: delete their rows and revisions, strip their audit rows' text, leave one
        content-free tombstone each (`store.core.erasure`)."""
        if not memories:
            return
        m, r, a = self._schema.memories, self._schema.revisions, self._schema.audit
        ids = [memory.id for memory in memories]
        await conn.execute(delete(r).where(r.c.memory_id.in_(ids)))
        await conn.execute(delete(m).where(m.c.id.in_(ids)))
        await conn.execute(
            update(a).where(a.c.memory_id.in_(ids)).values(key=None, old_value=None, new_value=None)
        )
        now = datetime.now(UTC)  # a value, not the backend's now(): executemany binds every row
        await conn.execute(
            self._insert(a),
            [
                {
                    "memory_id": memory.id,
                    "action": "erase",
                    "scope": memory.scope,
                    "owner_id": memory.owner_id,
                    "user_id": memory.user_id,
                    "team_id": memory.team_id,
                    "key": None,
                    "old_value": None,
                    "new_value": None,
                    "actor": actor,
                    "event_id": None,
                    "revision_id": None,
                    "at": now,
                }
                for memory in memories
            ],
        )

    async def get_by_id(self, memory_id: uuid.UUID) -> Memory | None:
        """One memory by id, any status."""
        async with self._backend.reading() as conn:
            return await self._memory_in(conn, memory_id)


def audit_entry(row: Row[Any]) -> AuditEntry:
    """An `AuditEntry` from a `memory_audit` row."""
    return AuditEntry(
        id=row.id,
        memory_id=row.memory_id,
        action=row.action,
        old_value=row.old_value,
        new_value=row.new_value,
        actor=row.actor,
        event_id=row.event_id,
        at=row.at,
        scope=row.scope,
        key=row.key,
        revision_id=row.revision_id,
    )
