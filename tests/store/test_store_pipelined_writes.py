"""Postgres's pipelined event write (`store.postgres.event_write`): the common event costs two round
trips and nothing through SQLAlchemy (counted by the store's recording connections); it leaves what
the general path leaves; a failed or cancelled write leaves nothing behind and hands its connection
back to the pool outside any transaction."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from extraction.dedup import decide_against_neighbours
from extraction.embeddings import HashingEmbedder
from store.errors import StoreTimeout
from store.model import EventWrite, MemoryFilter, NewMemory
from store.postgres import event_write
from store.postgres import neighbours_sql as neighbours
from store.postgres.connections import AUTO_PLAN_SQL, CUSTOM_PLAN_SQL, GENERIC_PLAN_SQL, SCOPE_SQL
from store.postgres.neighbours_sql import neighbours_statement, owner_lock_key
from store.postgres.params import float4_array
from store.postgres.store import PostgresMemoryStore
from store.postgres.write_sql import LOCK_OPEN_REVISIONS_BY_KEYS_SQL
from tests.store.conftest import truncate
from tests.store.store_testkit import fact, postgres_store, recorded, reopened

DIM = 384


@pytest.fixture
async def store(pg_url: str) -> Any:
    truncate(pg_url)
    opened = postgres_store(pg_url, HashingEmbedder(dim=DIM), pool_size=2, max_overflow=0)
    yield opened
    await opened.close()


async def write(store: PostgresMemoryStore, event: uuid.UUID, *memories: NewMemory) -> EventWrite:
    return await store.writes.write_event(event_id=event, memories=memories, dedup=decide_against_neighbours)


def general_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store as if it had no pipelined write: every event takes the shared path."""
    monkeypatch.setattr(event_write.PgEventWriter, "takes", staticmethod(lambda memories, dedup: False))


