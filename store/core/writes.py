"""Memory writes: upsert by (scope, owner, user, key) under `store.rules.policy`, and one event's writes
in one transaction with its processed-event row (idempotency)."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from store.core.backend import EventBatch
from store.core.base import AuditRows, StoreBase, audit_values, change_audit_values
from store.core.turns import insert_turns
from store.errors import StoreConflict, StoreError
from store.model import (
    NIL_UUID,
    AuditAction,
    DedupRule,
    EventMemory,
    EventWrite,
    Memory,
    Neighbour,
    NewMemory,
    NewTurn,
    Revision,
    UpsertAction,
    UpsertResult,
)
from store.rules.admission import admit_memory, admit_turns
from store.rules.policy import (
    plan_upsert,
    same_value,
    storable_confidence,
    validate_new_memory,
)

_EVENT_AUDIT_ACTIONS: dict[AuditAction, UpsertAction] = {
    "add": "created",
    "update": "updated",
    "propose": "revision_proposed",
}


log = logging.getLogger("pmem.store.writes")

# immediate retries of a transaction that hit a deadlock or a serialisation failure
CONFLICT_RETRIES = 3


def key_identity(memory: NewMemory | Memory) -> tuple[Any, ...]:
    """What the key index makes unique: scope, owner, user, team and key (NULLs as the nil uuid)."""
    return (memory.scope, memory.owner_id, memory.user_id or NIL_UUID, memory.team_id or NIL_UUID, memory.key)


def unchanged_result(existing: Memory, revision: Revision | None, new: NewMemory) -> UpsertResult:
    """The result of an upsert that changes nothing: it names the open revision when that one
    already proposes the new value."""
    pending_id = revision.id if revision and same_value(revision.new_value, new.value) else None
    return UpsertResult(memory_id=existing.id, action="unchanged", revision_id=pending_id)


def write_order(memories: Sequence[NewMemory]) -> list[int]:
    """The memories' indexes in the order an event writes them: one fixed order (scope, owner,
    user, team, key) keeps two events touching the same memories from deadlocking."""
    return sorted(
        range(len(memories)),
        key=lambda i: (
            memories[i].scope,
            str(memories[i].owner_id),
            str(memories[i].user_id),
            str(memories[i].team_id),
            memories[i].key,
        ),
    )


def occurrence_rounds(memories: Sequence[NewMemory], indexes: Sequence[int]) -> list[list[int]]:
    """`indexes` split into rounds in which each memory identity (scope, owner, user, team, key)
    appears at most once: its first occurrences, then its second ones, …, each in the given order."""
    rounds: list[list[int]] = []
    seen: dict[tuple[Any, ...], int] = {}
    for i in indexes:
        m = memories[i]
        identity = (m.scope, m.owner_id, m.user_id, m.team_id, m.key)
        occurrence = seen.get(identity, 0)
        seen[identity] = occurrence + 1
        if occurrence == len(rounds):
            rounds.append([])
        rounds[occurrence].append(i)
    return rounds


def apply_dedup(
    rows: list[NewMemory], near: Sequence[Sequence[Neighbour]], dedup: DedupRule
) -> tuple[dict[int, UpsertResult], set[int]]:
    """`dedup`'s verdict on each new memory given its stored neighbours: the skipped ones' results
    (near duplicates, by index) and the indexes whose key is already stored. A memory written under
    the stored spelling of its key is replaced in `rows`."""
    results: dict[int, UpsertResult] = {}
    stored_key: set[int] = set()
    for i, found in enumerate(near):
        verdict = dedup(rows[i], found)
        if verdict.duplicate_of is not None:
            results[i] = UpsertResult(memory_id=verdict.duplicate_of, action="unchanged", near_duplicate=True)
            continue
        if verdict.key is not None and verdict.key != rows[i].key:
            rows[i] = dataclasses.replace(rows[i], key=verdict.key)
        if any(n.memory.key == rows[i].key and n.memory.team_id == rows[i].team_id for n in found):
            stored_key.add(i)
    return results, stored_key


def validate_new_turns(turns: Sequence[NewTurn]) -> None:
    """Raise ValueError naming the problem when an event's turns cannot be stored: a position
    below 1 or given twice, a role other than user/assistant."""
    seen: set[int] = set()
    for turn in turns:
        if turn.position < 1 or turn.position in seen:
            raise ValueError(
                f"turn position {turn.position} is below 1 or given twice; number messages from 1"
            )
        if turn.role not in ("user", "assistant"):
            raise ValueError(f"a turn's role is user or assistant, got {turn.role!r}")
        seen.add(turn.position)


class MemoryWrites(StoreBase):
    """Upserts and event writes, with their audit rows."""

    conflict_retries: int = 0  # transactions retried after a deadlock/serialisation failure

    # -- writes ---------------------------------------------------------------------------------

    async def _upsert_in(
        self,
        conn: AsyncConnection,
        new: NewMemory,
        embedding: list[float],
        *,
        actor: str,
        event_id: uuid.UUID | None,
    ) -> UpsertResult:
        (created,) = await self._insert_new(conn, [(new, embedding)], actor=actor, event_id=event_id)
        if created is not None:
            return created

        (locked,) = await self._locked_by_keys(conn, [new])
        if locked is None:
            # the conflicting row was deleted between our insert and our read: let the caller retry
            raise StoreError(f"memory {new.key!r} was deleted concurrently; retry the write")
        return await self._apply_upsert(conn, new, embedding, *locked, actor=actor, event_id=event_id)

    async def _apply_upsert(
        self,
        conn: AsyncConnection,
        new: NewMemory,
        embedding: list[float],
        existing: Memory,
        revision: Revision | None,
        *,
        actor: str,
        event_id: uuid.UUID | None,
        audits: AuditRows | None = None,
    ) -> UpsertResult:
        """Write `new` over the stored row of its key (locked by the caller, with its open
        revision) as `store.rules.policy.plan_upsert` says: unchanged, update or pending revision. Audit
        rows are written at once, or appended to `audits` for the caller to flush."""
        m = self._schema.memories
        now = self._backend.now()
        plan = plan_upsert(existing, revision, new)

        if plan.kind == "unchanged":
            return unchanged_result(existing, revision, new)

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
                "evidence": new.evidence,
                "observed_at": new.observed_at,
            }
            if revision is not None:
                revision_id = revision.id
                await conn.execute(update(r).where(r.c.id == revision_id).values(**fields))
            else:
                revision_id = uuid.uuid4()
                await conn.execute(
                    self._insert(r).values(id=revision_id, memory_id=existing.id, status="pending", **fields)
                )
            proposed = change_audit_values(
                "propose", existing, new.value, actor=actor, event_id=event_id, revision_id=revision_id
            )
            await self._audit(conn, proposed, into=audits)
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
        if new.evidence is not None or new.observed_at is not None:
            # the newer statement's evidence replaces the older one's (they describe the new value)
            values["evidence"] = new.evidence
            values["observed_at"] = new.observed_at
        await conn.execute(update(m).where(m.c.id == existing.id).values(**values))
        updated = change_audit_values("update", existing, new.value, actor=actor, event_id=event_id)
        await self._audit(conn, updated, into=audits)
        if plan.close_revision and revision is not None:
            await self._close_revision(
                conn, revision, existing, status="rejected", actor=actor, audit=True, audits_into=audits
            )
        return UpsertResult(memory_id=existing.id, action="updated")

    async def _insert_new(
        self,
        conn: AsyncConnection,
        rows: Sequence[tuple[NewMemory, list[float]]],
        *,
        actor: str,
        event_id: uuid.UUID | None,
    ) -> list[UpsertResult | None]:
        """Insert every row whose key is new in ONE statement, and their `add` audit rows in one
        more; per row, the result, or None when its key exists (the caller upserts that one).
        Two statements per event instead of two per memory: each round trip costs the worker
        more CPU than the work it carries (bench/README.md)."""
        if not rows:
            return []
        ids = [uuid.uuid4() for _ in rows]
        m = self._schema.memories
        now = self._backend.now()
        values = [
            {
                "id": new_id,
                "scope": new.scope,
                "owner_id": new.owner_id,
                "user_id": new.user_id,
                "key": new.key,
                "value": new.value,
                "source_channel_id": new.source_channel_id,
                "confidence": storable_confidence(new.confidence),
                "status": new.status,
                "embedding": embedding,
                "created_at": new.observed_at if new.observed_at is not None else now,
                "updated_at": now,
                "team_id": new.team_id,
                "evidence": new.evidence,
                "observed_at": new.observed_at,
            }
            for new_id, (new, embedding) in zip(ids, rows, strict=True)
        ]
        insert = (
            self._insert(m)
            .values(values)
            .on_conflict_do_nothing(index_elements=self._key_index)
            .returning(m.c.id)
        )
        created = {row.id for row in (await conn.execute(insert)).all()}
        audit = [
            self._stamped(
                audit_values(
                    "add",
                    memory=new,
                    memory_id=new_id,
                    old_value=None,
                    new_value=new.value,
                    actor=actor,
                    event_id=event_id,
                )
            )
            for new_id, (new, _) in zip(ids, rows, strict=True)
            if new_id in created
        ]
        if audit:
            await conn.execute(self._insert(self._schema.audit).values(audit))
        return [
            UpsertResult(memory_id=new_id, action="created") if new_id in created else None for new_id in ids
        ]

    async def _locked_by_keys(
        self, conn: AsyncConnection, rows: Sequence[NewMemory]
    ) -> list[tuple[Memory, Revision | None] | None]:
        """Per new memory: the stored row of its key and that row's open revision, both locked,
        or None; two statements for all of them (the one-row path takes three per memory)."""
        if not rows:
            return []
        m, r = self._schema.memories, self._schema.revisions
        nil = self._backend.nil()
        wanted = [key_identity(n) for n in rows]
        match = or_(
            *(
                and_(
                    m.c.scope == scope,
                    m.c.owner_id == owner,
                    func.coalesce(m.c.user_id, nil) == user,
                    func.coalesce(m.c.team_id, nil) == team,
                    m.c.key == key,
                )
                for scope, owner, user, team, key in dict.fromkeys(wanted)
            )
        )
        # a fixed lock order (by id) against deadlocks with other writers of these rows
        stmt = select(*self._memory_columns).where(match).order_by(m.c.id).with_for_update()
        stored = [self._memory(row) for row in (await conn.execute(stmt)).all()]
        by_identity = {key_identity(s): s for s in stored}
        revisions: dict[uuid.UUID, Revision] = {}
        if stored:
            rev_stmt = (
                select(r)
                .where(r.c.memory_id.in_([s.id for s in stored]), r.c.status == "pending")
                .order_by(r.c.id)
                .with_for_update()
            )
            for row in (await conn.execute(rev_stmt)).all():
                revision = self._revision(row)
                revisions[revision.memory_id] = revision
        found: list[tuple[Memory, Revision | None] | None] = []
        for key in wanted:
            memory = by_identity.get(key)
            found.append(None if memory is None else (memory, revisions.get(memory.id)))
        return found

    async def upsert(
        self, memory: NewMemory, *, actor: str = "system", event_id: uuid.UUID | None = None
    ) -> UpsertResult:
        """Create or update by (scope, owner, user, key) following `store.rules.policy`; audited.
        Key, value and evidence are written as admitted (`store.rules.admission.admit_memory`):
        ValueError when the key or the value holds nothing but a secret or no words."""
        memory = admit_memory(memory)
        validate_new_memory(memory)
        (embedding,) = await self._embeddings_for([memory])
        async with self._backend.transaction() as conn:
            return await self._upsert_in(conn, memory, embedding, actor=actor, event_id=event_id)

    async def write_event(
        self,
        *,
        event_id: uuid.UUID,
        memories: Sequence[NewMemory],
        actor: str = "worker",
        dedup: DedupRule | None = None,
        neighbours: int = 8,
        turns: Sequence[NewTurn] = (),
        body_sha256: str | None = None,
    ) -> EventWrite:
        """Upserts, audit rows, the event's conversation turns and the processed-event row in one
        transaction.

        An event id that was already processed writes nothing (no memory, no turn) and returns
        `duplicate=True` with the `body_sha256` the event was first written with.

        With `dedup`, inside the transaction and under a per-owner lock (so two concurrent events
        of one owner cannot both miss each other's fact): the `neighbours` nearest stored memories
        of each new one are read in one statement, and `dedup` decides per memory to skip it (the
        result then names the memory that already says it, `near_duplicate=True`) or to write it,
        possibly under the stored spelling of its key.

        Every memory and turn is written as admitted (`store.rules.admission`): a memory whose key
        or value has no content raises ValueError; a turn without content is left out (logged)."""
        memories = [admit_memory(memory) for memory in memories]
        for memory in memories:
            validate_new_memory(memory)
        turns, refused = admit_turns(turns)
        for position, reason in refused:
            log.info(
                "turn %d of event %s not stored: %s",
                position,
                event_id,
                reason,
                extra={"rejection": "turn_without_content"},
            )
        validate_new_turns(turns)
        batch = EventBatch(
            event_id=event_id,
            memories=memories,
            embeddings=await self._embeddings_for(memories),
            actor=actor,
            dedup=dedup,
            neighbours=neighbours,
            turns=turns,
            body_sha256=body_sha256,
        )
        # a deadlock or serialisation failure is nobody's fault: the whole transaction (nothing of
        # it committed) is tried again at once, a few times, before it counts as a failure
        for tries in range(1, CONFLICT_RETRIES + 2):
            try:
                return await self._write_event_once(batch)
            except StoreConflict:
                if tries > CONFLICT_RETRIES:
                    raise
                self.conflict_retries += 1
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    async def _write_event_once(self, batch: EventBatch) -> EventWrite:
        """One attempt at `write_event`'s transaction: the backend's own write when it has one for
        this batch (`Backend.write_event`), else the statements below, one at a time."""
        written = await self._backend.write_event(batch)
        if written is not None:
            return written
        async with self._backend.transaction() as conn:
            return await self._write_event_in(conn, batch)

    async def _write_event_in(self, conn: AsyncConnection, batch: EventBatch) -> EventWrite:
        """`write_event`'s transaction, one statement at a time."""
        pe = self._schema.processed_events
        claim = (
            self._insert(pe)
            .values(
                event_id=batch.event_id,
                processed_at=self._backend.now(),
                memory_count=len(batch.memories),
                actor=batch.actor,
                body_sha256=batch.body_sha256,
            )
            .on_conflict_do_nothing(index_elements=[pe.c.event_id])
            .returning(pe.c.event_id)
        )
        claimed = (await conn.execute(claim)).first() is not None
        if not claimed:
            earlier = select(pe.c.body_sha256).where(pe.c.event_id == batch.event_id)
            return EventWrite(duplicate=True, earlier_body_sha256=(await conn.execute(earlier)).scalar())
        rows = list(batch.memories)
        results: dict[int, UpsertResult] = {}
        stored_key: set[int] = set()
        if batch.dedup is not None and rows:
            await self._backend.lock_owners(conn, rows)
            near = await self._backend.neighbours(conn, rows, batch.embeddings, batch.neighbours)
            results, stored_key = apply_dedup(rows, near, batch.dedup)
        pending = [i for i in write_order(batch.memories) if i not in results]
        fresh = [i for i in pending if i not in stored_key]
        inserted = await self._insert_new(
            conn, [(rows[i], batch.embeddings[i]) for i in fresh], actor=batch.actor, event_id=batch.event_id
        )
        for i, done in zip(fresh, inserted, strict=True):
            if done is not None:
                results[i] = done
        taken = [i for i in pending if i not in results]
        await self._upsert_taken(
            conn, rows, batch.embeddings, taken, results, actor=batch.actor, event_id=batch.event_id
        )
        await insert_turns(self._backend, conn, batch.event_id, batch.turns)
        return EventWrite(duplicate=False, results=tuple(results[i] for i in range(len(batch.memories))))

    async def _upsert_taken(
        self,
        conn: AsyncConnection,
        rows: Sequence[NewMemory],
        embeddings: Sequence[list[float]],
        taken: Sequence[int],
        results: dict[int, UpsertResult],
        *,
        actor: str,
        event_id: uuid.UUID,
    ) -> None:
        """Rows (by index) whose key is stored: locked in one go, then update, revision or
        unchanged each, their audit rows written together at the end; outcomes into `results`."""
        if not taken:
            return
        audits: AuditRows = []
        # a key given twice in one event: its second row must see what the first one wrote (an
        # update, a pending revision), so it is locked and read again in a later round
        for batch in occurrence_rounds(rows, taken):
            locked_rows = await self._locked_by_keys(conn, [rows[i] for i in batch])
            for i, locked in zip(batch, locked_rows, strict=True):
                if locked is None:
                    # the stored row was erased since we saw it: the whole write is retried
                    raise StoreConflict(f"memory {rows[i].key!r} was deleted concurrently")
                results[i] = await self._apply_upsert(
                    conn, rows[i], embeddings[i], *locked, actor=actor, event_id=event_id, audits=audits
                )
        await self._flush_audits(conn, audits)

    async def is_processed(self, event_id: uuid.UUID) -> bool:
        """Whether `write_event` already committed this event."""
        pe = self._schema.processed_events
        async with self._backend.reading() as conn:
            row = (await conn.execute(select(pe.c.event_id).where(pe.c.event_id == event_id))).first()
        return row is not None

    async def event_writes(self, event_id: uuid.UUID) -> list[EventMemory]:
        """What `write_event` created, updated or proposed for this event, in write order, from the
        audit trail (so also for memories archived or changed since; an erased memory is gone, key and all).
        Unchanged memories left no audit row."""
        a = self._schema.audit
        stmt = (
            select(a.c.memory_id, a.c.action, a.c.scope, a.c.key)
            .where(
                a.c.event_id == event_id,
                a.c.action.in_(tuple(_EVENT_AUDIT_ACTIONS)),
                a.c.key.is_not(None),  # an erased memory's key is gone with it
            )
            .order_by(a.c.id)
        )
        async with self._backend.reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            EventMemory(
                memory_id=row.memory_id, action=_EVENT_AUDIT_ACTIONS[row.action], scope=row.scope, key=row.key
            )
            for row in rows
        ]
