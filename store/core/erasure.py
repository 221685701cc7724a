"""Removing memories: archive (soft), erasure of one memory or of everything about a person, and
retention (pending memories rejected, archived ones erased after the configured days).

Erasure removes the row, its revisions and embedding, and the key and value text from its audit
rows; a content-free tombstone (action `erase`, ids, actor, time) stays, so the trail still shows
that something was erased, by whom and when, without saying what."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, delete, or_, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from store.core.base import StoreBase
from store.core.forgetting import folded
from store.core.settings import effective_settings
from store.core.turns import delete_user_turns, expire_old_turns
from store.model import MemorySettings, RetentionReport
from store.rules.evidence import evidence_lines, quoted_text
from store.rules.forgetting import without_lines
from store.rules.keys import embedding_text

# rows per transaction in bulk erasure and retention: short locks, bounded memory
ERASE_BATCH = 500
Progress = Callable[[int], None]


class MemoryErasure(StoreBase):
    """Archive, erase, erase everything about a user, retention."""

    async def erase(self, memory_id: uuid.UUID, *, actor: str = "system") -> bool:
        """Erase one memory (see the module docstring); False when there is no such memory."""
        async with self._backend.transaction() as conn:
            memory = await self._memory_in(conn, memory_id, lock=True)
            if memory is None:
                return False
            await self._erase_rows(conn, [memory], actor=actor)
        return True

    async def delete(self, memory_id: uuid.UUID, *, actor: str = "system") -> bool:
        """Hard delete: an erasure (nothing of the memory's text stays, not even in the audit trail)."""
        return await self.erase(memory_id, actor=actor)

    async def erase_user(
        self,
        user_id: uuid.UUID,
        *,
        actor: str,
        teams: frozenset[uuid.UUID] | None = None,
        progress: Progress | None = None,
    ) -> int:
        """Erase every memory about a person (their `user` rows and `persona_user` rows about them),
        and every conversation turn of theirs, in batches; `teams` limits it to memories and turns of
        those teams. Returns how many memories were erased."""
        m = self._schema.memories
        conditions: list[ColumnElement[bool]] = [self._about_user(user_id)]
        if teams is not None:
            conditions.append(m.c.team_id.in_(sorted(teams)))
        erased = 0
        while True:
            async with self._backend.transaction() as conn:
                rows = (
                    await conn.execute(
                        select(*self._memory_columns).where(*conditions).limit(ERASE_BATCH).with_for_update()
                    )
                ).all()
                batch = [self._memory(row) for row in rows]
                await self._erase_rows(conn, batch, actor=actor)
            erased += len(batch)
            if progress is not None and batch:
                progress(erased)
            if len(batch) < ERASE_BATCH:
                break
        # the person's words leave the evidence of the memories that quote them (a persona's, another
        # participant's), then their conversation turns go (they are about nobody else)
        await self._strip_words_of(user_id, teams)
        await delete_user_turns(self, user_id, teams=teams)
        if teams is None:
            await self._strip_audit_about(user_id)
            await self._forget_user_name(user_id)
        return erased

    async def _strip_words_of(self, user_id: uuid.UUID, teams: frozenset[uuid.UUID] | None) -> None:
        """Remove the lines quoting this person's stored turns from the evidence of every memory of
        those conversations; a memory whose evidence changes is embedded again from what stays."""
        t, m = self._schema.turns, self._schema.memories
        # what they said (their copy of a conversation holds the assistant's replies too)
        conditions: list[ColumnElement[bool]] = [t.c.user_id == user_id, t.c.role == "user"]
        if teams is not None:
            conditions.append(t.c.team_id.in_(sorted(teams)))
        async with self._backend.reading() as conn:
            rows = (await conn.execute(select(t.c.channel_id, t.c.role, t.c.text).where(*conditions))).all()
        said: dict[uuid.UUID, set[tuple[str, str]]] = {}
        for turn in rows:
            said.setdefault(turn.channel_id, set()).add((turn.role, quoted_text(turn.text).strip()))
        channels = sorted(said)
        for start in range(0, len(channels), ERASE_BATCH):
            async with self._backend.reading() as conn:
                quoting = (
                    await conn.execute(
                        select(m.c.id, m.c.key, m.c.value, m.c.evidence, m.c.source_channel_id).where(
                            m.c.evidence.is_not(None),
                            m.c.source_channel_id.in_(channels[start : start + ERASE_BATCH]),
                        )
                    )
                ).all()
            for row in quoting:
                mine = said[row.source_channel_id]
                forgotten = {
                    line.line
                    for line in evidence_lines(row.evidence)
                    if (line.role, line.text.strip()) in mine
                }
                if not forgotten:
                    continue
                kept = without_lines(row.evidence, forgotten)
                fact = embedding_text(row.key, row.value)
                if kept is None:
                    [vector] = await self._embedder.embed([fact])
                else:
                    alone, with_evidence = await self._embedder.embed([fact, f"{kept}\n{fact}"])
                    vector = folded(alone, with_evidence)
                async with self._backend.transaction() as conn:
                    await conn.execute(
                        update(m).where(m.c.id == row.id).values(evidence=kept, embedding=list(vector))
                    )

    async def _forget_user_name(self, user_id: uuid.UUID) -> None:
        """The person's display name goes with them."""
        d = self._schema.directory
        async with self._backend.transaction() as conn:
            await conn.execute(delete(d).where(d.c.kind == "user", d.c.id == user_id))

    async def _strip_audit_about(self, user_id: uuid.UUID) -> None:
        """Text left in audit rows about the person (memories erased or deleted before)."""
        a = self._schema.audit
        about = or_(
            and_(a.c.scope == "user", a.c.owner_id == user_id),
            and_(a.c.scope == "persona_user", a.c.user_id == user_id),
        )
        stmt = (
            update(a)
            .where(about, or_(a.c.key.is_not(None), a.c.old_value.is_not(None), a.c.new_value.is_not(None)))
            .values(key=None, old_value=None, new_value=None)
        )
        async with self._backend.transaction() as conn:
            await conn.execute(stmt)

    async def archive(self, memory_id: uuid.UUID, *, actor: str = "system") -> bool:
        """Soft delete (status → archived); False when there is no such memory."""
        async with self._backend.transaction() as conn:
            memory = await self._memory_in(conn, memory_id, lock=True)
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

    # -- retention ------------------------------------------------------------------------------

    async def _contexts(self, status: str) -> list[tuple[uuid.UUID | None, uuid.UUID | None]]:
        """Distinct (team, persona) contexts among memories of one status (persona: None for `user`)."""
        m = self._schema.memories
        stmt = select(m.c.team_id, m.c.scope, m.c.owner_id).where(m.c.status == status).distinct()
        async with self._backend.reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return sorted(
            {(row.team_id, None if row.scope == "user" else row.owner_id) for row in rows},
            key=lambda pair: (str(pair[0]), str(pair[1])),
        )

    def _in_context(self, team_id: uuid.UUID | None, persona_id: uuid.UUID | None) -> ColumnElement[bool]:
        m = self._schema.memories
        team = m.c.team_id.is_(None) if team_id is None else m.c.team_id == team_id
        if persona_id is None:
            return and_(team, m.c.scope == "user")
        return and_(team, m.c.scope.in_(("persona", "persona_user")), m.c.owner_id == persona_id)

    async def _expire(
        self,
        *,
        status: str,
        days_of: Callable[[MemorySettings], int | None],
        rows_older_than: Callable[[ColumnElement[bool], datetime], Select[Any]],
        act: Callable[[AsyncConnection, Sequence[Row[Any]]], Awaitable[None]],
        now: datetime,
        tick: Progress,
    ) -> int:
        """For each (team, persona) context of memories in `status`: select rows older than that
        context's retention, in batches, and `act` on each batch in its own transaction."""
        total = 0
        for team_id, persona_id in await self._contexts(status):
            days = days_of(await effective_settings(self, team_id, persona_id))
            if days is None:
                continue
            stmt = rows_older_than(self._in_context(team_id, persona_id), now - timedelta(days=days))
            while True:
                async with self._backend.transaction() as conn:
                    rows = (await conn.execute(stmt.limit(ERASE_BATCH).with_for_update())).all()
                    await act(conn, rows)
                total += len(rows)
                tick(len(rows))
                if len(rows) < ERASE_BATCH:
                    break
        return total

    async def retention(
        self, *, now: datetime, actor: str = "retention", progress: Progress | None = None
    ) -> RetentionReport:
        """Reject pending memories and open revisions older than `pending_days`, erase archived
        memories older than `archived_days` and conversation turns said more than `history_days`
        ago (each per the team and persona settings).
        Batched and audited; running it again right away does nothing."""
        m, r = self._schema.memories, self._schema.revisions
        done = 0

        def tick(count: int) -> None:
            nonlocal done
            done += count
            if progress is not None and count:
                progress(done)

        def pending_days(policy: MemorySettings) -> int | None:
            return policy.pending_days

        def memories_left(status: str) -> Callable[[ColumnElement[bool], datetime], Select[Any]]:
            """The memories of `status` not touched since the cutoff, in a context."""
            return lambda context, cutoff: select(*self._memory_columns).where(
                m.c.status == status, context, m.c.updated_at < cutoff
            )

        async def reject_memories(conn: AsyncConnection, rows: Sequence[Row[Any]]) -> None:
            for row in rows:
                await self._set_archived(conn, self._memory(row), action="reject", actor=actor)

        async def reject_revisions(conn: AsyncConnection, rows: Sequence[Row[Any]]) -> None:
            for row in rows:
                memory = self._memory(row)
                open_rev = await self._open_revision(conn, memory.id, lock=True)
                if open_rev is not None:
                    await self._close_revision(
                        conn, open_rev[0], memory, status="rejected", actor=actor, audit=True
                    )

        async def erase_rows(conn: AsyncConnection, rows: Sequence[Row[Any]]) -> None:
            await self._erase_rows(conn, [self._memory(row) for row in rows], actor=actor)

        async def expire_memories(
            status: str,
            days_of: Callable[[MemorySettings], int | None],
            act: Callable[[AsyncConnection, Sequence[Row[Any]]], Awaitable[None]],
        ) -> int:
            older = memories_left(status)
            return await self._expire(
                status=status, days_of=days_of, rows_older_than=older, act=act, now=now, tick=tick
            )

        # erase first, so what this run rejects gets its whole archived period
        erased = await expire_memories("archived", lambda policy: policy.archived_days, erase_rows)
        rejected = await expire_memories("pending_review", pending_days, reject_memories)
        revisions = await self._expire(
            status="active",
            days_of=pending_days,
            rows_older_than=lambda context, cutoff: (
                select(*self._memory_columns)
                .join(r, r.c.memory_id == m.c.id)
                .where(r.c.status == "pending", context, r.c.created_at < cutoff)
            ),
            act=reject_revisions,
            now=now,
            tick=tick,
        )
        turns = await expire_old_turns(self, now=now)
        tick(turns)
        return RetentionReport(
            rejected_memories=rejected,
            rejected_revisions=revisions,
            erased_memories=erased,
            erased_turns=turns,
        )
