"""Postgres: the worker's one write per event (`write_event` with near-duplicate dedup), pipelined.

The statements and decisions are those of `store.core.writes` (the same claim, near-duplicate read,
insert and upserts), sent on the pooled connection's psycopg driver in pipeline mode, inside an
explicit BEGIN ... COMMIT on an autocommit connection:

1. BEGIN, a known large owner's reviewed rows through HNSW (before the locks: no write of the
   worker changes an active row), the processed-event claim with the owners' advisory locks, the
   rest of the near-duplicate read (with the count of an owner whose size the cache lacks), and
   the stored rows of the event's keys with their open revisions, locked: one round trip. The
   server still runs them in order, each with its own snapshot, so the read under the locks sees
   every write committed by the lock's previous holder.
2. Then, as `store.rules.policy.plan_upsert` decides for each stored key: the new rows with their
   audit rows, the pending rows updated, the revisions proposed, their audit rows, and COMMIT: one
   round trip. A key dedup respelled to a stored one has its row locked first (one round trip
   more); a key given twice in one event writes its first occurrence, locks its row again in the
   same pipeline and writes the second in one more round; a stored row gone meanwhile retries the
   write. A key stored where the lock did not see it (a writer that does not take the owner lock)
   fails the insert; the transaction is rolled back and the write runs again, its locks now
   finding that row.

The read under the locks of a large owner (its recent windows in owner-index order, the key
lookups) is planned once per connection (a generic plan: `plan_cache_mode` for that statement):
its plan is the same whatever the owner, and planning it for every event cost more than running
it. Not the reads whose plan an owner's size decides (its HNSW read, a small owner's exact
ranking), nor the lock of open revisions, whose generic plan reads every pending revision; the
rest runs with `auto`, as before (bench/README.md, "The store's part of an event").

Writes without dedup, or with an explicit status, take the shared path of `store.core.writes`.

A typical event costs two round trips instead of five, and skips SQLAlchemy's statement and row
processing: each round trip costs the worker more CPU and event-loop waiting than the work it
carries (bench/README.md, "Pipeline throughput"). Round trips under an owner's lock are what
other events of that owner wait for: a persona that learns from all its users takes one lock.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from psycopg import AsyncConnection as DriverConnection
from psycopg import AsyncCursor
from psycopg.errors import UniqueViolation
from psycopg.rows import dict_row

from store.core.backend import EventBatch
from store.core.base import AuditRows, change_audit_values
from store.core.rows import memory_from_row, revision_from_row
from store.core.schema import Schema
from store.core.writes import (
    apply_dedup,
    key_identity,
    occurrence_rounds,
    unchanged_result,
    write_order,
)
from store.errors import StoreConflict
from store.model import DedupRule, EventWrite, Memory, NewMemory, NewTurn, Revision, UpsertResult
from store.postgres import neighbours_sql
from store.postgres.connections import (
    AUTO_PLAN_SQL,
    CUSTOM_PLAN_SQL,
    GENERIC_PLAN_SQL,
    SCOPE_SQL,
    PgConnections,
    scope_params,
)
from store.postgres.neighbours_sql import (
    OwnerSizes,
    neighbours_from_rows,
    neighbours_statement,
    owner_count_statement,
    owner_key,
)
from store.postgres.params import float4_array
from store.postgres.turns_sql import turns_insert_statement
from store.postgres.write_sql import (
    LOCK_BY_KEYS_SQL,
    LOCK_OPEN_REVISIONS_BY_KEYS_SQL,
    audit_insert_sql,
    audit_params,
    claim_statement,
    insert_new_statement,
    key_identity_params,
)
from store.rules.policy import plan_upsert, storable_confidence

# The HNSW candidate list of the write's read of a large owner (this transaction only; recall keeps
# the session's): dedup needs the near duplicates (cosine >= 0.80 / 0.95), not an exact top k. With
# real MiniLM embeddings 8 and 10 found every near duplicate that 40 and the exact ranking found
# (bench/dedup_recall.py); 10 visits about 40 % of the graph pages 40 did, and this read was most
# of what a populated owner's event costs more than an empty one's (bench/event_store_cost.py)
DEDUP_EF_SEARCH = "SET LOCAL hnsw.ef_search = 10"

# stored pending rows given a newer extraction (`plan_upsert`'s "update"), from column arrays; the
# embeddings one after another in one `real[]`, `:starts` where each row's begins
_UPDATE_PENDING_SQL = (
    "UPDATE {memories} AS m SET value = u.value, confidence = u.confidence, status = u.status, "
    "embedding = CAST((CAST(%(embeddings)s AS real[]))[u.start:u.start + {dim} - 1] AS vector({dim})), "
    "updated_at = now(), source_channel_id = coalesce(u.channel, m.source_channel_id), "
    "evidence = CASE WHEN u.evidence IS NULL AND u.observed_at IS NULL THEN m.evidence ELSE u.evidence END, "
    "observed_at = CASE WHEN u.evidence IS NULL AND u.observed_at IS NULL THEN m.observed_at "
    "ELSE u.observed_at END "
    "FROM unnest(CAST(%(ids)b AS uuid[]), CAST(%(values)b AS text[]), CAST(%(confidences)b AS float8[]), "
    "CAST(%(statuses)b AS text[]), CAST(%(starts)b AS int[]), CAST(%(channels)b AS uuid[]), "
    "CAST(%(evidences)b AS text[]), CAST(%(observed)b AS timestamptz[])) "
    "AS u(id, value, confidence, status, start, channel, evidence, observed_at) WHERE m.id = u.id"
)
# proposals for reviewed rows (`plan_upsert`'s "propose"): a new pending revision, or the open one
# (locked, its id given) replaced
_PROPOSE_SQL = (
    "INSERT INTO {revisions} (id, memory_id, old_value, new_value, confidence, embedding, "
    "source_channel_id, source_event_id, proposed_by, created_at, status, evidence, observed_at) "
    "SELECT id, memory_id, old_value, new_value, confidence, "
    "CAST((CAST(%(embeddings)s AS real[]))[start:start + {dim} - 1] AS vector({dim})), channel, "
    "CAST(%(event_id)s AS uuid), %(actor)s, now(), 'pending', evidence, observed_at "
    "FROM unnest(CAST(%(ids)b AS uuid[]), CAST(%(memory_ids)b AS uuid[]), CAST(%(old_values)b AS text[]), "
    "CAST(%(new_values)b AS text[]), CAST(%(confidences)b AS float8[]), CAST(%(starts)b AS int[]), "
    "CAST(%(channels)b AS uuid[]), CAST(%(evidences)b AS text[]), CAST(%(observed)b AS timestamptz[])) "
    "AS p(id, memory_id, old_value, new_value, confidence, start, channel, evidence, observed_at) "
    "ON CONFLICT (id) DO UPDATE SET old_value = EXCLUDED.old_value, new_value = EXCLUDED.new_value, "
    "confidence = EXCLUDED.confidence, embedding = EXCLUDED.embedding, "
    "source_channel_id = EXCLUDED.source_channel_id, source_event_id = EXCLUDED.source_event_id, "
    "proposed_by = EXCLUDED.proposed_by, created_at = EXCLUDED.created_at, "
    "evidence = EXCLUDED.evidence, observed_at = EXCLUDED.observed_at"
)


class PgEventWriter:
    """`write_event` with dedup through psycopg's pipeline mode (see the module docstring), on the
    store's connections; owner sizes shared with the store's other near-duplicate reads."""

    def __init__(self, connections: PgConnections, schema: Schema, owner_sizes: OwnerSizes) -> None:
        self._connections = connections
        self._schema = schema
        self._owner_sizes = owner_sizes

    @staticmethod
    def takes(memories: Sequence[NewMemory], dedup: DedupRule | None) -> bool:
        """Whether this writer sends the event: it dedups extracted (pending) memories, the
        worker's write; explicit statuses and writes without dedup take the shared path."""
        return dedup is not None and bool(memories) and all(m.status == "pending_review" for m in memories)

    async def write(self, batch: EventBatch, dedup: DedupRule) -> EventWrite:
        """One attempt at the event's transaction (`MemoryWrites.write_event` retries a
        `StoreConflict`), deduplicated by `dedup` (the batch's rule: the writer `takes` only events
        with one)."""
        # a key stored behind the locks' back (a writer that takes no owner lock) fails the
        # insert: the write runs again, and its locks now find that key's row
        for _ in range(2):
            # a failed or cancelled write is rolled back (or its connection discarded) by the
            # pool's reset on return, as for any other transaction
            async with self._connections.driver() as driver:
                written = await self._write_event_pipelined(driver, batch, dedup)
            if written is not None:
                return written
        raise StoreConflict("a key of the event was stored concurrently, twice")

    async def _write_event_pipelined(
        self, driver: DriverConnection[Any], batch: EventBatch, dedup: DedupRule
    ) -> EventWrite | None:
        """The write (see the module docstring), or None, rolled back, when the insert of the new
        rows met a key neither the near-duplicate read nor the row lock saw."""
        # the owners' sizes choose the read's shape. An owner the cache lacks is counted beside
        # the read, which ranks it as a small one unless the count says otherwise: a large owner
        # new to the cache (a persona, once a minute) is then read again in its own shape.
        sizes, missing = self._owner_sizes.lookup([owner_key(m) for m in batch.memories])
        vectors = [float4_array(vector) for vector in batch.embeddings]  # once for both reads
        # a known large owner's reviewed rows are read through HNSW before the owner locks (the
        # costliest part of the read: persona learning puts every user's events of a persona on
        # one lock); the rest under the locks (`neighbours.ReadShape`)
        dim = self._schema.embedding_dim
        early_sql, early_params = neighbours_statement(
            batch.memories, vectors, batch.neighbours, sizes, "hnsw", dim=dim
        )
        near_sql, near_params = neighbours_statement(
            batch.memories, vectors, batch.neighbours, sizes, "locked" if early_sql else "whole", dim=dim
        )
        claim_sql, claim_params = claim_statement(
            self._schema.processed_events.name,
            batch.event_id,
            batch.memories,
            actor=batch.actor,
            body_sha256=batch.body_sha256,
        )
        async with self._connections.round_trip(driver):
            await driver.execute("BEGIN")
            await driver.execute(SCOPE_SQL, scope_params())
            if early_sql:
                await driver.execute(DEDUP_EF_SEARCH)
                early = driver.cursor(row_factory=dict_row)
                await early.execute((early_sql), early_params)
            claim = await driver.execute((claim_sql), claim_params)
            near = driver.cursor(row_factory=dict_row)
            # a large owner's windows and key reads have one plan whatever the owner
            await _send_read(driver, near, near_sql, near_params, one_plan=bool(early_sql))
            if missing:
                count_sql, count_params = owner_count_statement(missing)
                counts = await driver.execute((count_sql), count_params)
            # the stored rows of the event's keys and their open revisions, locked now: most
            # events restate a stored key, and its write then needs no round trip of its own
            # under the owner lock, which other events of the owner wait for
            key_locks = await _send_key_locks(driver, list(dict.fromkeys(map(key_identity, batch.memories))))
            early_rows: Sequence[Mapping[str, Any]] = await early.fetchall() if early_sql else []
            claimed_row = await claim.fetchone()
            near_rows: Sequence[Mapping[str, Any]] = [*early_rows, *await near.fetchall()]
            counted = {missing[idx]: n for idx, n in await counts.fetchall()} if missing else {}
            locked = locked_rows(*[await cursor.fetchall() for cursor in key_locks])
        self._owner_sizes.remember(counted)
        if claimed_row is None or not claimed_row[0]:
            # a duplicate (rare): what it was first written with, for the worker to compare
            table = self._schema.processed_events.name
            earlier = await driver.execute(
                f"SELECT body_sha256 FROM {table} WHERE event_id = %(event_id)s", {"event_id": batch.event_id}
            )
            earlier_row = await earlier.fetchone()
            await driver.execute("ROLLBACK")
            earlier_hash = None if earlier_row is None else earlier_row[0]
            return EventWrite(duplicate=True, earlier_body_sha256=earlier_hash)
        if any(size > neighbours_sql.EXACT_OWNER_ROWS for size in counted.values()):
            # an owner new to the size cache is large: read everything again, under the locks
            near_sql, near_params = neighbours_statement(
                batch.memories, vectors, batch.neighbours, sizes | counted, dim=dim
            )
            await near.execute((near_sql), near_params)
            near_rows = await near.fetchall()

        rows = list(batch.memories)
        results, stored_key = apply_dedup(rows, neighbours_from_rows(near_rows, len(rows)), dedup)
        pending = [i for i in write_order(batch.memories) if i not in results]
        # a key given twice in one event: its second row must see what the first one wrote, so
        # it goes in the next round, whose rows are locked in the pipeline of the round before
        rounds = occurrence_rounds(rows, pending) or [[]]  # nothing to write: the turns and COMMIT
        for n, round_rows in enumerate(rounds):
            later = rounds[n + 1] if n + 1 < len(rounds) else None
            # a key the read did not see may still be stored (an archived row): the lock found it;
            # from the second round on, every key was written by an earlier round
            stored_by_key = locked[0]
            taken = [i for i in round_rows if n or i in stored_key or key_identity(rows[i]) in stored_by_key]
            fresh = [i for i in round_rows if i not in taken]
            next_locked = await self._write_round(
                driver,
                rows,
                batch.embeddings,
                fresh,
                taken,
                results,
                locked,
                actor=batch.actor,
                event_id=batch.event_id,
                turns=batch.turns if later is None else (),
                lock_next=None if later is None else [key_identity(rows[i]) for i in later],
            )
            if next_locked is None:
                return None
            locked = next_locked
        return EventWrite(duplicate=False, results=tuple(results[i] for i in range(len(rows))))

    async def _write_round(
        self,
        driver: DriverConnection[Any],
        rows: Sequence[NewMemory],
        embeddings: Sequence[Sequence[float]],
        fresh: Sequence[int],
        taken: Sequence[int],
        results: dict[int, UpsertResult],
        locked: _LockedRows,
        *,
        actor: str,
        event_id: uuid.UUID,
        turns: Sequence[NewTurn],
        lock_next: Sequence[tuple[Any, ...]] | None,
    ) -> _LockedRows | None:
        """Insert the rows `fresh` (by index), write the rows `taken` over their stored keys (each
        key once, all pending_review) as `plan_upsert` says, then lock `lock_next`'s keys (the next
        round's) or, in the last round, write the turns and commit: one round trip when the stored
        rows are among those `locked`, two when dedup respelled a key. The next round's locked
        rows (empty after the commit); None, rolled back, when one of the `fresh` keys is stored
        after all (rare: a writer that does not take the owner lock; no savepoint is paid for it
        on every event); `StoreConflict`, rolled back, when a stored row is gone since the read
        (the write is retried)."""
        new_ids = [uuid.uuid4() for _ in fresh]
        insert = (
            insert_new_statement(
                self._schema,
                new_ids,
                [rows[i] for i in fresh],
                [embeddings[i] for i in fresh],
                actor=actor,
                event_id=event_id,
            )
            if fresh
            else None
        )
        try:
            by_key, open_revisions = locked
            if not all(key_identity(rows[i]) in by_key for i in taken):
                # a key dedup respelled to a stored one: its row is locked now
                async with self._connections.round_trip(driver):
                    if insert is not None:
                        await driver.execute((insert[0]), insert[1])
                        insert = None
                    key_locks = await _send_key_locks(driver, [key_identity(rows[i]) for i in taken])
                    by_key, open_revisions = locked_rows(*[await cursor.fetchall() for cursor in key_locks])
            if not all(key_identity(rows[i]) in by_key for i in taken):
                await driver.execute("ROLLBACK")
                raise StoreConflict("a stored memory was deleted concurrently")
            next_locked = await self._write_planned(
                driver,
                rows,
                embeddings,
                taken,
                results,
                insert,
                by_key,
                open_revisions,
                actor=actor,
                event_id=event_id,
                turns=turns,
                lock_next=lock_next,
            )
        except UniqueViolation:
            await driver.execute("ROLLBACK")
            return None
        for i, new_id in zip(fresh, new_ids, strict=True):
            results[i] = UpsertResult(memory_id=new_id, action="created")
        return next_locked

    async def _write_planned(
        self,
        driver: DriverConnection[Any],
        rows: Sequence[NewMemory],
        embeddings: Sequence[Sequence[float]],
        taken: Sequence[int],
        results: dict[int, UpsertResult],
        insert: tuple[str, dict[str, Any]] | None,
        by_key: Mapping[tuple[Any, ...], Memory],
        open_revisions: Mapping[uuid.UUID, Revision],
        *,
        actor: str,
        event_id: uuid.UUID,
        turns: Sequence[NewTurn],
        lock_next: Sequence[tuple[Any, ...]] | None,
    ) -> _LockedRows:
        """`plan_upsert` for each row `taken` against its locked stored row, then `insert` (the
        new rows, if not sent yet), the updates, proposals and audit rows, and the locks of
        `lock_next`'s keys (their rows returned) or the turns and COMMIT, in one round trip;
        outcomes into `results`."""
        planned = plan_stored_keys(rows, embeddings, taken, by_key, open_revisions, results)
        updates = [p for p in planned if p.revision_id is None]
        proposals = [p for p in planned if p.revision_id is not None]
        audits: AuditRows = [
            change_audit_values(
                "update" if p.revision_id is None else "propose",
                p.existing,
                p.new.value,
                actor=actor,
                event_id=event_id,
                revision_id=p.revision_id,
            )
            for p in planned
        ]
        dim = self._schema.embedding_dim
        async with self._connections.round_trip(driver):
            if insert is not None:
                await driver.execute((insert[0]), insert[1])
            if updates:
                update_sql = _UPDATE_PENDING_SQL.format(memories=self._schema.memories.name, dim=dim)
                await driver.execute((update_sql), _update_params(updates, dim))
            if proposals:
                propose_sql = _PROPOSE_SQL.format(revisions=self._schema.revisions.name, dim=dim)
                params = _propose_params(proposals, dim, actor=actor, event_id=event_id)
                await driver.execute((propose_sql), params)
            if audits:
                await driver.execute((audit_insert_sql(self._schema.audit.name)), audit_params(audits))
            if lock_next is not None:
                key_locks = await _send_key_locks(driver, lock_next)
                return locked_rows(*[await cursor.fetchall() for cursor in key_locks])
            if turns:
                turns_sql, turns_params = turns_insert_statement(
                    self._schema.turns.name, event_id, turns, dim
                )
                await driver.execute((turns_sql), turns_params)
            await driver.execute("COMMIT")
        return {}, {}


