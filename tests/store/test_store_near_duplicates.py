"""Near-duplicate detection in the database (both backends): inside `write_event`, under a lock
per owner, each new memory meets its nearest stored neighbours; the same fact from two concurrent
events of one owner ends as one memory; team boundaries hold; the prompt's keys are the relevant
few of a large owner."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest

from extraction.dedup import decide_against_neighbours
from store.model import NIL_UUID, Neighbour, OwnerRef
from store.postgres import neighbours_sql as neighbours
from store.postgres.store import PostgresMemoryStore
from tests.store.store_testkit import Store, fact, recorded, reopened


async def keys(store: Store, owner: uuid.UUID) -> list[str]:
    rows = await store.listing.prompt_memories(
        [OwnerRef(scope="user", owner_id=owner)], team_id=None, words=[], limit=100
    )
    return sorted(m.key for m in rows)


async def test_a_restated_fact_under_another_key_is_not_written(store: Store) -> None:
    owner = uuid.uuid4()
    first = await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[fact(owner, "city", "Lives in Lyon, France")],
        dedup=decide_against_neighbours,
    )
    again = await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[fact(owner, "home city", "Lives in Lyon, France"), fact(owner, "pet", "Has a cat")],
        dedup=decide_against_neighbours,
    )
    assert again.results[0].near_duplicate and again.results[0].memory_id == first.results[0].memory_id
    assert not again.results[1].near_duplicate
    assert await keys(store, owner) == ["city", "pet"]


async def test_the_same_key_is_an_update_not_a_duplicate(store: Store) -> None:
    owner = uuid.uuid4()
    rule = decide_against_neighbours
    await store.writes.write_event(
        event_id=uuid.uuid4(), memories=[fact(owner, "city", "Lives in Lyon")], dedup=rule
    )
    moved = await store.writes.write_event(
        event_id=uuid.uuid4(), memories=[fact(owner, "city", "Lives in Oslo")], dedup=rule
    )
    assert not moved.results[0].near_duplicate and moved.results[0].action == "updated"


async def test_near_duplicates_respect_team_boundaries(store: Store) -> None:
    owner, team_a, team_b = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[fact(owner, "city", "Lives in Lyon, France", team=team_a)],
        dedup=decide_against_neighbours,
    )
    other_team = await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[fact(owner, "home city", "Lives in Lyon, France", team=team_b)],
        dedup=decide_against_neighbours,
    )
    same_team = await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[fact(owner, "hometown city", "Lives in Lyon, France", team=team_a)],
        dedup=decide_against_neighbours,
    )
    assert not other_team.results[0].near_duplicate  # team A's memory is not team B's business
    assert same_team.results[0].near_duplicate


async def test_the_same_fact_from_two_concurrent_events_is_one_memory(store: Store) -> None:
    for _ in range(5):
        owner = uuid.uuid4()
        results = await asyncio.gather(
            store.writes.write_event(
                event_id=uuid.uuid4(),
                memories=[fact(owner, "city", "Lives in Lyon, France")],
                dedup=decide_against_neighbours,
            ),
            store.writes.write_event(
                event_id=uuid.uuid4(),
                memories=[fact(owner, "home city", "Lives in Lyon, France")],
                dedup=decide_against_neighbours,
            ),
        )
        assert len(await keys(store, owner)) == 1
        assert sum(r.results[0].near_duplicate for r in results) == 1


async def test_prompt_memories_are_the_relevant_few_of_a_large_owner(store: Store, backend: str) -> None:
    owner = uuid.uuid4()
    filler = [fact(owner, f"topic {i}", f"Mentioned subject number {i}") for i in range(300)]
    await store.writes.write_event(event_id=uuid.uuid4(), memories=filler)
    await store.writes.write_event(
        event_id=uuid.uuid4(), memories=[fact(owner, "employer", "Works at Acmecorp")]
    )
    found = await store.listing.prompt_memories(
        [OwnerRef(scope="user", owner_id=owner)], team_id=None, words=["acmecorp", "works"], limit=10
    )
    assert len(found) <= 10
    if backend == "postgres":
        assert found[0].key == "employer"


async def test_one_event_mixing_new_and_stored_keys_writes_each_by_its_rule(store: Store) -> None:
    """New keys are inserted together and stored keys are locked together (the batched paths):
    each memory still gets its own outcome, in the input order, with its audit row."""
    owner = uuid.uuid4()
    rule = decide_against_neighbours
    first = await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[
            fact(owner, "city", "Lives in Lyon"),
            fact(owner, "pet", "Has a cat named Tom"),
            fact(owner, "job", "Works as a nurse"),
        ],
        dedup=rule,
    )
    job_id = first.results[2].memory_id
    assert (
        await store.review.approve(job_id, actor="admin") is not None
    )  # reviewed: a change becomes a revision
    event = uuid.uuid4()
    mixed = await store.writes.write_event(
        event_id=event,
        memories=[
            fact(owner, "diet", "Is vegetarian"),  # new
            fact(owner, "city", "Lives in Oslo"),  # stored, pending: updated in place
            fact(owner, "pet", "Has a cat named Tom"),  # stored, same value: unchanged
            fact(owner, "job", "Works as a teacher"),  # stored, active: a pending revision
            fact(owner, "instrument", "Plays the cello"),  # new
        ],
        dedup=rule,
    )
    assert [r.action for r in mixed.results] == [
        "created",
        "updated",
        "unchanged",
        "revision_proposed",
        "created",
    ]
    assert mixed.results[1].memory_id == first.results[0].memory_id
    assert mixed.results[3].memory_id == job_id and mixed.results[3].revision_id is not None
    assert await keys(store, owner) == ["city", "diet", "instrument", "job", "pet"]
    written = {(w.key, w.action) for w in await store.writes.event_writes(event)}
    assert written == {
        ("diet", "created"),
        ("city", "updated"),
        ("job", "revision_proposed"),
        ("instrument", "created"),
    }


@pytest.mark.parametrize("stored", ["pending_review", "active"])
async def test_an_owner_past_the_exact_limit_still_finds_its_restated_fact(
    store: Store, backend: str, monkeypatch: pytest.MonkeyPatch, stored: str
) -> None:
    """Postgres ranks a large owner's reviewed rows through HNSW and its most recent pending rows
    exactly, instead of all its rows exactly; the outcome is the same."""
    monkeypatch.setattr(neighbours, "EXACT_OWNER_ROWS", 5)
    monkeypatch.setattr(neighbours, "PENDING_WINDOW", 3)  # the restated fact is the most recent
    owner = uuid.uuid4()
    facts = [fact(owner, f"topic {i}", f"Talks about subject number {i} often") for i in range(9)]
    await store.writes.write_event(event_id=uuid.uuid4(), memories=facts, dedup=decide_against_neighbours)
    city = fact(owner, "city", "Lives in Lyon, France")
    if stored == "active":
        await store.writes.upsert(dataclasses.replace(city, status="active"))
    else:
        await store.writes.write_event(
            event_id=uuid.uuid4(), memories=[city], dedup=decide_against_neighbours
        )
    # a worker that has not counted this owner yet counts it again: past the exact limit now
    writer = reopened(store) if isinstance(store, PostgresMemoryStore) else store
    try:
        with recorded(writer) as traffic:
            again = await writer.writes.write_event(
                event_id=uuid.uuid4(),
                memories=[fact(owner, "home city", "Lives in Lyon, France")],
                dedup=decide_against_neighbours,
            )
    finally:
        if writer is not store:
            await writer.close()
    assert again.results[0].near_duplicate
    if backend == "postgres":  # the large-owner read ran: HNSW over active rows + the pending window
        assert any("pending_window" in s and "m.status = 'active'" in s for s in traffic.statements)


async def test_a_large_owners_event_finds_each_of_its_restated_pending_facts(
    store: Store, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several new memories of one large owner rank its pending window from one read of it (a
    MATERIALIZED CTE on Postgres): each still finds its own restated fact."""
    monkeypatch.setattr(neighbours, "EXACT_OWNER_ROWS", 5)
    monkeypatch.setattr(neighbours, "PENDING_WINDOW", 4)  # the two restated facts are the most recent
    owner = uuid.uuid4()
    facts = [fact(owner, f"topic {i}", f"Talks about subject number {i} often") for i in range(8)]
    await store.writes.write_event(event_id=uuid.uuid4(), memories=facts, dedup=decide_against_neighbours)
    stored = [fact(owner, "city", "Lives in Lyon, France"), fact(owner, "pet", "Has a grey cat named Tom")]
    first = await store.writes.write_event(
        event_id=uuid.uuid4(), memories=stored, dedup=decide_against_neighbours
    )
    writer = reopened(store) if isinstance(store, PostgresMemoryStore) else store
    try:
        with recorded(writer) as traffic:
            again = await writer.writes.write_event(
                event_id=uuid.uuid4(),
                memories=[
                    fact(owner, "home city", "Lives in Lyon, France"),
                    fact(owner, "cat", "Has a grey cat named Tom"),
                ],
                dedup=decide_against_neighbours,
            )
    finally:
        if writer is not store:
            await writer.close()
    assert [r.near_duplicate for r in again.results] == [True, True]
    assert [r.memory_id for r in again.results] == [r.memory_id for r in first.results]
    if backend == "postgres":  # the large owner's pending window, read once for both
        shared = [s for s in traffic.statements if "pending_window" in s and "AS MATERIALIZED" in s]
        assert shared, traffic.statements


