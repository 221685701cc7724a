"""Review: approve, reject and edit pending memories and proposed revisions; the audit history."""

from __future__ import annotations

import builtins
import uuid

from sqlalchemy import select, update

from store.base import StoreBase
from store.errors import StoreError
from store.policy import (
    plan_approve,
    plan_reject,
)
from store.recall import embedding_text
from store.types import (
    AuditEntry,
    Memory,
    Revision,
)


class MemoryReview(StoreBase):
    """Review decisions and history."""

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
