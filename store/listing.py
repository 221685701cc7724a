"""Reading memories: filtered lists, counts, and the existing memories of owners for de-duplication."""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Sequence

from sqlalchemy import ColumnElement, func, select

from store.base import StoreBase, _vector
from store.types import (
    Memory,
    MemoryFilter,
    OwnerRef,
    Scope,
)


class MemoryListing(StoreBase):
    """Lists and counts."""

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