def test_owner_sizes_are_capped_and_forgotten_after_their_ttl() -> None:
    now = [0.0]
    sizes = neighbours.OwnerSizes(cap=101, ttl_s=60.0, max_entries=2, clock=lambda: now[0])
    a, b, c = (("user", uuid.uuid4(), NIL_UUID) for _ in range(3))
    sizes.put(a, 5000)
    assert sizes.get(a) == 101  # only "more than the exact limit" matters
    now[0] = 59.0
    assert sizes.get(a) == 101
    now[0] = 60.0
    assert sizes.get(a) is None  # expired: counted again
    sizes.put(a, 1)
    sizes.put(b, 2)
    sizes.put(c, 3)  # full: everything forgotten, then c remembered
    assert (sizes.get(a), sizes.get(b), sizes.get(c)) == (None, None, 3)


async def test_several_new_memories_of_one_owner_each_meet_their_own_nearest(
    store: Store, backend: str
) -> None:
    """Postgres reads a small owner's rows once for all of an event's new memories of that owner
    (and team context); each still gets exactly the k nearest it would get alone."""
    owner, team = uuid.uuid4(), uuid.uuid4()
    stored = [fact(owner, f"topic {i}", f"Talks about subject number {i} on weekdays") for i in range(12)]
    stored += [fact(owner, f"team topic {i}", f"Team subject number {i}", team=team) for i in range(4)]
    await store.writes.write_event(event_id=uuid.uuid4(), memories=stored)
    new = [
        fact(owner, "topic 3", "Talks about subject number 3 at weekends"),
        fact(owner, "hobby", "Talks about subject number 7 on weekdays"),
        fact(owner, "team hobby", "Team subject number 2", team=team),
        fact(owner, "sport", "Plays tennis on weekdays"),
    ]
    vectors = [list(m.embedding or []) for m in new]
    with recorded(store) as traffic:
        async with store.backend.transaction() as conn:
            together = await store.backend.neighbours(conn, new, vectors, 3)
    async with store.backend.transaction() as conn:
        alone = [
            (await store.backend.neighbours(conn, [m], [v], 3))[0] for m, v in zip(new, vectors, strict=True)
        ]

    def found(neighbours: list[Neighbour]) -> list[tuple[str, float]]:
        return [(n.memory.key, round(n.similarity, 5)) for n in neighbours]

    assert [found(n) for n in together] == [found(n) for n in alone]
    assert [n.memory.key for n in together[0]][:1] == ["topic 3"]  # the same key comes first
    assert "team topic 2" in {n.memory.key for n in together[2]}  # the team's rows for the team's memory
    assert not {n.memory.key for n in together[1]} & {f"team topic {i}" for i in range(4)}
    if backend == "postgres":  # three of one owner and team context: one shared read
        assert sum(s.count("AS MATERIALIZED (SELECT m.id") for s in traffic.statements) == 1