# stored rows locked by `key_identity`, and their open revisions by memory id
_LockedRows = tuple[dict[tuple[Any, ...], Memory], dict[uuid.UUID, Revision]]


def locked_rows(
    stored_rows: Sequence[Mapping[str, Any]], revision_rows: Sequence[Mapping[str, Any]]
) -> _LockedRows:
    """The rows of `LOCK_BY_KEYS_SQL` by `key_identity`, and of the open revisions' statement by
    memory id."""
    return (
        {key_identity(memory): memory for memory in map(memory_from_row, stored_rows)},
        {revision.memory_id: revision for revision in map(revision_from_row, revision_rows)},
    )


async def _send_read(
    driver: DriverConnection[Any],
    cursor: AsyncCursor[dict[str, Any]],
    sql: str,
    params: Mapping[str, Any],
    *,
    one_plan: bool,
) -> None:
    """Send (in the open pipeline) a read on `cursor`; `one_plan`: planned once per connection (a
    generic plan), the transaction's later statements back to `auto`."""
    if one_plan:
        await driver.execute(GENERIC_PLAN_SQL)
    await cursor.execute(sql, params)
    if one_plan:
        await driver.execute(AUTO_PLAN_SQL)


async def _send_key_locks(
    driver: DriverConnection[Any], identities: Sequence[tuple[Any, ...]]
) -> tuple[AsyncCursor[dict[str, Any]], AsyncCursor[dict[str, Any]]]:
    """Send (in the open pipeline) the locks of the stored rows of these `key_identity` tuples and
    of their open revisions; their cursors, for `_locked_rows` once fetched."""
    keys = key_identity_params(identities)
    stored = driver.cursor(row_factory=dict_row)
    await stored.execute((LOCK_BY_KEYS_SQL), keys)
    revisions = driver.cursor(row_factory=dict_row)
    # planned for its values: the generic plan `auto` settles on after a few hundred events joins
    # every pending revision of the database (a hash join), not the few of these keys
    await driver.execute(CUSTOM_PLAN_SQL)
    await revisions.execute((LOCK_OPEN_REVISIONS_BY_KEYS_SQL), keys)
    await driver.execute(AUTO_PLAN_SQL)
    return stored, revisions


