"""Removing memories: archive (soft), delete and erasure."""

from __future__ import annotations

import uuid

from sqlalchemy import delete

from store.base import StoreBase


class MemoryErasure(StoreBase):
    """Archive and delete."""

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