async def in_transaction(url: str) -> int:
    """How many sessions of this database are inside a transaction (other than this one)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (
            await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%%'"
            )
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_an_event_of_new_facts_costs_two_round_trips_and_nothing_through_sqlalchemy(
    store: PostgresMemoryStore,
) -> None:
    owner = uuid.uuid4()
    await write(store, uuid.uuid4(), fact(owner, "pet", "Has a cat"))
    await write(store, uuid.uuid4(), fact(owner, "job", "Works as a nurse"))  # its size is cached
    with recorded(store) as traffic:
        written = await write(store, uuid.uuid4(), fact(owner, "city", "Lives in Lyon"))

    assert [r.action for r in written.results] == ["created"]
    # the read, the claim and the locks | the insert and COMMIT: each a pipeline
    assert traffic.round_trips == 2
    assert traffic.through_sqlalchemy == []
    assert traffic.sent and all(s.pipelined for s in traffic.sent)
    stored = await store.listing.get_by_id(written.results[0].memory_id)
    assert stored is not None and (stored.key, stored.value) == ("city", "Lives in Lyon")
    assert [a.action for a in await store.review.audit_log(stored.id)] == ["add"]


@pytest.mark.parametrize("locked", ["seen by the lock", "hidden from the lock"])
async def test_a_stored_key_the_read_missed_is_written_as_the_general_path_writes_it(
    store: PostgresMemoryStore, pg_url: str, monkeypatch: pytest.MonkeyPatch, locked: str
) -> None:
    # an archived memory is not among the near-duplicate read's rows, but its key is taken. The
    # row lock of the event's keys finds it, and the write updates it; a key stored where the lock
    # did not see it (a writer that takes no owner lock) fails the insert, the transaction is
    # rolled back and the write runs again, its lock finding the row this time
    real_locked_rows = event_write.locked_rows
    hide = [False]  # armed for the event's first lock only

    def hiding_once(stored: Any, revisions: Any) -> Any:
        hidden, hide[0] = hide[0], False
        return ({}, {}) if hidden else real_locked_rows(stored, revisions)

    monkeypatch.setattr(event_write, "locked_rows", hiding_once)
    results: dict[str, EventWrite] = {}
    rollbacks = 0
    for path in ("pipelined", "general"):
        owner = uuid.uuid4()
        (old,) = (await write(store, uuid.uuid4(), fact(owner, "city", "Lives in Lyon"))).results
        assert await store.review.reject(old.memory_id, actor="admin") is not None  # archived
        event = uuid.uuid4()
        new = [fact(owner, "city", "Lives in Porto"), fact(owner, "pet", "Has a dog")]
        if path == "general":
            general_path_only(monkeypatch)
        hide[0] = locked == "hidden from the lock"
        with recorded(store) as traffic:
            results[path] = await write(store, event, *new)
        rollbacks += sum(s.sql == "ROLLBACK" for s in traffic.sent)
        assert await store.writes.is_processed(event)
        assert results[path].results[0].memory_id == old.memory_id
        rows = await store.listing.list_memories(MemoryFilter(owner_id=owner, status=None))
        assert sorted((m.key, m.value) for m in rows) == [("city", "Lives in Porto"), ("pet", "Has a dog")]
    assert [(r.action, r.near_duplicate) for r in results["pipelined"].results] == [
        (r.action, r.near_duplicate) for r in results["general"].results
    ]
    assert rollbacks == (1 if locked == "hidden from the lock" else 0)
    assert await in_transaction(pg_url) == 0


async def test_a_processed_event_is_refused_without_writing(store: PostgresMemoryStore, pg_url: str) -> None:
    owner, event = uuid.uuid4(), uuid.uuid4()
    await write(store, event, fact(owner, "city", "Lives in Lyon"))
    again = await write(store, event, fact(owner, "pet", "Has a cat"))
    assert again.duplicate and again.results == ()
    assert [m.key for m in await store.listing.list_memories(MemoryFilter(owner_id=owner))] == ["city"]
    assert await in_transaction(pg_url) == 0


async def test_a_failed_write_rolls_back_claim_and_locks(
    store: PostgresMemoryStore, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, event = uuid.uuid4(), uuid.uuid4()

    def boom(*args: Any) -> Any:
        raise RuntimeError("the dedup rule failed")

    monkeypatch.setattr(event_write, "apply_dedup", boom)
    with pytest.raises(RuntimeError, match="dedup rule failed"):
        await write(store, event, fact(owner, "city", "Lives in Lyon"))
    monkeypatch.undo()

    assert await in_transaction(pg_url) == 0
    assert not await store.writes.is_processed(event)
    # the same event, and the same owner's lock, are free: the retry writes it
    written = await asyncio.wait_for(write(store, event, fact(owner, "city", "Lives in Lyon")), 10)
    assert [r.action for r in written.results] == ["created"]


async def test_a_write_cancelled_while_waiting_for_the_owner_lock_leaves_nothing(
    store: PostgresMemoryStore, pg_url: str
) -> None:
    owner, event = uuid.uuid4(), uuid.uuid4()
    memory = fact(owner, "city", "Lives in Lyon")
    async with await psycopg.AsyncConnection.connect(pg_url) as holder:
        await holder.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [owner_lock_key(memory)]
        )  # another event of this owner is being written
        task = asyncio.create_task(write(store, event, memory))
        await asyncio.sleep(0.5)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        await holder.rollback()

    assert not await store.writes.is_processed(event)
    for _ in range(2):  # both pooled connections are usable
        written = await asyncio.wait_for(write(store, uuid.uuid4(), fact(uuid.uuid4(), "pet", "A dog")), 10)
        assert [r.action for r in written.results] == ["created"]
    written = await asyncio.wait_for(write(store, event, memory), 10)
    assert [r.action for r in written.results] == ["created"]
    assert await in_transaction(pg_url) == 0


@pytest.mark.parametrize("facts_before", [3, 9])
async def test_an_owner_of_unknown_size_is_counted_in_the_same_round_trip_and_read_in_its_shape(
    store: PostgresMemoryStore, monkeypatch: pytest.MonkeyPatch, facts_before: int
) -> None:
    # a large owner's pending rows are ranked within its PENDING_WINDOW most recent ones only: an
    # older restated fact is found for a small owner (exact ranking) and not for a large one
    monkeypatch.setattr(neighbours, "EXACT_OWNER_ROWS", 5)
    monkeypatch.setattr(neighbours, "PENDING_WINDOW", 3)
    owner = uuid.uuid4()
    await write(store, uuid.uuid4(), fact(owner, "city", "Lives in Lyon, France"))
    for i in range(facts_before - 1):
        await write(store, uuid.uuid4(), fact(owner, f"topic {i}", f"Talks about subject number {i} often"))
    worker = reopened(store)  # a worker that has not seen this owner yet
    try:
        with recorded(worker) as first:
            again = await write(worker, uuid.uuid4(), fact(owner, "home city", "Lives in Lyon, France"))
        with recorded(worker) as later:
            await write(worker, uuid.uuid4(), fact(owner, "hometown", "Grew up in Lyon, France"))
    finally:
        await worker.close()

    large = facts_before > neighbours.EXACT_OWNER_ROWS
    assert again.results[0].near_duplicate is not large
    # the owner's count goes in the round trip of the read; a large owner is then read again, alone
    assert any(s.sql.startswith("SELECT 0 AS idx") for s in first.sent)
    assert first.round_trips == 2 + (1 if large else 0)
    # an owner of unknown size is read in the shape of small ones: planned for its values
    assert not any(planned_generic([s.sql for s in first.sent]).values())
    # and remembered: the next event of the owner counts nothing and is read in its shape at once
    assert not any("owner_size" in s.sql or s.sql.startswith("SELECT 0 AS idx") for s in later.sent)
    assert later.round_trips == 2
    assert any("pending_window" in s.sql for s in later.sent) is large


async def test_a_write_past_the_statement_timeout_is_store_timeout_and_leaves_nothing(
    pg_url: str,
) -> None:
    truncate(pg_url)
    store = PostgresMemoryStore(
        pg_url, HashingEmbedder(dim=DIM), pool_size=1, max_overflow=0, statement_timeout_s=0.5
    )
    owner, event = uuid.uuid4(), uuid.uuid4()
    memory = fact(owner, "city", "Lives in Lyon")
    try:
        async with await psycopg.AsyncConnection.connect(pg_url) as holder:
            await holder.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [owner_lock_key(memory)]
            )
            with pytest.raises(StoreTimeout):
                await asyncio.wait_for(write(store, event, memory), 10)
            await holder.rollback()
        assert await in_transaction(pg_url) == 0
        assert not await store.writes.is_processed(event)
        # the one pooled connection is usable: the retry writes the event
        written = await asyncio.wait_for(write(store, event, memory), 10)
        assert [r.action for r in written.results] == ["created"]
    finally:
        await store.close()


async def test_a_connection_that_ends_cleanly_is_kept_for_the_next_use_up_to_half_the_pool(
    pg_url: str,
) -> None:
    truncate(pg_url)
    store = PostgresMemoryStore(pg_url, HashingEmbedder(dim=DIM), pool_size=4, max_overflow=0)
    try:
        await write(store, uuid.uuid4(), fact(uuid.uuid4(), "city", "Lives in Lyon"))
        connections = store.connections
        async with connections.driver() as first:
            pass
        async with connections.driver() as again:
            assert again is first  # kept, not handed back to SQLAlchemy's pool
            async with connections.driver() as second, connections.driver() as third:
                assert len({id(first), id(second), id(third)}) == 3
        # half the pool of 4 stays checked out for the next uses; the third went back to the pool
        assert store.engine.pool.checkedout() == 2  # type: ignore[attr-defined]
    finally:
        await store.close()
    assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_connection_left_in_a_transaction_or_by_an_error_is_not_kept(
    store: PostgresMemoryStore, pg_url: str
) -> None:
    async with store.connections.driver() as driver:
        await driver.execute("BEGIN")
    assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert await in_transaction(pg_url) == 0
    with pytest.raises(RuntimeError, match="boom"):
        async with store.connections.driver():
            raise RuntimeError("boom")
    assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_large_owners_reviewed_rows_are_read_before_its_lock_and_dedup_still_holds(
    store: PostgresMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Persona learning puts every user's events of a persona on the persona's lock: the HNSW read
    of its reviewed rows runs before the lock, in the same round trip. A reviewed fact restated
    under another key is still found, and one fact from two concurrent events is one memory."""
    monkeypatch.setattr(neighbours, "EXACT_OWNER_ROWS", 5)
    owner = uuid.uuid4()
    for i in range(7):
        await write(store, uuid.uuid4(), fact(owner, f"topic {i}", f"Talks about subject number {i} often"))
    city = await write(store, uuid.uuid4(), fact(owner, "city", "Lives in Lyon, France"))
    assert await store.review.approve(city.results[0].memory_id, actor="admin") is not None
    worker = reopened(store)
    try:
        await write(worker, uuid.uuid4(), fact(owner, "pet", "Has a cat"))  # counted: large, and cached
        with recorded(worker) as traffic:
            again = await write(worker, uuid.uuid4(), fact(owner, "home city", "Lives in Lyon, France"))
        both = await asyncio.gather(
            write(worker, uuid.uuid4(), fact(owner, "employer", "Works at Acmecorp in Lyon")),
            write(worker, uuid.uuid4(), fact(owner, "workplace", "Works at Acmecorp in Lyon")),
        )
    finally:
        await worker.close()
    sent = [s.sql for s in traffic.sent]

    assert again.results[0].near_duplicate and again.results[0].memory_id == city.results[0].memory_id
    assert sorted(r.results[0].near_duplicate for r in both) == [False, True]
    # BEGIN, the HNSW read of active rows (a shorter candidate list), then the claim that takes
    # the locks, then the rest
    assert sent[:3] == ["BEGIN", SCOPE_SQL, event_write.DEDUP_EF_SEARCH]
    assert "m.status = 'active'" in sent[3] and "pending_window" not in sent[3]
    assert sent[4].startswith("WITH claim") and "pending_window" in sent[6]
    # the read under the locks planned once per connection; the HNSW read's plan stays its
    # values' (the owner's size picks HNSW), and the rest is left to `auto`
    modes = planned_generic(sent)
    assert [n for n, generic in modes.items() if generic] == [6]