class PlannedWrite(NamedTuple):
    """A stored row's change: `new` over the pending row `existing`, or (with `revision_id`, new
    or of its open revision) proposed for the reviewed row `existing`."""

    existing: Memory
    new: NewMemory
    vector: Sequence[float]
    revision_id: uuid.UUID | None


def plan_stored_keys(
    rows: Sequence[NewMemory],
    embeddings: Sequence[Sequence[float]],
    taken: Sequence[int],
    by_key: Mapping[tuple[Any, ...], Memory],
    open_revisions: Mapping[uuid.UUID, Revision],
    results: dict[int, UpsertResult],
) -> list[PlannedWrite]:
    """`plan_upsert` for each row `taken` (by index, extracted as pending) against its stored row
    (by `key_identity`) and that row's open revision: the changes to write, in order, and each
    row's outcome into `results`."""
    planned: list[PlannedWrite] = []
    for i in taken:
        new = rows[i]
        existing = by_key[key_identity(new)]
        revision = open_revisions.get(existing.id)
        plan = plan_upsert(existing, revision, new)
        if plan.kind == "unchanged":
            results[i] = unchanged_result(existing, revision, new)
        elif plan.kind == "propose":
            revision_id = revision.id if revision is not None else uuid.uuid4()
            planned.append(PlannedWrite(existing, new, embeddings[i], revision_id))
            results[i] = UpsertResult(
                memory_id=existing.id, action="revision_proposed", revision_id=revision_id
            )
        else:  # "update" of a pending row (an extraction is never an explicit write)
            planned.append(PlannedWrite(existing, new, embeddings[i], None))
            results[i] = UpsertResult(memory_id=existing.id, action="updated")
    return planned


