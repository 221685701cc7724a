"""The store contract, run against Postgres and SQLite alike."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from extraction.dedup import decide_against_neighbours
from store.model import MemoryFilter, NewMemory, OwnerRef
from tests.store.store_testkit import ConceptEmbedder, MakeStore, Store, mem, recorded


def new_id() -> uuid.UUID:
    return uuid.uuid4()


async def actions(store: Store, memory_id: uuid.UUID) -> list[str]:
    return [entry.action for entry in await store.review.audit_log(memory_id)]


# -- one row per (scope, owner, user, key) ----------------------------------------------------------


async def test_upsert_creates_a_row_with_the_seed_columns(store: Store) -> None:
    user, channel = new_id(), new_id()
    result = await store.writes.upsert(
        mem(
            owner=user,
            key="diet",
            value="Is vegetarian",
            status="pending_review",
            confidence=0.8,
            channel=channel,
        )
    )
    assert result.action == "created"
    memory = await store.listing.get_by_id(result.memory_id)
    assert memory is not None
    assert (memory.scope, memory.owner_id, memory.user_id) == ("user", user, None)
    assert (memory.key, memory.value, memory.status) == ("diet", "Is vegetarian", "pending_review")
    assert memory.source_channel_id == channel
    assert memory.confidence == 0.8  # read back exactly, although REAL stores 0.80000001
    assert memory.created_at.tzinfo is not None and memory.updated_at >= memory.created_at


async def test_same_scope_owner_user_key_is_one_row(store: Store) -> None:
    user = new_id()
    first = await store.writes.upsert(
        mem(owner=user, key="diet", value="Is vegetarian", status="pending_review")
    )
    second = await store.writes.upsert(mem(owner=user, key="diet", value="Is vegan", status="pending_review"))
    assert second.memory_id == first.memory_id and second.action == "updated"
    assert await store.listing.count_by_owner("user", user) == 1
    memory = await store.listing.get_by_id(first.memory_id)
    assert memory is not None and memory.value == "Is vegan"


async def test_same_key_in_other_scopes_owners_or_users_is_another_row(store: Store) -> None:
    user, other_user, persona = new_id(), new_id(), new_id()
    ids = {
        (await store.writes.upsert(m)).memory_id
        for m in (
            mem(owner=user, key="diet", value="a"),
            mem(owner=other_user, key="diet", value="b"),
            mem(scope="persona", owner=persona, key="diet", value="c"),
            mem(scope="persona_user", owner=persona, user=user, key="diet", value="d"),
            mem(scope="persona_user", owner=persona, user=other_user, key="diet", value="e"),
        )
    }
    assert len(ids) == 5


async def test_upsert_of_the_same_value_is_unchanged_and_not_audited(store: Store) -> None:
    user = new_id()
    first = await store.writes.upsert(
        mem(owner=user, key="diet", value="Is vegetarian", status="pending_review")
    )
    again = await store.writes.upsert(
        mem(owner=user, key="diet", value="  Is   vegetarian ", status="pending_review")
    )
    assert again.action == "unchanged" and again.memory_id == first.memory_id
    assert await actions(store, first.memory_id) == ["add"]


async def test_invalid_memories_are_refused_with_the_reason(store: Store) -> None:
    with pytest.raises(ValueError, match="needs user_id"):
        await store.writes.upsert(
            NewMemory(scope="persona_user", owner_id=new_id(), user_id=None, key="k", value="v")
        )
    with pytest.raises(ValueError, match="must not carry user_id"):
        await store.writes.upsert(
            NewMemory(scope="user", owner_id=new_id(), user_id=new_id(), key="k", value="v")
        )
    with pytest.raises(ValueError, match="confidence"):
        await store.writes.upsert(
            NewMemory(scope="user", owner_id=new_id(), user_id=None, key="k", value="v", confidence=2)
        )


# -- reviewed memories are never overwritten by extraction ------------------------------------------


async def test_extraction_never_overwrites_an_active_memory_it_proposes_a_revision(store: Store) -> None:
    user = new_id()
    saved = await store.writes.upsert(mem(owner=user, key="diet", value="Is vegetarian", status="active"))
    proposal = await store.writes.upsert(
        mem(owner=user, key="diet", value="Is vegan", status="pending_review", confidence=0.7),
        event_id=(event := new_id()),
    )
    assert proposal.action == "revision_proposed" and proposal.revision_id is not None
    memory = await store.listing.get_by_id(saved.memory_id)
    assert memory is not None and (memory.value, memory.status) == ("Is vegetarian", "active")
    (revision,) = await store.review.pending_revisions(saved.memory_id)
    assert (revision.old_value, revision.new_value, revision.status) == (
        "Is vegetarian",
        "Is vegan",
        "pending",
    )
    assert revision.source_event_id == event and revision.confidence == pytest.approx(0.7)


async def test_extraction_of_the_active_value_again_is_unchanged(store: Store) -> None:
    user = new_id()
    saved = await store.writes.upsert(mem(owner=user, key="diet", value="Is vegetarian", status="active"))
    again = await store.writes.upsert(
        mem(owner=user, key="diet", value="Is vegetarian", status="pending_review")
    )
    assert again.action == "unchanged"
    assert await store.review.pending_revisions(saved.memory_id) == []


async def test_a_newer_proposal_replaces_the_open_one(store: Store) -> None:
    user = new_id()
    saved = await store.writes.upsert(mem(owner=user, key="diet", value="Is vegetarian", status="active"))
    first = await store.writes.upsert(mem(owner=user, key="diet", value="Is vegan", status="pending_review"))
    second = await store.writes.upsert(
        mem(owner=user, key="diet", value="Eats fish", status="pending_review")
    )
    repeat = await store.writes.upsert(
        mem(owner=user, key="diet", value="Eats fish", status="pending_review")
    )
    assert second.revision_id == first.revision_id
    assert repeat.action == "unchanged" and repeat.revision_id == first.revision_id
    (revision,) = await store.review.pending_revisions(saved.memory_id)
    assert revision.new_value == "Eats fish"


async def test_approve_applies_the_pending_revision(store: Store) -> None:
    user = new_id()
    saved = await store.writes.upsert(mem(owner=user, key="diet", value="Is vegetarian", status="active"))
    await store.writes.upsert(
        mem(owner=user, key="diet", value="Is vegan", status="pending_review", confidence=0.6)
    )
    approved = await store.review.approve(saved.memory_id, actor="admin:ana")
    assert approved is not None
    assert (approved.value, approved.status) == ("Is vegan", "active")
    assert approved.confidence == pytest.approx(0.6)
    assert await store.review.pending_revisions(saved.memory_id) == []
    log = await store.review.audit_log(saved.memory_id)
    assert [e.action for e in log] == ["add", "propose", "approve"]
    assert (log[-1].old_value, log[-1].new_value, log[-1].actor) == ("Is vegetarian", "Is vegan", "admin:ana")


async def test_approved_revision_is_found_by_its_new_wording(store: Store) -> None:
    user = new_id()
    saved = await store.writes.upsert(mem(owner=user, key="hobby", value="Plays chess", status="active"))
    # closer to the query than the old wording, farther than the new one
    await store.writes.upsert(mem(owner=user, key="music", value="Listens to records"))
    await store.writes.upsert(
        mem(owner=user, key="hobby", value="Collects vinyl records", status="pending_review")
    )
    await store.review.approve(saved.memory_id, actor="admin")
    hits = await store.recall(user, None, "vinyl records", retriever="vector")
    assert hits[0].memory.id == saved.memory_id


async def test_approving_a_revision_stored_without_embedding_embeds_it(store: Store) -> None:
    user = new_id()
    saved = await store.writes.upsert(mem(owner=user, key="hobby", value="Plays chess", status="active"))
    await store.writes.upsert(mem(owner=user, key="music", value="Listens to records"))
    await store.writes.upsert(
        mem(owner=user, key="hobby", value="Collects vinyl records", status="pending_review")
    )
    revisions = store._schema.revisions
    async with store.engine.begin() as conn:  # as another writer (e.g. the platform) might leave it
        await conn.execute(revisions.update().values(embedding=None))
    approved = await store.review.approve(saved.memory_id, actor="admin")
    assert approved is not None and approved.value == "Collects vinyl records"
    hits = await store.recall(user, None, "vinyl records", retriever="vector")
    assert hits[0].memory.id == saved.memory_id


async def test_reject_discards_the_pending_revision(store: Store) -> None:
    user = new_id()
    saved = await store.writes.upsert(mem(owner=user, key="diet", value="Is vegetarian", status="active"))
    await store.writes.upsert(mem(owner=user, key="diet", value="Is vegan", status="pending_review"))
    kept = await store.review.reject(saved.memory_id, actor="admin")
    assert kept is not None and (kept.value, kept.status) == ("Is vegetarian", "active")
    assert await store.review.pending_revisions() == []
    assert await actions(store, saved.memory_id) == ["add", "propose", "reject"]


async def test_explicit_save_updates_an_active_memory_and_closes_its_proposal(store: Store) -> None:
    user = new_id()
    saved = await store.writes.upsert(mem(owner=user, key="diet", value="Is vegetarian", status="active"))
    await store.writes.upsert(mem(owner=user, key="diet", value="Is vegan", status="pending_review"))
    explicit = await store.writes.upsert(
        mem(owner=user, key="diet", value="Eats everything", status="active")
    )
    assert explicit.action == "updated"
    memory = await store.listing.get_by_id(saved.memory_id)
    assert memory is not None and memory.value == "Eats everything"
    assert await store.review.pending_revisions(saved.memory_id) == []
    # the stale proposal can no longer overwrite what the person said
    assert await store.review.approve(saved.memory_id, actor="admin") is None


async def test_approve_activates_and_reject_archives_a_pending_memory(store: Store) -> None:
    user = new_id()
    a = await store.writes.upsert(mem(owner=user, key="pet", value="Has a cat", status="pending_review"))
    b = await store.writes.upsert(
        mem(owner=user, key="city", value="Lives in Porto", status="pending_review")
    )
    approved = await store.review.approve(a.memory_id, actor="admin")
    rejected = await store.review.reject(b.memory_id, actor="admin")
    assert approved is not None and approved.status == "active"
    assert rejected is not None and rejected.status == "archived"
    assert await actions(store, a.memory_id) == ["add", "approve"]
    assert await actions(store, b.memory_id) == ["add", "reject"]


async def test_a_rejected_value_is_not_proposed_again_but_a_new_value_is(store: Store) -> None:
    user = new_id()
    first = await store.writes.upsert(
        mem(owner=user, key="city", value="Lives in Porto", status="pending_review")
    )
    await store.review.reject(first.memory_id, actor="admin")
    same = await store.writes.upsert(
        mem(owner=user, key="city", value="Lives in Porto", status="pending_review")
    )
    assert same.action == "unchanged"
    memory = await store.listing.get_by_id(first.memory_id)
    assert memory is not None and memory.status == "archived"
    other = await store.writes.upsert(
        mem(owner=user, key="city", value="Lives in Lisbon", status="pending_review")
    )
    assert other.action == "updated"
    memory = await store.listing.get_by_id(first.memory_id)
    assert memory is not None and (memory.status, memory.value) == ("pending_review", "Lives in Lisbon")


async def test_review_of_missing_or_settled_memories_returns_none(store: Store) -> None:
    user = new_id()
    active = await store.writes.upsert(mem(owner=user, key="pet", value="Has a cat", status="active"))
    assert await store.review.approve(active.memory_id, actor="admin") is None
    assert await store.review.reject(active.memory_id, actor="admin") is None
    assert await store.review.approve(new_id(), actor="admin") is None
    assert await store.review.edit(new_id(), "x", actor="admin") is None
    assert await actions(store, active.memory_id) == ["add"]


async def test_edit_sets_the_value_reembeds_and_audits(store: Store) -> None:
    user = new_id()
    saved = await store.writes.upsert(mem(owner=user, key="hobby", value="Plays chess", status="active"))
    await store.writes.upsert(mem(owner=user, key="garage", value="Keeps old bicycles"))
    edited = await store.review.edit(saved.memory_id, "Restores old motorcycles", actor="user:me")
    assert edited is not None and (edited.value, edited.status) == ("Restores old motorcycles", "active")
    log = await store.review.audit_log(saved.memory_id)
    assert (log[-1].action, log[-1].old_value, log[-1].new_value) == (
        "edit",
        "Plays chess",
        "Restores old motorcycles",
    )
    hits = await store.recall(user, None, "old motorcycles", retriever="vector")
    assert hits[0].memory.id == saved.memory_id
    with pytest.raises(ValueError, match="empty"):
        await store.review.edit(saved.memory_id, "  ", actor="user:me")


async def test_archive_hides_from_recall_and_delete_leaves_a_content_free_trail(store: Store) -> None:
    user = new_id()
    a = await store.writes.upsert(mem(owner=user, key="pet", value="Has a cat"))
    b = await store.writes.upsert(mem(owner=user, key="city", value="Lives in Porto"))
    assert await store.erasure.archive(a.memory_id, actor="user:me") is True
    assert await store.erasure.delete(b.memory_id, actor="user:me") is True
    assert await store.erasure.delete(b.memory_id, actor="user:me") is False
    assert await store.erasure.archive(new_id()) is False
    assert await store.recall(user, None, "") == []
    archived = await store.listing.get_by_id(a.memory_id)
    assert archived is not None and archived.status == "archived"
    assert await store.listing.get_by_id(b.memory_id) is None
    log = await store.review.audit_log(b.memory_id)
    # delete is an erasure: the trail says what happened and who did it, never what the memory said
    assert [(e.action, e.actor) for e in log] == [("add", "system"), ("erase", "user:me")]
    assert all(e.key is None and e.old_value is None and e.new_value is None for e in log)
    assert await actions(store, a.memory_id) == ["add", "archive"]


# -- events: one transaction, idempotent --------------------------------------------------------


async def test_write_event_writes_everything_and_marks_the_event(store: Store) -> None:
    user, event = new_id(), new_id()
    batch = [mem(owner=user, key=f"fact {i}", value=f"value {i}", status="pending_review") for i in range(3)]
    assert await store.writes.is_processed(event) is False
    written = await store.writes.write_event(event_id=event, memories=batch)
    assert written.duplicate is False
    assert [r.action for r in written.results] == ["created"] * 3
    assert await store.writes.is_processed(event) is True
    assert await store.listing.count_by_owner("user", user) == 3
    log = await store.review.audit_log(written.results[0].memory_id)
    assert log[0].event_id == event and log[0].actor == "worker"


async def test_write_event_results_follow_the_input_order(store: Store) -> None:
    user = new_id()
    batch = [
        mem(owner=user, key=k, value=k.upper(), status="pending_review") for k in ("zeta", "alpha", "mid")
    ]
    written = await store.writes.write_event(event_id=new_id(), memories=batch)
    keys = [(await store.listing.get_by_id(r.memory_id)).key for r in written.results]  # type: ignore[union-attr]
    assert keys == ["zeta", "alpha", "mid"]


@pytest.mark.parametrize("dedup", [False, True], ids=["plain", "dedup"])
async def test_a_key_given_twice_in_one_event_sees_what_its_first_row_wrote(
    store: Store, dedup: bool
) -> None:
    # found by test_recall_never_leaks_other_owners_or_inactive_rows: the second proposal for the
    # same memory inserted a second open revision (unique violation, the whole event refused)
    from extraction.dedup import decide_against_neighbours

    user, persona = new_id(), new_id()
    same = {"scope": "persona_user", "owner": persona, "user": user, "key": "city"}
    written = await store.writes.write_event(
        event_id=new_id(),
        memories=[
            mem(**same, value="Lisbon", status="active"),  # type: ignore[arg-type]
            mem(**same, value="Porto", status="pending_review"),  # type: ignore[arg-type]
            mem(**same, value="Porto", status="pending_review"),  # type: ignore[arg-type]
        ],
        dedup=decide_against_neighbours if dedup else None,
    )
    actions = [r.action for r in written.results]
    assert actions[0] == "created" and actions[1:] == ["revision_proposed", "unchanged"]
    (memory_id,) = {r.memory_id for r in written.results}
    (revision,) = await store.review.pending_revisions(memory_id)
    assert revision.new_value == "Porto"
    assert (await store.listing.get_by_id(memory_id)).value == "Lisbon"  # type: ignore[union-attr]


async def test_write_event_audits_its_updates_and_proposals_in_one_statement(store: Store) -> None:
    user = new_id()
    reviewed = await store.writes.upsert(mem(owner=user, key="city", value="Lisbon", status="active"))
    draft = await store.writes.upsert(mem(owner=user, key="job", value="nurse", status="pending_review"))
    # an open proposal on a reviewed memory that the event then makes moot by restating the value
    proposed = await store.writes.upsert(mem(owner=user, key="pet", value="a cat", status="active"))
    await store.writes.upsert(mem(owner=user, key="pet", value="a dog", status="pending_review"))
    with recorded(store) as traffic:
        written = await store.writes.write_event(
            event_id=new_id(),
            memories=[
                mem(owner=user, key="city", value="Porto", status="pending_review"),  # proposal
                mem(owner=user, key="job", value="teacher", status="pending_review"),  # update
                mem(owner=user, key="pet", value="a cat", status="pending_review"),  # unchanged
            ],
        )
    assert [r.action for r in written.results] == ["revision_proposed", "updated", "unchanged"]
    audit_inserts = [
        s for s in traffic.statements if s.lstrip().upper().startswith("INSERT INTO MEMORY_AUDIT")
    ]
    assert len(audit_inserts) == 1
    assert await actions(store, reviewed.memory_id) == ["add", "propose"]
    assert await actions(store, draft.memory_id) == ["add", "update"]
    assert await actions(store, proposed.memory_id) == ["add", "propose"]
    log = await store.review.audit_log(draft.memory_id)
    assert (log[-1].old_value, log[-1].new_value, log[-1].actor) == ("nurse", "teacher", "worker")


async def test_a_processed_event_is_a_duplicate_and_writes_nothing(store: Store) -> None:
    user, event = new_id(), new_id()
    await store.writes.write_event(event_id=event, memories=[mem(owner=user, key="a", value="1")])
    again = await store.writes.write_event(event_id=event, memories=[mem(owner=user, key="b", value="2")])
    assert again.duplicate is True and again.results == ()
    assert [m.key for m in await store.listing.list_memories(MemoryFilter(owner_id=user))] == ["a"]


@pytest.mark.parametrize("deduplicated", [False, True])
async def test_a_duplicate_event_tells_the_body_hash_it_was_first_written_with(
    store: Store, deduplicated: bool
) -> None:
    user, event, unhashed = new_id(), new_id(), new_id()
    # with a dedup rule and pending memories, Postgres takes its pipelined write
    dedup = decide_against_neighbours if deduplicated else None

    def batch(key: str) -> list[NewMemory]:
        return [mem(owner=user, key=key, value="1", status="pending_review")]

    first = await store.writes.write_event(
        event_id=event, memories=batch("a"), dedup=dedup, body_sha256="f" * 64
    )
    assert first.duplicate is False and first.earlier_body_sha256 is None
    again = await store.writes.write_event(
        event_id=event, memories=batch("b"), dedup=dedup, body_sha256="0" * 64
    )
    assert again.duplicate is True and again.earlier_body_sha256 == "f" * 64
    await store.writes.write_event(event_id=unhashed, memories=batch("c"), dedup=dedup)
    after_unhashed = await store.writes.write_event(event_id=unhashed, memories=batch("d"), dedup=dedup)
    assert after_unhashed.duplicate is True and after_unhashed.earlier_body_sha256 is None


async def test_write_event_is_all_or_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    user, event = new_id(), new_id()
    real = store.writes._insert_new

    async def fail_after_inserting(*args: Any, **kwargs: Any) -> Any:
        await real(*args, **kwargs)  # the rows and their audit are written, then the event fails
        raise RuntimeError("boom")

    monkeypatch.setattr(store.writes, "_insert_new", fail_after_inserting)
    batch = [mem(owner=user, key="a", value="1"), mem(owner=user, key="b", value="2")]
    with pytest.raises(RuntimeError, match="boom"):
        await store.writes.write_event(event_id=event, memories=batch)
    monkeypatch.undo()
    assert await store.writes.is_processed(event) is False
    assert await store.listing.count_by_owner("user", user) == 0
    # the redelivered event then goes through
    assert (await store.writes.write_event(event_id=event, memories=batch)).duplicate is False


async def test_concurrent_writers_of_one_event_write_it_once(store: Store) -> None:
    user, event = new_id(), new_id()
    batch = [mem(owner=user, key=f"k{i}", value=f"v{i}", status="pending_review") for i in range(5)]
    outcomes = await asyncio.gather(
        *(store.writes.write_event(event_id=event, memories=batch) for _ in range(4))
    )
    assert sorted(o.duplicate for o in outcomes) == [False, True, True, True]
    assert await store.listing.count_by_owner("user", user) == 5
    for memory in await store.listing.list_memories(MemoryFilter(owner_id=user)):
        assert await actions(store, memory.id) == ["add"]


async def test_an_empty_event_is_still_marked_processed(store: Store) -> None:
    event = new_id()
    assert (await store.writes.write_event(event_id=event, memories=[])).duplicate is False
    assert await store.writes.is_processed(event) is True
    assert await store.writes.event_writes(event) == []


async def test_event_writes_reads_back_what_the_event_wrote_in_write_order(store: Store) -> None:
    user, persona, event = new_id(), new_id(), new_id()
    await store.writes.upsert(mem(owner=user, key="b same", value="Same", status="active"))
    reviewed = await store.writes.upsert(mem(owner=user, key="c reviewed", value="Old", status="active"))
    draft = await store.writes.upsert(mem(owner=user, key="d draft", value="V1", status="pending_review"))
    batch = [
        mem(owner=user, key="a new", value="New", status="pending_review"),
        mem(owner=user, key="b same", value="Same", status="pending_review"),  # unchanged: not audited
        mem(owner=user, key="c reviewed", value="Newer", status="pending_review"),  # proposal
        mem(owner=user, key="d draft", value="V2", status="pending_review"),  # update
        mem(scope="persona_user", owner=persona, user=user, key="e pu", value="X", status="pending_review"),
    ]
    written = await store.writes.write_event(event_id=event, memories=batch)
    # what happened after the event (review, delete, another event) is not part of it
    await store.review.approve(draft.memory_id, actor="reviewer")
    await store.writes.write_event(event_id=new_id(), memories=[mem(owner=user, key="f other", value="Y")])
    await store.erasure.delete(written.results[0].memory_id, actor="reviewer")

    got = await store.writes.event_writes(event)
    # write order is write_event's lock order (scope, owner, user, key), not the input order; the
    # deleted memory was erased, its key with it, so it is no longer reported
    assert [(w.memory_id, w.action, w.scope, w.key) for w in got] == [
        (written.results[4].memory_id, "created", "persona_user", "e pu"),
        (reviewed.memory_id, "revision_proposed", "user", "c reviewed"),
        (draft.memory_id, "updated", "user", "d draft"),
    ]
    assert [r.action for r in written.results] == [
        "created",
        "unchanged",
        "revision_proposed",
        "updated",
        "created",
    ]
    assert await store.writes.event_writes(new_id()) == []


# -- listing and counting ---------------------------------------------------------------------------


async def test_list_filters_by_every_field_newest_first(store: Store) -> None:
    user, persona, channel = new_id(), new_id(), new_id()
    await store.writes.upsert(mem(owner=user, key="Alice / birthday", value="3 March"))
    await store.writes.upsert(mem(owner=user, key="Alice / city", value="Porto", status="pending_review"))
    await store.writes.upsert(mem(owner=user, key="alice / pet", value="cat", channel=channel))
    await store.writes.upsert(mem(scope="persona_user", owner=persona, user=user, key="tone", value="formal"))
    assert len(await store.listing.list_memories(MemoryFilter(owner_id=user))) == 3
    assert [
        m.key for m in await store.listing.list_memories(MemoryFilter(owner_id=user, status="pending_review"))
    ] == ["Alice / city"]
    assert {m.key for m in await store.listing.list_memories(MemoryFilter(key_prefix="Alice / "))} == {
        "Alice / birthday",
        "Alice / city",
    }
    assert [m.key for m in await store.listing.list_memories(MemoryFilter(source_channel_id=channel))] == [
        "alice / pet"
    ]
    assert [
        m.key for m in await store.listing.list_memories(MemoryFilter(scope="persona_user", user_id=user))
    ] == ["tone"]
    assert [m.key for m in await store.listing.list_memories(MemoryFilter(key="tone"))] == ["tone"]
    newest_first = [m.key for m in await store.listing.list_memories(MemoryFilter(owner_id=user))]
    assert newest_first[0] == "alice / pet"
    page = await store.listing.list_memories(MemoryFilter(owner_id=user, limit=2, offset=2))
    assert [m.key for m in page] == newest_first[2:]


async def test_count_by_owner_counts_active_and_pending_only(store: Store) -> None:
    user = new_id()
    await store.writes.upsert(mem(owner=user, key="a", value="1"))
    await store.writes.upsert(mem(owner=user, key="b", value="2", status="pending_review"))
    c = await store.writes.upsert(mem(owner=user, key="c", value="3"))
    await store.erasure.archive(c.memory_id)
    assert await store.listing.count_by_owner("user", user) == 2
    assert await store.listing.count_by_owner("persona", user) == 0


async def test_prompt_memories_returns_active_and_pending_of_those_owners(
    store: Store,
) -> None:
    user, other, persona = new_id(), new_id(), new_id()
    await store.writes.upsert(mem(owner=user, key="a", value="1"))
    await store.writes.upsert(mem(owner=user, key="b", value="2", status="pending_review"))
    c = await store.writes.upsert(mem(owner=user, key="c", value="3"))
    await store.erasure.archive(c.memory_id)
    await store.writes.upsert(mem(owner=other, key="d", value="4"))
    await store.writes.upsert(mem(scope="persona_user", owner=persona, user=other, key="e", value="5"))
    await store.writes.upsert(mem(scope="persona_user", owner=persona, user=user, key="f", value="6"))
    owners = [
        OwnerRef(scope="user", owner_id=user),
        OwnerRef(scope="persona_user", owner_id=persona, user_id=user),
    ]
    found = await store.listing.prompt_memories(owners, team_id=None, words=[], limit=100)
    assert sorted(m.key for m in found) == ["a", "b", "f"]
    assert await store.listing.prompt_memories([], team_id=None, words=[], limit=100) == []


# -- settings ---------------------------------------------------------------------------------------


async def test_settings_merge_global_team_persona_over_defaults(store: Store) -> None:
    team, persona = new_id(), new_id()
    defaults = await store.settings.settings_for(team, persona)
    assert (defaults.enabled, defaults.persona_learning, defaults.min_confidence) == (True, False, 0.5)
    await store.settings.put_settings(
        level="global", target_id=None, min_confidence=0.6, extraction_prompt="global prompt"
    )
    await store.settings.put_settings(level="team", target_id=team, enabled=False, min_confidence=0.7)
    await store.settings.put_settings(
        level="persona", target_id=persona, persona_learning=True, min_confidence=0.9
    )
    merged = await store.settings.settings_for(team, persona)
    assert merged.enabled is False and merged.persona_learning is True
    assert merged.min_confidence == pytest.approx(0.9)
    assert merged.extraction_prompt == "global prompt"
    other_team = await store.settings.settings_for(new_id(), None)
    assert other_team.enabled is True and other_team.min_confidence == pytest.approx(0.6)


async def test_put_settings_changes_only_the_given_fields(store: Store) -> None:
    team = new_id()
    await store.settings.put_settings(
        level="team", target_id=team, enabled=False, extraction_prompt="team prompt"
    )
    await store.settings.put_settings(level="team", target_id=team, min_confidence=0.8)
    merged = await store.settings.settings_for(team, None)
    assert (merged.enabled, merged.extraction_prompt) == (False, "team prompt")
    assert merged.min_confidence == pytest.approx(0.8)
    await store.settings.put_settings(level="team", target_id=team, extraction_prompt="")
    assert (await store.settings.settings_for(team, None)).extraction_prompt is None


async def test_put_settings_refuses_inconsistent_targets(store: Store) -> None:
    with pytest.raises(ValueError, match="global settings take no target_id"):
        await store.settings.put_settings(level="global", target_id=new_id(), enabled=True)
    with pytest.raises(ValueError, match="need the team or persona id"):
        await store.settings.put_settings(level="team", target_id=None, enabled=True)
    with pytest.raises(ValueError, match="min_confidence"):
        await store.settings.put_settings(level="global", target_id=None, min_confidence=1.5)


async def test_ping_succeeds_on_a_reachable_database(store: Store) -> None:
    await store.ping()


# -- recall -----------------------------------------------------------------------------------------


async def test_recall_without_persona_reads_the_user_scope_only(store: Store) -> None:
    user, persona = new_id(), new_id()
    await store.writes.upsert(mem(owner=user, key="city", value="Lives in Lisbon"))
    await store.writes.upsert(
        mem(scope="persona", owner=persona, key="policy", value="Refunds within 30 days")
    )
    await store.writes.upsert(
        mem(scope="persona_user", owner=persona, user=user, key="level", value="Beginner")
    )
    assert [h.memory.key for h in await store.recall(user, None, "")] == ["city"]
    with_persona = {h.memory.key for h in await store.recall(user, persona, "")}
    assert with_persona == {"city", "policy", "level"}


async def test_recall_never_reads_another_users_or_personas_rows(store: Store) -> None:
    user, other, persona, other_persona = new_id(), new_id(), new_id(), new_id()
    await store.writes.upsert(mem(owner=other, key="city", value="Lives in Lisbon"))
    await store.writes.upsert(
        mem(scope="persona_user", owner=persona, user=other, key="city", value="Lisbon office")
    )
    await store.writes.upsert(mem(scope="persona", owner=other_persona, key="city", value="Lisbon HQ"))
    await store.writes.upsert(mem(scope="user", owner=persona, key="city", value="Lisbon persona-as-user"))
    for query in ("", "Lisbon", "where does the user live"):
        for retriever in ("hybrid", "vector", "keyword"):
            assert await store.recall(user, persona, query, retriever=retriever) == []


async def test_recall_returns_only_active_rows(store: Store) -> None:
    user = new_id()
    await store.writes.upsert(mem(owner=user, key="city", value="Lives in Lisbon", status="pending_review"))
    archived = await store.writes.upsert(mem(owner=user, key="old city", value="Lived in Lisbon"))
    await store.erasure.archive(archived.memory_id)
    active = await store.writes.upsert(mem(owner=user, key="work", value="Works in Lisbon"))
    for query in ("", "Lisbon"):
        assert [h.memory.id for h in await store.recall(user, None, query)] == [active.memory_id]


async def test_recall_merges_a_key_across_scopes_most_specific_first(store: Store) -> None:
    user, persona = new_id(), new_id()
    await store.writes.upsert(mem(owner=user, key="tone", value="casual"))
    await store.writes.upsert(mem(scope="persona", owner=persona, key="Tone", value="formal"))
    await store.writes.upsert(
        mem(scope="persona_user", owner=persona, user=user, key="tone ", value="playful")
    )
    await store.writes.upsert(mem(scope="persona", owner=persona, key="greeting", value="Hello there"))
    await store.writes.upsert(mem(owner=user, key="greeting", value="Hey"))
    hits = await store.recall(user, persona, "")
    by_key = {h.memory.key.strip().lower(): (h.memory.scope, h.memory.value) for h in hits}
    assert by_key == {"tone": ("persona_user", "playful"), "greeting": ("persona", "Hello there")}


async def test_an_override_wins_even_when_only_the_overridden_row_matches(store: Store) -> None:
    user, persona = new_id(), new_id()
    await store.writes.upsert(mem(owner=user, key="coffee order", value="Large espresso with oat milk"))
    await store.writes.upsert(
        mem(scope="persona_user", owner=persona, user=user, key="coffee order", value="decaf")
    )
    hits = await store.recall(user, persona, "oat milk", retriever="keyword")
    assert [(h.memory.scope, h.memory.value) for h in hits] == [("persona_user", "decaf")]


async def test_empty_query_orders_by_confidence_then_recency(store: Store) -> None:
    user = new_id()
    await store.writes.upsert(mem(owner=user, key="low", value="x", confidence=0.3))
    await store.writes.upsert(mem(owner=user, key="high old", value="x", confidence=0.9))
    await asyncio.sleep(0.01)
    await store.writes.upsert(mem(owner=user, key="high new", value="x", confidence=0.9))
    await store.writes.upsert(mem(owner=user, key="mid", value="x", confidence=0.6))
    hits = await store.recall(user, None, "   ")
    assert [h.memory.key for h in hits] == ["high new", "high old", "mid", "low"]
    assert all(h.sources == ("top",) for h in hits)
    assert [h.memory.key for h in await store.recall(user, None, "", limit=2)] == ["high new", "high old"]


async def test_recall_respects_the_limit_and_ranks_best_first(store: Store) -> None:
    user = new_id()
    for i in range(30):
        await store.writes.write_event(
            event_id=new_id(),
            memories=[mem(owner=user, key=f"note {i}", value=f"Detail number {i} about travel")],
        )
    hits = await store.recall(user, None, "travel details", limit=7)
    assert len(hits) == 7
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert await store.recall(user, None, "travel", limit=0) == []


async def test_keyword_recall_matches_any_term_of_a_question(store: Store) -> None:
    user = new_id()
    await store.writes.upsert(mem(owner=user, key="employer", value="Works at Initech as an engineer"))
    await store.writes.upsert(mem(owner=user, key="sport", value="Plays tennis on Sundays"))
    hits = await store.recall(
        user, None, "Where does she work, and which company is Initech?", retriever="keyword"
    )
    assert [h.memory.key for h in hits] == ["employer"]
    assert hits[0].sources == ("text",)


async def test_unknown_retriever_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="retriever must be one of"):
        await store.recall(new_id(), None, "x", retriever="fuzzy")  # type: ignore[arg-type]


async def test_hybrid_finds_what_each_branch_alone_misses(make_store: MakeStore) -> None:
    store = await make_store(ConceptEmbedder())
    user = new_id()
    only_vector = await store.writes.upsert(mem(owner=user, key="pet", value="Owns a golden retriever"))
    only_text = await store.writes.upsert(
        mem(owner=user, key="project codename", value="Zephyr launch is in March")
    )
    await store.writes.upsert(mem(owner=user, key="walks", value="Takes the puppy to the park daily"))
    await store.writes.upsert(mem(owner=user, key="checkups", value="The canine sees the vet yearly"))
    query = "Which dog breed do they have, and what is Zephyr?"

    vector = [h.memory.id for h in await store.recall(user, None, query, limit=2, retriever="vector")]
    keyword = [h.memory.id for h in await store.recall(user, None, query, limit=2, retriever="keyword")]
    hybrid = await store.recall(user, None, query, limit=2, retriever="hybrid")

    assert only_vector.memory_id in vector and only_text.memory_id not in vector
    assert only_text.memory_id in keyword and only_vector.memory_id not in keyword
    assert {h.memory.id for h in hybrid} == {only_vector.memory_id, only_text.memory_id}
    sources = {h.memory.id: h.sources for h in hybrid}
    assert sources[only_vector.memory_id] == ("vector",)
    assert sources[only_text.memory_id] == ("vector", "text")


# -- the embedder's text roles: memories are stored texts, recall's texts are queries ---------------


class RoleRecordingEmbedder:
    """A hashing embedder with a query role (its vectors differ from a stored text's, as e5's do)
    that records which role each text was embedded in."""

    def __init__(self) -> None:
        from extraction.embeddings import HashingEmbedder

        self._inner = HashingEmbedder(dim=384)
        self.calls: list[tuple[str, str]] = []

    @property
    def dim(self) -> int:
        return self._inner.dim

    async def embed(self, texts: Any) -> list[list[float]]:
        self.calls.extend(("passage", text) for text in texts)
        return await self._inner.embed(texts)

    async def embed_queries(self, texts: Any) -> list[list[float]]:
        self.calls.extend(("query", text) for text in texts)
        return await self._inner.embed([f"query {text}" for text in texts])


async def test_recall_embeds_queries_and_writes_and_edits_embed_stored_texts(make_store: MakeStore) -> None:
    embedder = RoleRecordingEmbedder()
    store = await make_store(embedder)
    user = new_id()
    saved = await store.writes.upsert(mem(owner=user, key="hobby", value="Plays chess", status="active"))
    await store.writes.upsert(
        mem(owner=user, key="hobby", value="Collects vinyl records", status="pending_review")
    )
    revisions = store._schema.revisions
    async with store.engine.begin() as conn:
        await conn.execute(revisions.update().values(embedding=None))
    await store.review.approve(saved.memory_id, actor="admin")
    await store.review.edit(saved.memory_id, "Restores old motorcycles", actor="user:me")
    assert {role for role, _ in embedder.calls} == {"passage"}
    embedder.calls.clear()
    hits = await store.recall(user, None, "What does the user restore?", retriever="vector")
    assert hits and hits[0].memory.id == saved.memory_id
    assert embedder.calls and {role for role, _ in embedder.calls} == {"query"}
    assert ("query", "What does the user restore?") in embedder.calls
