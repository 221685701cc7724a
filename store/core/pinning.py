"""Pinned facts: a reviewer or the user pins a memory so that, while it is active, it is in every
hint of its context; pinning and unpinning are audited. The read for the hint walks the partial
index of pinned rows (`ix_memories_pinned`), so it costs the same for an owner with 100k memories."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Select, select, update

from store.core.base import StoreBase, change_audit_values, owner_clause, replica_read
from store.model import AuditAction, Memory
from store.rules.policy import check_may_decide
from store.rules.recall import resolve_scopes

# the most pinned facts one hint context reads (most recently pinned or changed first): the hint's
# facts budget holds far fewer
MAX_PINNED = 50


class PinnedFacts(StoreBase):
    """Pin and unpin memories; read a context's pinned active facts."""

    async def set_pinned(self, memory_id: uuid.UUID, pinned: bool, *, actor: str) -> Memory | None:
        """Pin or unpin one memory (audited `pin` / `unpin` when it changes); None when there is no
        such memory. The worker's identity may not: extraction proposes, people decide."""
        check_may_decide(actor)
        m = self._schema.memories
        async with self._backend.transaction() as conn:
            memory = await self._memory_in(conn, memory_id, lock=True)
            if memory is None:
                return None
            if memory.pinned == pinned:
                return memory
            await conn.execute(
                update(m).where(m.c.id == memory_id).values(pinned=pinned, updated_at=self._backend.now())
            )
            action: AuditAction = "pin" if pinned else "unpin"
            await self._audit(conn, change_audit_values(action, memory, memory.value, actor=actor))
            return await self._memory_in(conn, memory_id)

    def pinned_statement(
        self, user_id: uuid.UUID, persona_id: uuid.UUID | None, *, team_id: uuid.UUID | None
    ) -> Select[Any]:
        """The SELECT of `pinned_facts` (its plan is checked by the tests)."""
        m = self._schema.memories
        return (
            select(*self._memory_columns)
            .where(
                m.c.pinned == True,  # noqa: E712 -- the partial index's own predicate, as SQL spells it
                m.c.status == "active",
                owner_clause(m, resolve_scopes(user_id, persona_id)),
                self._team_clause(team_id),
            )
            .order_by(m.c.updated_at.desc(), m.c.id)
            .limit(MAX_PINNED)
        )

    @replica_read
    async def pinned_facts(
        self, user_id: uuid.UUID, persona_id: uuid.UUID | None, *, team_id: uuid.UUID | None
    ) -> list[Memory]:
        """The active pinned memories a recall of this user (and persona) in this team context may
        read, most recently changed first, at most `MAX_PINNED` (on the driver where the backend
        reads them so: every hint does)."""
        on_driver = await self._backend.pinned_memories(
            user_id, persona_id, team_id=team_id, limit=MAX_PINNED
        )
        if on_driver is not None:
            return on_driver
        stmt = self.pinned_statement(user_id, persona_id, team_id=team_id)
        async with self._backend.reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return [self._memory(row) for row in rows]