def planned_generic(sent: list[str]) -> dict[int, bool]:
    """For each statement sent after the transaction's start that reads or writes memories, by
    position, whether the plan mode in force for it is a generic plan."""
    generic = False
    modes: dict[int, bool] = {}
    for n, sql in enumerate(sent):
        if sql in (GENERIC_PLAN_SQL, AUTO_PLAN_SQL, CUSTOM_PLAN_SQL):
            generic = sql == GENERIC_PLAN_SQL
        elif sql not in ("BEGIN", "COMMIT", SCOPE_SQL, event_write.DEDUP_EF_SEARCH) and not sql.startswith(
            "WITH claim"
        ):
            modes[n] = generic
    return modes


async def test_the_locked_read_of_a_large_owner_finds_a_row_approved_after_the_hnsw_read(
    store: PostgresMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review that makes a row active between the HNSW read (outside the lock) and the locked
    read would hide it from both without the locked read's recently-active rows."""
    monkeypatch.setattr(neighbours, "EXACT_OWNER_ROWS", 5)
    owner = uuid.uuid4()
    for i in range(7):
        await write(store, uuid.uuid4(), fact(owner, f"topic {i}", f"Talks about subject number {i} often"))
    city = await write(store, uuid.uuid4(), fact(owner, "city", "Lives in Lyon, France"))
    restated = fact(owner, "home city", "Lives in Lyon, France")
    vectors = [float4_array(restated.embedding or [])]
    sizes = {neighbours.owner_key(restated): 8}
    locked_sql, locked_params = neighbours_statement([restated], vectors, 8, sizes, "locked", dim=DIM)
    assert (
        await store.review.approve(city.results[0].memory_id, actor="admin") is not None
    )  # "after" the HNSW read
    found = {row["id"] for row in await store.connections.fetch(locked_sql, locked_params)}
    assert city.results[0].memory_id in found


async def stored_keys_scene(store: PostgresMemoryStore, owner: uuid.UUID) -> None:
    """An owner with a pending `city`, a reviewed `pet`, a reviewed `job` with an open revision
    and a pending `hobby`."""
    first = await write(
        store,
        uuid.uuid4(),
        fact(owner, "city", "Lives in Lyon"),
        fact(owner, "pet", "Has a cat named Tom"),
        fact(owner, "job", "Works as a nurse"),
        fact(owner, "hobby", "Plays the violin"),
    )
    for result in first.results[1:3]:
        assert await store.review.approve(result.memory_id, actor="admin") is not None
    proposed = await write(store, uuid.uuid4(), fact(owner, "job", "Works as a surgeon"))
    assert [r.action for r in proposed.results] == ["revision_proposed"]


STORED_KEYS_EVENT = (
    ("city", "Moved to Porto last spring"),  # pending: updated
    ("pet", "Adopted a parrot called Kiwi"),  # reviewed: a revision proposed
    ("job", "Teaches chemistry at a school"),  # reviewed, revision open: the revision replaced
    ("hobby", "Plays the violin"),  # unchanged
    ("food", "Eats no meat at all"),  # a new key
)
# the same with keys given twice: each second occurrence must see what its first one wrote
REPEATED_KEYS_EVENT = (
    *STORED_KEYS_EVENT,
    ("city", "Moved on to Braga this winter"),
    ("food", "Eats no meat and no fish"),
    ("pet", "Adopted a second parrot, Lima"),
)


async def test_an_event_over_stored_keys_costs_two_round_trips_and_nothing_through_sqlalchemy(
    store: PostgresMemoryStore,
) -> None:
    owner = uuid.uuid4()
    await stored_keys_scene(store, owner)
    with recorded(store) as traffic:
        written = await write(store, uuid.uuid4(), *(fact(owner, k, v) for k, v in STORED_KEYS_EVENT))

    assert [r.action for r in written.results] == [
        "updated",
        "revision_proposed",
        "revision_proposed",
        "unchanged",
        "created",
    ]
    # BEGIN, the claim with the locks, the read, the stored rows of the keys and their revisions |
    # the insert, the update, the proposals, their audit rows and COMMIT: one statement per kind of
    # change, whatever the number of memories
    assert traffic.round_trips == 2
    assert traffic.through_sqlalchemy == []
    assert all(s.pipelined for s in traffic.sent)
    # BEGIN, the team scope, the reads and writes, the revisions' lock in a plan of its values, COMMIT
    assert len(traffic.sent) == 13
    revisions_lock = [n for n, s in enumerate(traffic.sent) if s.sql == LOCK_OPEN_REVISIONS_BY_KEYS_SQL]
    assert revisions_lock and all(traffic.sent[n - 1].sql == CUSTOM_PLAN_SQL for n in revisions_lock)


def stored_embeddings(url: str, owner: uuid.UUID) -> list[tuple[str, str, str | None]]:
    """Per memory of the owner: its key, its embedding and its open revision's, as text."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT m.key, m.embedding::text, r.embedding::text FROM memories m "
            "LEFT JOIN memory_revisions r ON r.memory_id = m.id AND r.status = 'pending' "
            "WHERE m.owner_id = %s ORDER BY m.key",
            (owner,),
        ).fetchall()
    return [(key, vector, proposed) for key, vector, proposed in rows]


@pytest.mark.parametrize(("facts", "pipelines"), [(STORED_KEYS_EVENT, 2), (REPEATED_KEYS_EVENT, 3)])
async def test_an_event_over_stored_keys_leaves_what_the_general_path_leaves(
    store: PostgresMemoryStore,
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
    facts: tuple[tuple[str, str], ...],
    pipelines: int,
) -> None:
    # a key given twice costs one pipelined round more, and nothing goes through SQLAlchemy
    left: dict[str, Any] = {}
    for path in ("pipelined", "general"):
        owner = uuid.uuid4()
        await stored_keys_scene(store, owner)
        if path == "general":
            general_path_only(monkeypatch)
        event = uuid.uuid4()
        with recorded(store) as traffic:
            written = await write(store, event, *(fact(owner, k, v) for k, v in facts))
        if path == "pipelined":
            assert (traffic.round_trips, traffic.through_sqlalchemy) == (pipelines, [])
        assert await store.writes.is_processed(event)
        memories = sorted(
            await store.listing.list_memories(MemoryFilter(owner_id=owner, status=None)), key=lambda m: m.key
        )
        revisions = {r.memory_id: r for r in await store.review.pending_revisions()}
        left[path] = {
            "results": [(r.action, r.revision_id is not None, r.near_duplicate) for r in written.results],
            "memories": [
                (
                    m.key,
                    m.value,
                    m.status,
                    m.confidence,
                    revisions[m.id].new_value if m.id in revisions else None,
                )
                for m in memories
            ],
            "audit": [
                [
                    (
                        a.action,
                        a.old_value,
                        a.new_value,
                        a.actor,
                        a.event_id == event,
                        a.revision_id is not None,
                    )
                    for a in await store.review.audit_log(m.id)
                ]
                for m in memories
            ],
            "embeddings": stored_embeddings(pg_url, owner),
            "proposals of the event": sorted(
                (r.new_value, r.old_value, r.source_event_id == event)
                for r in revisions.values()
                if r.memory_id in {m.id for m in memories}
            ),
        }
    assert left["pipelined"] == left["general"]
    if facts is REPEATED_KEYS_EVENT:
        assert [r[0] for r in left["pipelined"]["results"]][5:] == ["updated", "updated", "revision_proposed"]
        return
    assert [
        (key, value, status, proposed) for key, value, status, _, proposed in left["pipelined"]["memories"]
    ] == [
        ("city", "Moved to Porto last spring", "pending_review", None),
        ("food", "Eats no meat at all", "pending_review", None),
        ("hobby", "Plays the violin", "pending_review", None),
        ("job", "Works as a nurse", "active", "Teaches chemistry at a school"),
        ("pet", "Has a cat named Tom", "active", "Adopted a parrot called Kiwi"),
    ]
    assert await in_transaction(pg_url) == 0


@pytest.mark.parametrize("hidden", [1, 2])
async def test_a_stored_row_the_lock_did_not_find_is_locked_again_or_the_write_retried(
    store: PostgresMemoryStore, pg_url: str, monkeypatch: pytest.MonkeyPatch, hidden: int
) -> None:
    # the lock with the read finds no row where the read saw one (deleted in between): the row
    # is locked again; found then, it is written; gone still, the whole write is retried
    owner = uuid.uuid4()
    (stored,) = (await write(store, uuid.uuid4(), fact(owner, "city", "Lives in Lyon"))).results
    real_locked_rows = event_write.locked_rows
    calls = 0

    def hiding(stored_rows: Any, revision_rows: Any) -> Any:
        nonlocal calls
        calls += 1
        return ({}, {}) if calls <= hidden else real_locked_rows(stored_rows, revision_rows)

    monkeypatch.setattr(event_write, "locked_rows", hiding)
    retries = store.writes.conflict_retries
    written = await write(store, uuid.uuid4(), fact(owner, "city", "Moved to Porto last spring"))

    assert [(r.action, r.memory_id) for r in written.results] == [("updated", stored.memory_id)]
    assert store.writes.conflict_retries == retries + (hidden - 1)
    assert calls == hidden + 1
    rows = await store.listing.list_memories(MemoryFilter(owner_id=owner, status=None))
    assert [(m.key, m.value) for m in rows] == [("city", "Moved to Porto last spring")]
    assert await in_transaction(pg_url) == 0