def _update_params(updates: Sequence[PlannedWrite], dim: int) -> dict[str, Any]:
    """`_UPDATE_PENDING_SQL`'s parameters."""
    return {
        "ids": [u.existing.id for u in updates],
        "values": [u.new.value for u in updates],
        "confidences": [storable_confidence(u.new.confidence) for u in updates],
        "statuses": [u.new.status for u in updates],
        "channels": [u.new.source_channel_id for u in updates],
        "evidences": [u.new.evidence for u in updates],
        "observed": [u.new.observed_at for u in updates],
        **_stacked_vectors([u.vector for u in updates], dim),
    }


def _propose_params(
    proposals: Sequence[PlannedWrite], dim: int, *, actor: str, event_id: uuid.UUID
) -> dict[str, Any]:
    """`_PROPOSE_SQL`'s parameters."""
    return {
        "ids": [p.revision_id for p in proposals],
        "memory_ids": [p.existing.id for p in proposals],
        "old_values": [p.existing.value for p in proposals],
        "new_values": [p.new.value for p in proposals],
        "confidences": [storable_confidence(p.new.confidence) for p in proposals],
        "channels": [p.new.source_channel_id for p in proposals],
        "evidences": [p.new.evidence for p in proposals],
        "observed": [p.new.observed_at for p in proposals],
        "event_id": event_id,
        "actor": actor,
        **_stacked_vectors([p.vector for p in proposals], dim),
    }


def _stacked_vectors(vectors: Sequence[Sequence[float]], dim: int) -> dict[str, Any]:
    """`embeddings` (the vectors one after another, one `real[]`) and `starts` (where each
    begins, 1-based) for the statements that slice them."""
    return {
        "embeddings": float4_array(itertools.chain.from_iterable(vectors)),
        "starts": [1 + n * dim for n in range(len(vectors))],
    }
