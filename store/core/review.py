"""Review: approve, reject and edit pending memories and proposed revisions; the audit history."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import ColumnElement, and_, false, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from store.core.base import StoreBase, audit_entry, change_audit_values, replica_read
from store.errors import NothingPending, StoreError
from store.model import SCOPES, AuditEntry, Memory, Page, ReviewItem, ReviewQuery, Revision
from store.rules.admission import admit, refusal, secret_key_refusal
from store.rules.pagination import newest_first_page
from store.rules.policy import ReviewKind, check_may_decide, plan_approve, plan_reject, storable_confidence


@dataclass(frozen=True, kw_only=True, slots=True)
class _Decision:
    """A memory and its open revision (with the revision's stored embedding), locked, and what the
    decision's plan does with them."""

    memory: Memory
    revision: Revision | None
    embedding: list[float] | None
    kind: ReviewKind


class MemoryReview(StoreBase):
    """Review decisions and history."""

    async def _decision(
        self,
        conn: AsyncConnection,
        memory_id: uuid.UUID,
        plan: Callable[[Memory, Revision | None], ReviewKind],
    ) -> _Decision | None:
        """Lock the memory and its open revision and `plan` the decision; None when there is no
        such memory or nothing to decide."""
        memory = await self._memory_in(conn, memory_id, lock=True)
        if memory is None:
            return None
        open_rev = await self._open_revision(conn, memory_id, lock=True)
        revision, embedding = open_rev if open_rev is not None else (None, None)
        kind = plan(memory, revision)
        if kind == "nothing":
            return None
        return _Decision(memory=memory, revision=revision, embedding=embedding, kind=kind)

    async def approve(self, memory_id: uuid.UUID, *, actor: str) -> Memory | None:
        """Apply the open revision, or make a pending memory active; None if missing or nothing pending."""
        check_may_decide(actor)
        m = self._schema.memories
        async with self._backend.reading() as conn:
            peek = await self._open_revision(conn, memory_id, lock=False)
        prepared: tuple[uuid.UUID, str, list[float]] | None = None
        if peek is not None and peek[1] is None:
            # a proposal written without an embedding: embed before taking locks
            memory = await self.get_by_id(memory_id)
            key = memory.key if memory else ""
            prepared = (
                peek[0].id,
                peek[0].new_value,
                await self.embed_memory(key, peek[0].new_value),
            )
        async with self._backend.transaction() as conn:
            decision = await self._decision(conn, memory_id, plan_approve)
            if decision is None:
                return None
            memory, revision, embedding = decision.memory, decision.revision, decision.embedding
            if decision.kind == "activate":
                await conn.execute(
                    update(m)
                    .where(m.c.id == memory_id)
                    .values(status="active", updated_at=self._backend.now())
                )
                await self._audit(conn, change_audit_values("approve", memory, memory.value, actor=actor))
            elif revision is not None:
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
                        updated_at=self._backend.now(),
                        evidence=revision.evidence,
                        observed_at=revision.observed_at,
                    )
                )
                await self._close_revision(conn, revision, memory, status="approved", actor=actor, audit=True)
            return await self._memory_in(conn, memory_id)

    async def reject(self, memory_id: uuid.UUID, *, actor: str) -> Memory | None:
        """Discard the open revision, or archive a pending memory; None if missing or nothing pending.

        A rejected pending memory is archived rather than deleted, so extraction does not propose the
        same value again (see `store.rules.policy`)."""
        check_may_decide(actor)
        async with self._backend.transaction() as conn:
            decision = await self._decision(conn, memory_id, plan_reject)
            if decision is None:
                return None
            if decision.kind == "discard_revision" and decision.revision is not None:
                await self._close_revision(
                    conn, decision.revision, decision.memory, status="rejected", actor=actor, audit=True
                )
            else:
                await self._set_archived(conn, decision.memory, action="reject", actor=actor)
            return await self._memory_in(conn, memory_id)

    async def edit(
        self,
        memory_id: uuid.UUID,
        value: str,
        *,
        actor: str,
        activate: bool = False,
        pending_only: bool = False,
    ) -> Memory | None:
        """Set a memory's value (re-embedded); None when there is no such memory.

        Without `activate` the status is kept. With it (a person's edit, or a reviewer's edit-and-
        approve) the memory becomes `active` and an open proposal is closed: what the person wrote
        supersedes it. With `pending_only` (a reviewer's edit-and-approve) a memory with nothing
        waiting for review, as approve would find it, is left alone: `NothingPending`.

        The value is written as admitted (`store.rules.admission`: one line, invisible characters
        removed, secrets redacted); ValueError when nothing is left of it but a secret."""
        if not value.strip():
            raise ValueError("the new value is empty; to remove a memory use archive or delete")
        admitted = admit(value, one_line=True)
        problem = refusal("value", admitted, fix="save the value without it")
        if problem is not None:
            raise ValueError(problem)
        value = admitted.text
        if activate:
            check_may_decide(actor)
        current = await self.get_by_id(memory_id)
        if current is None:
            return None
        named = secret_key_refusal(current.key)
        if named is not None:  # stored before the gate refused such keys: any value would be the secret
            raise ValueError(named)
        if current.value == value and not activate:
            return current
        embedding = await self.embed_memory(current.key, value) if current.value != value else None
        m = self._schema.memories
        async with self._backend.transaction() as conn:
            memory = await self._memory_in(conn, memory_id, lock=True)
            if memory is None:
                return None
            open_rev = (
                await self._open_revision(conn, memory_id, lock=True) if activate or pending_only else None
            )
            if pending_only and plan_approve(memory, open_rev[0] if open_rev else None) == "nothing":
                raise NothingPending(f"memory {memory_id} has nothing pending to review")
            values: dict[str, object] = {"value": value, "updated_at": self._backend.now()}
            if embedding is not None:
                values["embedding"] = embedding
            if activate:
                values["status"] = "active"
                if open_rev is not None:
                    await self._close_revision(
                        conn, open_rev[0], memory, status="rejected", actor=actor, audit=False
                    )
            await conn.execute(update(m).where(m.c.id == memory_id).values(**values))
            await self._audit(conn, change_audit_values("edit", memory, value, actor=actor))
            return await self._memory_in(conn, memory_id)

    async def pending_revisions(self, memory_id: uuid.UUID | None = None) -> list[Revision]:
        """Open proposals (all, or of one memory), oldest first."""
        r = self._schema.revisions
        stmt = select(r).where(r.c.status == "pending").order_by(r.c.created_at, r.c.id)
        if memory_id is not None:
            stmt = stmt.where(r.c.memory_id == memory_id)
        async with self._backend.reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return [self._revision(row) for row in rows]

    @replica_read
    async def pending_changes(self, memory_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, Revision]:
        """The open proposal of each of these memories that has one, in one read (a memory has at
        most one open proposal)."""
        if not memory_ids:
            return {}
        on_driver = await self._backend.pending_changes(list(memory_ids))
        if on_driver is not None:
            return on_driver
        r = self._schema.revisions
        stmt = select(r).where(r.c.status == "pending", r.c.memory_id.in_(list(memory_ids)))
        async with self._backend.reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return {revision.memory_id: revision for revision in map(self._revision, rows)}

    async def audit_log(self, memory_id: uuid.UUID) -> list[AuditEntry]:
        """Every audited change of one memory, oldest first (kept after a delete)."""
        a = self._schema.audit
        stmt = select(a).where(a.c.memory_id == memory_id).order_by(a.c.id)
        async with self._backend.reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return [audit_entry(row) for row in rows]

    # -- the review queue -----------------------------------------------------------------------

    def _queue_conditions(self, query: ReviewQuery) -> list[ColumnElement[bool]]:
        """Filters on `memories` shared by both kinds of review item (SQL, never Python filtering)."""
        m = self._schema.memories
        conditions: list[ColumnElement[bool]] = []
        if query.teams is not None:
            conditions.append(m.c.team_id.in_(sorted(query.teams)) if query.teams else false())
        if query.team_id is not None:
            conditions.append(m.c.team_id == query.team_id)
        if query.scope is not None:
            conditions.append(m.c.scope == query.scope)
        if query.persona_id is not None:
            conditions.append(
                and_(m.c.scope.in_(("persona", "persona_user")), m.c.owner_id == query.persona_id)
            )
        if query.user_id is not None:
            conditions.append(self._about_user(query.user_id))
        return conditions

    @replica_read
    async def review_queue(self, query: ReviewQuery) -> Page[ReviewItem]:
        """Pending memories and open revisions, newest first, one page (two indexed reads, merged)."""
        m, r = self._schema.memories, self._schema.revisions
        fetch = query.limit + 1
        conditions = self._queue_conditions(query)
        pending = (
            select(*self._memory_columns)
            .where(
                m.c.status == "pending_review",
                *conditions,
                *self._after(m.c.created_at, m.c.id, query.cursor),
            )
            .order_by(m.c.created_at.desc(), m.c.id.desc())
            .limit(fetch)
        )
        proposals = (
            select(
                r.c.id.label("revision_id"),
                r.c.old_value,
                r.c.new_value,
                r.c.confidence.label("revision_confidence"),
                r.c.created_at.label("proposed_at"),
                r.c.source_channel_id.label("revision_channel_id"),
                r.c.evidence.label("revision_evidence"),
                r.c.observed_at.label("revision_observed_at"),
                *self._memory_columns,
            )
            .join(m, m.c.id == r.c.memory_id)
            .where(r.c.status == "pending", *conditions, *self._after(r.c.created_at, r.c.id, query.cursor))
            .order_by(r.c.created_at.desc(), r.c.id.desc())
            .limit(fetch)
        )
        if query.min_confidence is not None:
            pending = pending.where(m.c.confidence >= query.min_confidence)
            proposals = proposals.where(r.c.confidence >= query.min_confidence)
        async with self._backend.reading() as conn:
            memory_rows = (await conn.execute(pending)).all()
            revision_rows = (await conn.execute(proposals)).all()
        entries: list[tuple[datetime, uuid.UUID, ReviewItem]] = []
        for row in memory_rows:
            memory = self._memory(row)
            entries.append((memory.created_at, memory.id, review_item_of_memory(memory)))
        for row in revision_rows:
            memory = self._memory(row)
            data = row._mapping
            item = replace(
                review_item_of_memory(memory),
                id=data["revision_id"],
                kind="revision",
                value=None,
                old_value=data["old_value"],
                new_value=data["new_value"],
                confidence=storable_confidence(data["revision_confidence"]),
                source_channel_id=data["revision_channel_id"] or memory.source_channel_id,
                created_at=data["proposed_at"],
                evidence=data["revision_evidence"],
                observed_at=data["revision_observed_at"],
            )
            entries.append((item.created_at, item.id, item))
        return newest_first_page(entries, query.limit)

    async def review_target(self, item_id: uuid.UUID) -> Memory | None:
        """The memory a review item stands for: the memory with this id, or the memory whose open
        revision has this id; None when neither exists."""
        m, r = self._schema.memories, self._schema.revisions
        async with self._backend.reading() as conn:
            row = (await conn.execute(select(*self._memory_columns).where(m.c.id == item_id))).first()
            if row is None:
                row = (
                    await conn.execute(
                        select(*self._memory_columns)
                        .join(r, r.c.memory_id == m.c.id)
                        .where(r.c.id == item_id, r.c.status == "pending")
                    )
                ).first()
        return None if row is None else self._memory(row)

    @replica_read
    async def pending_counts(self, teams: frozenset[uuid.UUID] | None = None) -> dict[str, int]:
        """Review-queue depth by scope: pending memories plus open revisions (of `teams` only, when
        given)."""
        m, r = self._schema.memories, self._schema.revisions
        within = self._queue_conditions(ReviewQuery(teams=teams))
        counts: dict[str, int] = {scope: 0 for scope in SCOPES}
        async with self._backend.reading() as conn:
            for stmt in (
                select(m.c.scope, func.count())
                .where(m.c.status == "pending_review", *within)
                .group_by(m.c.scope),
                select(m.c.scope, func.count())
                .select_from(r.join(m, m.c.id == r.c.memory_id))
                .where(r.c.status == "pending", *within)
                .group_by(m.c.scope),
            ):
                for scope, count in (await conn.execute(stmt)).all():
                    counts[scope] += int(count)
        return counts


def review_item_of_memory(memory: Memory) -> ReviewItem:
    """A pending memory as a review item."""
    return ReviewItem(
        id=memory.id,
        kind="memory",
        memory_id=memory.id,
        scope=memory.scope,
        owner_id=memory.owner_id,
        user_id=memory.user_id,
        team_id=memory.team_id,
        key=memory.key,
        value=memory.value,
        old_value=None,
        new_value=None,
        confidence=memory.confidence,
        source_channel_id=memory.source_channel_id,
        created_at=memory.created_at,
        evidence=memory.evidence,
        observed_at=memory.observed_at,
        pinned=memory.pinned,
    )
