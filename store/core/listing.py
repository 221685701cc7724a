"""Reading memories: filtered lists, counts, and the existing memories of owners for de-duplication."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import ColumnElement, and_, func, or_, select

from store.core.base import StoreBase, audit_entry, replica_read
from store.core.turns import user_turns
from store.model import Memory, MemoryFilter, OwnerRef, Page, Scope, UserExport, UserMemoryQuery
from store.rules.pagination import newest_first_page


class MemoryListing(StoreBase):
    """Lists and counts."""

    async def prompt_memories(
        self,
        owners: Sequence[OwnerRef],
        *,
        team_id: uuid.UUID | None,
        words: Sequence[str],
        limit: int,
    ) -> list[Memory]:
        """At most `limit` active or pending memories of these owners in the team context that
        are the most relevant to `words` (a conversation's informative words), for the extraction
        prompt's existing keys: on Postgres, the full-text matches first (by rank) among each
        owner's most recent memories, then the most recent; on SQLite the most recent."""
        if not owners or limit <= 0:
            return []
        return await self._backend.prompt_memories(owners, team_id=team_id, words=words, limit=limit)

    async def list_memories(self, flt: MemoryFilter) -> list[Memory]:
        """Memories matching every set field of the filter, most recently updated first."""
        m = self._schema.memories
        conditions: list[ColumnElement[bool]] = []
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
        if flt.team_context:
            conditions.append(self._team_clause(flt.team_id))
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
        async with self._backend.reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return [self._memory(row) for row in rows]

    async def count_by_owner(self, scope: Scope, owner_id: uuid.UUID) -> int:
        """Active and pending memories of one (scope, owner); archived rows are not counted."""
        m = self._schema.memories
        stmt = select(func.count()).where(
            m.c.scope == scope, m.c.owner_id == owner_id, m.c.status != "archived"
        )
        async with self._backend.reading() as conn:
            return int((await conn.execute(stmt)).scalar_one())

    @replica_read
    async def list_for_user(self, query: UserMemoryQuery) -> Page[Memory]:
        """A person's own memories (every status), newest first, one page."""
        m = self._schema.memories
        conditions: list[ColumnElement[bool]] = [self._about_user(query.user_id)]
        if query.scope is not None:
            conditions.append(m.c.scope == query.scope)
        if query.persona_id is not None:
            conditions.append(m.c.owner_id == query.persona_id)
            conditions.append(m.c.scope == "persona_user")
        if query.status is not None:
            conditions.append(m.c.status == query.status)
        if query.team_id is not None:
            conditions.append(m.c.team_id == query.team_id)
        stmt = (
            select(*self._memory_columns)
            .where(*conditions, *self._after(m.c.created_at, m.c.id, query.cursor))
            .order_by(m.c.created_at.desc(), m.c.id.desc())
            .limit(query.limit + 1)
        )
        async with self._backend.reading() as conn:
            rows = (await conn.execute(stmt)).all()
        memories = [self._memory(row) for row in rows]
        return newest_first_page([(mm.created_at, mm.id, mm) for mm in memories], query.limit)

    @replica_read
    async def export_user(self, user_id: uuid.UUID) -> UserExport:
        """Everything about one person: memories (with their evidence), their revisions (every
        status), audit rows and conversation turns."""
        m, r, a = self._schema.memories, self._schema.revisions, self._schema.audit
        about_audit = or_(
            and_(a.c.scope == "user", a.c.owner_id == user_id),
            and_(a.c.scope == "persona_user", a.c.user_id == user_id),
        )
        async with self._backend.reading() as conn:
            rows = (
                await conn.execute(
                    select(*self._memory_columns)
                    .where(self._about_user(user_id))
                    .order_by(m.c.created_at, m.c.id)
                )
            ).all()
            memories = tuple(self._memory(row) for row in rows)
            revision_rows = (
                await conn.execute(
                    select(r)
                    .join(m, m.c.id == r.c.memory_id)
                    .where(self._about_user(user_id))
                    .order_by(r.c.created_at, r.c.id)
                )
            ).all()
            audit_rows = (await conn.execute(select(a).where(about_audit).order_by(a.c.id))).all()
        return UserExport(
            memories=memories,
            revisions=tuple(self._revision(row) for row in revision_rows),
            audit=tuple(audit_entry(row) for row in audit_rows),
            turns=await user_turns(self, user_id),
        )
