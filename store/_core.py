"""The part of the store both backends share, in SQLAlchemy Core: writes with their audit trail,
review, listing, settings, idempotent events and chat history. Recall lives in each backend.

Decisions come from `store.policy` (pure); this module only reads rows, asks the policy and runs
the plan inside one transaction. Rows are locked (`FOR UPDATE` on Postgres; SQLite serialises
writers itself) before deciding, so concurrent writers cannot both act on a stale read.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, Select, and_, delete, false, func, literal_column, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store.policy import (
    merge_settings,
    plan_approve,
    plan_reject,
    plan_upsert,
    same_value,
    storable_confidence,
    validate_new_memory,
)
from store.recall import embedding_text
from store.schema import NIL_UUID_SQL, Schema
from store.types import (
    NIL_UUID,
    AuditAction,
    AuditEntry,
    ChatMessage,
    EventMemory,
    EventWrite,
    Memory,
    MemoryFilter,
    MemorySettings,
    NewMemory,
    OwnerRef,
    Revision,
    Scope,
    SettingsLevel,
    UpsertAction,
    UpsertResult,
)
from store.typing import Embedder

_SETTINGS_LEVEL_ORDER = {"global": 0, "team": 1, "persona": 2}
# The audit actions `write_event` records, as the upsert actions they stand for.
_EVENT_AUDIT_ACTIONS: dict[AuditAction, UpsertAction] = {
    "add": "created",
    "update": "updated",
    "propose": "revision_proposed",
}


class StoreError(RuntimeError):
    """A store operation failed for a reason the caller can fix; the message says how."""


def _nil(schema: Schema) -> Any:
    return literal_column(NIL_UUID_SQL if schema.dialect == "postgresql" else f"'{NIL_UUID}'")


def _vector(value: Any) -> builtins.list[float] | None:
    if value is None:
        return None
    return [float(x) for x in (value.tolist() if hasattr(value, "tolist") else value)]


class CoreStore:
    """Shared implementation of the MemoryStore and HistoryStore protocols (everything but recall)."""

    def __init__(self, *, engine: AsyncEngine, schema: Schema, embedder: Embedder) -> None:
        self._engine = engine
        self._schema = schema
        self._embedder = embedder
        m = schema.memories
        self._memory_columns = [
            m.c.id,
            m.c.scope,
            m.c.owner_id,
            m.c.user_id,
            m.c.key,
            m.c.value,
            m.c.source_channel_id,
            m.c.confidence,
            m.c.status,
            m.c.created_at,
            m.c.updated_at,
        ]
        self._key_index = [m.c.scope, m.c.owner_id, func.coalesce(m.c.user_id, _nil(schema)), m.c.key]

    @property
    def embedder(self) -> Embedder:
        """The embedder this store embeds values and queries with."""
        return self._embedder

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy async engine (for tests and tools that need raw access)."""
        return self._engine

    # -- hooks the backends override ------------------------------------------------------------

    def _now(self) -> Any:
        """The timestamp written on changes."""
        return datetime.now(UTC)

    def _insert(self, table: Any) -> Any:
        dialect = postgresql if self._schema.dialect == "postgresql" else sqlite
        return dialect.insert(table)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[AsyncConnection]:
        async with self._engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        async with self._engine.connect() as conn:
            yield conn

    # -- row conversion -------------------------------------------------------------------------

    @staticmethod
    def _memory(row: Any) -> Memory:
        """A `Memory` from a result row (or mapping) holding the memory columns."""
        data: Any = row._mapping if isinstance(row, Row) else row
        return Memory(
            id=data["id"],
            scope=data["scope"],
            owner_id=data["owner_id"],
            user_id=data["user_id"],
            key=data["key"],
            value=data["value"],
            source_channel_id=data["source_channel_id"],
            confidence=storable_confidence(data["confidence"]),
            status=data["status"],
            created_at=data["created_at"],
            updated_at=data["updated_at"],
        )

    @staticmethod
    def _revision(row: Row[Any]) -> Revision:
        data = row._mapping
        return Revision(
            id=data["id"],
            memory_id=data["memory_id"],
            old_value=data["old_value"],
            new_value=data["new_value"],
            confidence=storable_confidence(data["confidence"]),
            source_event_id=data["source_event_id"],
            status=data["status"],
            created_at=data["created_at"],
        )

    def _owner_clause(self, owners: Sequence[OwnerRef], table: Any = None) -> ColumnElement[bool]:
        """SQL for "belongs to one of these owners"; an empty list matches nothing."""
        t = self._schema.memories if table is None else table
        clauses: list[ColumnElement[bool]] = []
        for owner in owners:
            parts = [t.c.scope == owner.scope, t.c.owner_id == owner.owner_id]
            if owner.scope == "persona_user":
                if owner.user_id is None:
                    raise ValueError("a persona_user owner needs user_id")
                parts.append(t.c.user_id == owner.user_id)
            clauses.append(and_(*parts))
        return or_(*clauses) if clauses else false()

    # -- embeddings -----------------------------------------------------------------------------

    def _check_dim(self, vector: Sequence[float], what: str) -> builtins.list[float]:
        if len(vector) != self._schema.embedding_dim:
            raise StoreError(
                f"{what} has {len(vector)} dimensions but the store is configured for "
                f"{self._schema.embedding_dim} (PMEM_EMBEDDING_DIM); use the same embedding model for "
                "writing and recall"
            )
        return [float(x) for x in vector]

    async def _embeddings_for(self, memories: Sequence[NewMemory]) -> builtins.list[builtins.list[float]]:
        """The given embeddings, computing the missing ones in one batch."""
        missing = [i for i, m in enumerate(memories) if m.embedding is None]
        computed: dict[int, builtins.list[float]] = {}
        if missing:
            texts = [embedding_text(memories[i].key, memories[i].value) for i in missing]
            vectors = await self._embedder.embed(texts)
            computed = dict(zip(missing, vectors, strict=True))
        result: builtins.list[builtins.list[float]] = []
        for i, memory in enumerate(memories):
            vector = memory.embedding if memory.embedding is not None else computed[i]
            result.append(self._check_dim(vector, f"embedding of {memory.key!r}"))
        return result

    async def embed_query(self, query: str) -> builtins.list[float]:
        """The query's embedding, dimension-checked."""
        (vector,) = await self._embedder.embed([query])
        return self._check_dim(vector, "query embedding")

    # -- locked reads inside a transaction ------------------------------------------------------

    async def _locked_memory(self, conn: AsyncConnection, memory_id: uuid.UUID) -> Memory | None:
        m = self._schema.memories
        stmt = select(*self._memory_columns).where(m.c.id == memory_id).with_for_update()
        row = (await conn.execute(stmt)).first()
        return None if row is None else self._memory(row)

    async def _locked_by_key(self, conn: AsyncConnection, new: NewMemory) -> Memory | None:
        m = self._schema.memories
        stmt = (
            select(*self._memory_columns)
            .where(
                m.c.scope == new.scope,
                m.c.owner_id == new.owner_id,
                func.coalesce(m.c.user_id, _nil(self._schema)) == (new.user_id or NIL_UUID),
                m.c.key == new.key,
            )
            .with_for_update()
        )
        row = (await conn.execute(stmt)).first()
        return None if row is None else self._memory(row)

    async def _open_revision(
        self, conn: AsyncConnection, memory_id: uuid.UUID, *, lock: bool
    ) -> tuple[Revision, builtins.list[float] | None] | None:
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
            update(m).where(m.c.id == memory.id).values(status="archived", updated_at=self._now())
        )
        await self._audit(
            conn,
            action,
            memory=memory,
            memory_id=memory.id,
            old_value=memory.value,
            new_value=None,
            actor=actor,
        )

    async def _audit(
        self,
        conn: AsyncConnection,
        action: AuditAction,
        *,
        memory: Memory | NewMemory,
        memory_id: uuid.UUID,
        old_value: str | None,
        new_value: str | None,
        actor: str,
        event_id: uuid.UUID | None = None,
        revision_id: uuid.UUID | None = None,
    ) -> None:
        await conn.execute(
            self._insert(self._schema.audit).values(
                memory_id=memory_id,
                action=action,
                scope=memory.scope,
                owner_id=memory.owner_id,
                user_id=memory.user_id,
                key=memory.key,
                old_value=old_value,
                new_value=new_value,
                actor=actor,
                event_id=event_id,
                revision_id=revision_id,
                at=self._now(),
            )
        )

    # -- writes ---------------------------------------------------------------------------------

    async def _upsert_in(
        self,
        conn: AsyncConnection,
        new: NewMemory,
        embedding: builtins.list[float],
        *,
        actor: str,
        event_id: uuid.UUID | None,
    ) -> UpsertResult:
        m = self._schema.memories
        now = self._now()
        new_id = uuid.uuid4()
        insert = (
            self._insert(m)
            .values(
                id=new_id,
                scope=new.scope,
                owner_id=new.owner_id,
                user_id=new.user_id,
                key=new.key,
                value=new.value,
                source_channel_id=new.source_channel_id,
                confidence=storable_confidence(new.confidence),
                status=new.status,
                embedding=embedding,
                created_at=new.observed_at if new.observed_at is not None else now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=self._key_index)
            .returning(m.c.id)
        )
        if (await conn.execute(insert)).first() is not None:
            await self._audit(
                conn,
                "add",
                memory=new,
                memory_id=new_id,
                old_value=None,
                new_value=new.value,
                actor=actor,
                event_id=event_id,
            )
            return UpsertResult(memory_id=new_id, action="created")

        existing = await self._locked_by_key(conn, new)
        if existing is None:
            # the conflicting row was deleted between our insert and our read: let the caller retry
            raise StoreError(f"memory {new.key!r} was deleted concurrently; retry the write")
        open_rev = await self._open_revision(conn, existing.id, lock=True)
        revision = open_rev[0] if open_rev else None
        plan = plan_upsert(existing, revision, new)

        if plan.kind == "unchanged":
            pending_id = revision.id if revision and same_value(revision.new_value, new.value) else None
            return UpsertResult(memory_id=existing.id, action="unchanged", revision_id=pending_id)

        if plan.kind == "propose":
            r = self._schema.revisions
            fields = {
                "old_value": existing.value,
                "new_value": new.value,
                "confidence": storable_confidence(new.confidence),
                "embedding": embedding,
                "source_channel_id": new.source_channel_id,
                "source_event_id": event_id,
                "proposed_by": actor,
                "created_at": now,
            }
            if revision is not None:
                revision_id = revision.id
                await conn.execute(update(r).where(r.c.id == revision_id).values(**fields))
            else:
                revision_id = uuid.uuid4()
                await conn.execute(
                    self._insert(r).values(id=revision_id, memory_id=existing.id, status="pending", **fields)
                )
            await self._audit(
                conn,
                "propose",
                memory=existing,
                memory_id=existing.id,
                old_value=existing.value,
                new_value=new.value,
                actor=actor,
                event_id=event_id,
                revision_id=revision_id,
            )
            return UpsertResult(memory_id=existing.id, action="revision_proposed", revision_id=revision_id)

        # plan.kind == "update"
        values: dict[str, Any] = {
            "value": new.value,
            "confidence": storable_confidence(new.confidence),
            "status": plan.status,
            "embedding": embedding,
            "updated_at": now,
        }
        if new.source_channel_id is not None:
            values["source_channel_id"] = new.source_channel_id
        await conn.execute(update(m).where(m.c.id == existing.id).values(**values))
        await self._audit(
            conn,
            "update",
            memory=existing,
            memory_id=existing.id,
            old_value=existing.value,
            new_value=new.value,
            actor=actor,
            event_id=event_id,
        )
        if plan.close_revision and revision is not None:
            await self._close_revision(conn, revision, existing, status="rejected", actor=actor, audit=True)
        return UpsertResult(memory_id=existing.id, action="updated")

    async def _close_revision(
        self,
        conn: AsyncConnection,
        revision: Revision,
        memory: Memory,
        *,
        status: str,
        actor: str,
        audit: bool,
    ) -> None:
        r = self._schema.revisions
        await conn.execute(
            update(r)
            .where(r.c.id == revision.id)
            .values(status=status, decided_by=actor, decided_at=self._now())
        )
        if audit:
            await self._audit(
                conn,
                "approve" if status == "approved" else "reject",
                memory=memory,
                memory_id=memory.id,
                old_value=memory.value,
                new_value=revision.new_value,
                actor=actor,
                revision_id=revision.id,
            )

    async def upsert(
        self, memory: NewMemory, *, actor: str = "system", event_id: uuid.UUID | None = None
    ) -> UpsertResult:
        """Create or update by (scope, owner, user, key) following `store.policy`; audited."""
        validate_new_memory(memory)
        (embedding,) = await self._embeddings_for([memory])
        async with self._transaction() as conn:
            return await self._upsert_in(conn, memory, embedding, actor=actor, event_id=event_id)

    async def write_event(
        self, *, event_id: uuid.UUID, memories: Sequence[NewMemory], actor: str = "worker"
    ) -> EventWrite:
        """Upserts, audit rows and the processed-event row in one transaction.

        An event id that was already processed writes nothing and returns `duplicate=True`."""
        for memory in memories:
            validate_new_memory(memory)
        embeddings = await self._embeddings_for(memories)
        # a fixed lock order keeps two events touching the same memories from deadlocking
        order = sorted(
            range(len(memories)),
            key=lambda i: (
                memories[i].scope,
                str(memories[i].owner_id),
                str(memories[i].user_id),
                memories[i].key,
            ),
        )
        pe = self._schema.processed_events
        results: dict[int, UpsertResult] = {}
        async with self._transaction() as conn:
            claimed = await conn.execute(
                self._insert(pe)
                .values(event_id=event_id, processed_at=self._now(), memory_count=len(memories), actor=actor)
                .on_conflict_do_nothing(index_elements=[pe.c.event_id])
                .returning(pe.c.event_id)
            )
            if claimed.first() is None:
                return EventWrite(duplicate=True)
            for i in order:
                results[i] = await self._upsert_in(
                    conn, memories[i], embeddings[i], actor=actor, event_id=event_id
                )
        return EventWrite(duplicate=False, results=tuple(results[i] for i in range(len(memories))))

    async def is_processed(self, event_id: uuid.UUID) -> bool:
        """Whether `write_event` already committed this event."""
        pe = self._schema.processed_events
        async with self._reading() as conn:
            row = (await conn.execute(select(pe.c.event_id).where(pe.c.event_id == event_id))).first()
        return row is not None

    async def event_writes(self, event_id: uuid.UUID) -> builtins.list[EventMemory]:
        """What `write_event` created, updated or proposed for this event, in write order, from the
        audit trail (so also for memories deleted since). Unchanged memories left no audit row."""
        a = self._schema.audit
        stmt = (
            select(a.c.memory_id, a.c.action, a.c.scope, a.c.key)
            .where(a.c.event_id == event_id, a.c.action.in_(tuple(_EVENT_AUDIT_ACTIONS)))
            .order_by(a.c.id)
        )
        async with self._reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            EventMemory(
                memory_id=row.memory_id, action=_EVENT_AUDIT_ACTIONS[row.action], scope=row.scope, key=row.key
            )
            for row in rows
        ]

    async def get_by_id(self, memory_id: uuid.UUID) -> Memory | None:
        """One memory by id, any status."""
        m = self._schema.memories
        async with self._reading() as conn:
            row = (await conn.execute(select(*self._memory_columns).where(m.c.id == memory_id))).first()
        return None if row is None else self._memory(row)

    async def list(self, flt: MemoryFilter) -> builtins.list[Memory]:
        """Memories matching every set field of the filter, most recently updated first."""
        m = self._schema.memories
        conditions: builtins.list[ColumnElement[bool]] = []
        for column, value in (
            (m.c.scope, flt.scope),
            (m.c.owner_id, flt.owner_id),
            (m.c.user_id, flt.user_id),
            (m.c.status, flt.status),
            (m.c.key, flt.key),
            (m.c.source_channel_id, flt.source_channel_id),
        ):
            if value is not None:
                conditions.append(column == value)
        if flt.key_prefix:
            # substr, not LIKE: LIKE is case-insensitive on SQLite and needs escaping everywhere
            conditions.append(func.substr(m.c.key, 1, len(flt.key_prefix)) == flt.key_prefix)
        stmt = (
            select(*self._memory_columns)
            .where(*conditions)
            .order_by(m.c.updated_at.desc(), m.c.id)
            .limit(flt.limit)
            .offset(flt.offset)
        )
        async with self._reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return [self._memory(row) for row in rows]

    async def count_by_owner(self, scope: Scope, owner_id: uuid.UUID) -> int:
        """Active and pending memories of one (scope, owner); archived rows are not counted."""
        m = self._schema.memories
        stmt = select(func.count()).where(
            m.c.scope == scope, m.c.owner_id == owner_id, m.c.status != "archived"
        )
        async with self._reading() as conn:
            return int((await conn.execute(stmt)).scalar_one())

    async def existing_memories(
        self, owners: Sequence[OwnerRef]
    ) -> builtins.list[tuple[Memory, builtins.list[float] | None]]:
        """Active and pending memories (with embeddings) of the given owners, for de-duplication."""
        if not owners:
            return []
        m = self._schema.memories
        stmt = (
            select(*self._memory_columns, m.c.embedding)
            .where(self._owner_clause(owners), m.c.status.in_(("active", "pending_review")))
            .order_by(m.c.updated_at.desc(), m.c.id)
        )
        async with self._reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return [(self._memory(row), _vector(row._mapping["embedding"])) for row in rows]

    async def delete(self, memory_id: uuid.UUID, *, actor: str = "system") -> bool:
        """Hard delete (its revisions go with it); the audit trail keeps the old value."""
        m = self._schema.memories
        async with self._transaction() as conn:
            memory = await self._locked_memory(conn, memory_id)
            if memory is None:
                return False
            await conn.execute(delete(m).where(m.c.id == memory_id))
            await self._audit(
                conn,
                "delete",
                memory=memory,
                memory_id=memory_id,
                old_value=memory.value,
                new_value=None,
                actor=actor,
            )
        return True

    async def archive(self, memory_id: uuid.UUID, *, actor: str = "system") -> bool:
        """Soft delete (status → archived); False when there is no such memory."""
        async with self._transaction() as conn:
            memory = await self._locked_memory(conn, memory_id)
            if memory is None:
                return False
            if memory.status == "archived":
                return True
            await self._set_archived(conn, memory, action="archive", actor=actor)
            open_rev = await self._open_revision(conn, memory_id, lock=True)
            if open_rev is not None:
                # a proposal for an archived memory would resurrect it on approval
                await self._close_revision(
                    conn, open_rev[0], memory, status="rejected", actor=actor, audit=False
                )
        return True

    async def approve(self, memory_id: uuid.UUID, *, actor: str) -> Memory | None:
        """Apply the open revision, or make a pending memory active; None if missing or nothing pending."""
        m = self._schema.memories
        async with self._reading() as conn:
            peek = await self._open_revision(conn, memory_id, lock=False)
        prepared: tuple[uuid.UUID, str, builtins.list[float]] | None = None
        if peek is not None and peek[1] is None:
            # a proposal written without an embedding: embed before taking locks
            memory = await self.get_by_id(memory_id)
            key = memory.key if memory else ""
            prepared = (
                peek[0].id,
                peek[0].new_value,
                await self.embed_query(embedding_text(key, peek[0].new_value)),
            )
        async with self._transaction() as conn:
            memory = await self._locked_memory(conn, memory_id)
            if memory is None:
                return None
            open_rev = await self._open_revision(conn, memory_id, lock=True)
            revision = open_rev[0] if open_rev else None
            kind = plan_approve(memory, revision)
            if kind == "nothing":
                return None
            if kind == "activate":
                await conn.execute(
                    update(m).where(m.c.id == memory_id).values(status="active", updated_at=self._now())
                )
                await self._audit(
                    conn,
                    "approve",
                    memory=memory,
                    memory_id=memory_id,
                    old_value=memory.value,
                    new_value=memory.value,
                    actor=actor,
                )
            elif revision is not None and open_rev is not None:
                embedding = open_rev[1]
                if embedding is None:
                    if prepared is None or prepared[:2] != (revision.id, revision.new_value):
                        raise StoreError(f"revision {revision.id} changed while approving; approve again")
                    embedding = prepared[2]
                await conn.execute(
                    update(m)
                    .where(m.c.id == memory_id)
                    .values(
                        value=revision.new_value,
                        confidence=revision.confidence,
                        embedding=embedding,
                        status="active",
                        updated_at=self._now(),
                    )
                )
                await self._close_revision(conn, revision, memory, status="approved", actor=actor, audit=True)
            row = (await conn.execute(select(*self._memory_columns).where(m.c.id == memory_id))).first()
        return None if row is None else self._memory(row)

    async def reject(self, memory_id: uuid.UUID, *, actor: str) -> Memory | None:
        """Discard the open revision, or archive a pending memory; None if missing or nothing pending.

        A rejected pending memory is archived rather than deleted, so extraction does not propose the
        same value again (see `store.policy`)."""
        m = self._schema.memories
        async with self._transaction() as conn:
            memory = await self._locked_memory(conn, memory_id)
            if memory is None:
                return None
            open_rev = await self._open_revision(conn, memory_id, lock=True)
            revision = open_rev[0] if open_rev else None
            kind = plan_reject(memory, revision)
            if kind == "nothing":
                return None
            if kind == "discard_revision" and revision is not None:
                await self._close_revision(conn, revision, memory, status="rejected", actor=actor, audit=True)
            else:
                await self._set_archived(conn, memory, action="reject", actor=actor)
            row = (await conn.execute(select(*self._memory_columns).where(m.c.id == memory_id))).first()
        return None if row is None else self._memory(row)

    async def edit(self, memory_id: uuid.UUID, value: str, *, actor: str) -> Memory | None:
        """Set a memory's value (re-embedded, status kept); None when there is no such memory."""
        if not value.strip():
            raise ValueError("the new value is empty; to remove a memory use archive or delete")
        current = await self.get_by_id(memory_id)
        if current is None:
            return None
        if current.value == value:
            return current
        embedding = await self.embed_query(embedding_text(current.key, value))
        m = self._schema.memories
        async with self._transaction() as conn:
            memory = await self._locked_memory(conn, memory_id)
            if memory is None:
                return None
            await conn.execute(
                update(m)
                .where(m.c.id == memory_id)
                .values(value=value, embedding=embedding, updated_at=self._now())
            )
            await self._audit(
                conn,
                "edit",
                memory=memory,
                memory_id=memory_id,
                old_value=memory.value,
                new_value=value,
                actor=actor,
            )
            row = (await conn.execute(select(*self._memory_columns).where(m.c.id == memory_id))).first()
        return None if row is None else self._memory(row)

    async def pending_revisions(self, memory_id: uuid.UUID | None = None) -> builtins.list[Revision]:
        """Open proposals (all, or of one memory), oldest first."""
        r = self._schema.revisions
        stmt = select(r).where(r.c.status == "pending").order_by(r.c.created_at, r.c.id)
        if memory_id is not None:
            stmt = stmt.where(r.c.memory_id == memory_id)
        async with self._reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return [self._revision(row) for row in rows]

    async def audit_log(self, memory_id: uuid.UUID) -> builtins.list[AuditEntry]:
        """Every audited change of one memory, oldest first (kept after a delete)."""
        a = self._schema.audit
        stmt = select(a).where(a.c.memory_id == memory_id).order_by(a.c.id)
        async with self._reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            AuditEntry(
                id=row.id,
                memory_id=row.memory_id,
                action=row.action,
                old_value=row.old_value,
                new_value=row.new_value,
                actor=row.actor,
                event_id=row.event_id,
                at=row.at,
            )
            for row in rows
        ]

    # -- settings -------------------------------------------------------------------------------

    async def settings_rows(
        self, team_id: uuid.UUID | None, persona_id: uuid.UUID | None
    ) -> builtins.list[dict[str, Any]]:
        """The global, team and persona rows that apply, least specific first."""
        s = self._schema.settings
        levels: builtins.list[ColumnElement[bool]] = [s.c.level == "global"]
        if team_id is not None:
            levels.append(and_(s.c.level == "team", s.c.target_id == team_id))
        if persona_id is not None:
            levels.append(and_(s.c.level == "persona", s.c.target_id == persona_id))
        async with self._reading() as conn:
            rows = (await conn.execute(select(s).where(or_(*levels)))).all()
        ordered = sorted(
            (dict(row._mapping) for row in rows), key=lambda r: _SETTINGS_LEVEL_ORDER[r["level"]]
        )
        return ordered

    async def settings_for(self, team_id: uuid.UUID | None, persona_id: uuid.UUID | None) -> MemorySettings:
        """Effective settings: defaults, then global, team and persona rows (most specific wins)."""
        return merge_settings(await self.settings_rows(team_id, persona_id))

    async def put_settings(
        self,
        *,
        level: SettingsLevel,
        target_id: uuid.UUID | None,
        enabled: bool | None = None,
        persona_learning: bool | None = None,
        extraction_prompt: str | None = None,
        min_confidence: float | None = None,
    ) -> None:
        """Set fields of one settings row (created if missing); None leaves a field as it is."""
        if level not in _SETTINGS_LEVEL_ORDER:
            raise ValueError(f"settings level must be global, team or persona, got {level!r}")
        if (level == "global") != (target_id is None):
            raise ValueError(
                "global settings take no target_id; team and persona settings need the team or persona id"
            )
        if min_confidence is not None and not 0.0 <= min_confidence <= 1.0:
            raise ValueError(f"min_confidence must be within 0..1, got {min_confidence}")
        s = self._schema.settings
        values = {
            "enabled": enabled,
            "persona_learning": persona_learning,
            "extraction_prompt": extraction_prompt,
            "min_confidence": None if min_confidence is None else storable_confidence(min_confidence),
        }
        stmt = self._insert(s).values(level=level, target_id=target_id, updated_at=self._now(), **values)
        excluded = stmt.excluded
        stmt = stmt.on_conflict_do_update(
            index_elements=[s.c.level, func.coalesce(s.c.target_id, _nil(self._schema))],
            set_={
                **{name: func.coalesce(getattr(excluded, name), getattr(s.c, name)) for name in values},
                "updated_at": excluded.updated_at,
            },
        )
        async with self._transaction() as conn:
            await conn.execute(stmt)

    # -- history (bot plan §1) ------------------------------------------------------------------

    async def append_message(self, agent_id: str, room_id: str, message: ChatMessage) -> None:
        """Persist one message of a room's conversation."""
        c = self._schema.chat_messages
        async with self._transaction() as conn:
            await conn.execute(
                self._insert(c).values(
                    agent_id=agent_id,
                    room_id=room_id,
                    role=message.role,
                    content=message.content,
                    created_at=message.at if message.at is not None else self._now(),
                )
            )

    async def last_messages(self, agent_id: str, room_id: str, limit: int) -> builtins.list[ChatMessage]:
        """The last `limit` messages of a room, oldest first (ready for a `Window`)."""
        if limit <= 0:
            return []
        c = self._schema.chat_messages
        stmt = (
            select(c.c.role, c.c.content, c.c.created_at)
            .where(c.c.agent_id == agent_id, c.c.room_id == room_id)
            .order_by(c.c.id.desc())
            .limit(limit)
        )
        async with self._reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            ChatMessage(role=cast(Any, r.role), content=r.content, at=r.created_at) for r in reversed(rows)
        ]

    # -- lifecycle ------------------------------------------------------------------------------

    async def ping(self) -> None:
        """Raise if the database is unreachable."""
        async with self._reading() as conn:
            await conn.execute(select(1))

    async def close(self) -> None:
        """Close every pooled connection."""
        await self._engine.dispose()
