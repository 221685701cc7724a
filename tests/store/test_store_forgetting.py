"""Reject and forget what was said, on both stores: the turns a memory's evidence cites are erased
with every copy the reviewer may reach, their words leave the turns beside them and every evidence
of the conversation, and no table holds any text of them; a plain rejection keeps them."""

from __future__ import annotations

import uuid

import numpy as np
from sqlalchemy import select

from store.rules.evidence import quoted_text as as_evidence_text
from tests.store.as_the_worker import event_of, write_as_the_worker
from tests.store.store_testkit import Store
from tests.store.test_store_turns import holding
from worker.planning import embedding_batch, plan_turns, split_embeddings

TEAM = uuid.UUID("aaaaaaaa-0000-4000-8000-000000000001")
OTHER_TEAM = uuid.UUID("bbbbbbbb-0000-4000-8000-000000000002")
WORD = "Zephyrmoss"
SAID = [
    "Hi there, how are you today?",
    "Fine, and what is new with you?",
    f"My cat {WORD} loves sardines and sleeps on the piano",
    "What a lovely cat!",
    "I also run marathons every spring",
    "Impressive, good luck with the training",
]
REVIEWER = "admin:reviewer"


async def conversation(
    store: Store, *, team: uuid.UUID | None = TEAM
) -> tuple[dict[str, uuid.UUID], uuid.UUID, uuid.UUID]:
    """One conversation told by the user and, sent once per participant, by a second participant
    (the same messages under their own event); memories from it: `pet` (citing the cat message),
    `sport` (the marathons one) and `home` (both). Their ids, the user and the other participant."""
    user, other, channel = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    facts = [("pet", "Has a cat", (3,)), ("sport", "Runs marathons", (5,)), ("home", "Has a piano", (3, 5))]
    ids = await write_as_the_worker(store, event_of(SAID, user=user, channel=channel, team=team), facts)
    await write_as_the_worker(store, event_of(SAID, user=other, channel=channel, team=team))
    return dict(zip(("pet", "sport", "home"), ids, strict=True)), user, other


async def turn_rows(store: Store, user: uuid.UUID) -> list[tuple[int, str, str | None]]:
    """(position, text, search_text) of the user's stored turns, in order, read from the table."""
    t = store._schema.turns
    async with store._backend.reading() as conn:  # in the test's scope (the platform)
        rows = (
            await conn.execute(
                select(t.c.position, t.c.text, t.c.search_text)
                .where(t.c.user_id == user)
                .order_by(t.c.position)
            )
        ).all()
    return [(row.position, row.text, row.search_text) for row in rows]


async def turn_embeddings(store: Store, user: uuid.UUID) -> list[list[float]]:
    """The embeddings of the user's stored turns, in order, read from the table."""
    t = store._schema.turns
    async with store._backend.reading() as conn:
        rows = (
            await conn.execute(select(t.c.embedding).where(t.c.user_id == user).order_by(t.c.position))
        ).all()
    return [[float(x) for x in row.embedding] for row in rows]


async def test_reject_and_forget_leaves_no_text_of_what_was_said(store: Store) -> None:
    ids, user, _ = await conversation(store)
    assert set(holding(store, WORD)) >= {
        "conversation_turns.text",
        "conversation_turns.search_text",
        "memories.evidence",
    }

    rejected = await store.forgetting.reject_memory(ids["pet"], actor=REVIEWER, forget=True)

    assert rejected is not None
    assert rejected.memory.status == "archived" and rejected.memory.evidence is None
    assert rejected.forgotten_turns == 2  # the message, stored once per participant
    assert holding(store, WORD) == []  # every table and column, full-text tables included
    # the turns beside it read as the worker would have stored them without it
    told = event_of(SAID, user=user, channel=uuid.uuid4())
    without = told.model_copy(update={"messages": [m for m in told.messages if WORD not in m.content]})
    expected = [t.search_text for t in plan_turns(without, now=rejected.memory.created_at)[0]]
    assert [search for _, _, search in await turn_rows(store, user)] == expected
    assert [position for position, _, _ in await turn_rows(store, user)] == [1, 2, 4, 5, 6]
    # and are embedded as the worker would have embedded them without it
    _, own, around = plan_turns(without, now=rejected.memory.created_at)
    vectors = await store.embedder.embed(embedding_batch([], [], own, around))
    _, worker_vectors = split_embeddings(vectors, [], [], len(own))
    assert np.allclose(await turn_embeddings(store, user), worker_vectors, atol=1e-5)
    # what else was said stays: the other memories, the other turns, and their recall
    home = await store.listing.get_by_id(ids["home"])
    sport = await store.listing.get_by_id(ids["sport"])
    assert home is not None and home.evidence == f"user: {as_evidence_text(SAID[4])}"
    assert sport is not None and sport.evidence == f"user: {as_evidence_text(SAID[4])}"
    hits = await store.turns.recall_turns(user, None, "marathons spring", 3, team_id=TEAM)
    assert hits and hits[0].turn.text == SAID[4]
    assert await store.turns.recall_turns(user, None, "cat sardines piano", 5, team_id=TEAM) != []
    assert all(
        WORD not in h.turn.text for h in await store.turns.recall_turns(user, None, WORD, 5, team_id=TEAM)
    )
    # audited as a rejection, by the reviewer
    assert [(e.action, e.actor) for e in await store.review.audit_log(ids["pet"])][-1] == ("reject", REVIEWER)


async def test_a_plain_rejection_keeps_what_was_said(store: Store) -> None:
    ids, user, _ = await conversation(store)
    rejected = await store.forgetting.reject_memory(ids["pet"], actor=REVIEWER)
    assert rejected is not None and rejected.forgotten_turns == 0
    assert rejected.memory.status == "archived" and rejected.memory.evidence is not None
    assert [text for _, text, _ in await turn_rows(store, user)] == SAID
    assert "conversation_turns.text" in holding(store, WORD)


async def test_forgetting_stays_within_the_memorys_team(store: Store) -> None:
    ids, user, _ = await conversation(store)
    # the same conversation (channel) said again in another team: not the reviewer's to erase
    channel_turns = await store.turns.export_turns(user)
    elsewhere = uuid.uuid4()
    await write_as_the_worker(
        store, event_of(SAID, user=elsewhere, channel=channel_turns[0].channel_id, team=OTHER_TEAM)
    )
    rejected = await store.forgetting.reject_memory(ids["pet"], actor=REVIEWER, forget=True)
    assert rejected is not None and rejected.forgotten_turns == 2
    assert [t.text for t in await store.turns.export_turns(elsewhere)] == SAID


async def test_a_person_rejects_their_own_memory_and_forgets_only_their_own_turns(store: Store) -> None:
    ids, user, other = await conversation(store)
    approved = await store.review.approve(ids["pet"], actor=REVIEWER)
    assert approved is not None and approved.status == "active"
    rejected = await store.forgetting.reject_memory(
        ids["pet"], actor=f"user:{user}", forget=True, person=user
    )
    assert rejected is not None and rejected.memory.status == "archived" and rejected.forgotten_turns == 1
    assert WORD not in " ".join(text for _, text, _ in await turn_rows(store, user))
    # the other participant's copy is theirs
    assert SAID[2] in [t.text for t in await store.turns.export_turns(other)]
    assert [(e.action, e.actor) for e in await store.review.audit_log(ids["pet"])][-1] == (
        "reject",
        f"user:{user}",
    )
    # archived: nothing more to reject
    assert (
        await store.forgetting.reject_memory(ids["pet"], actor=f"user:{user}", forget=True, person=user)
        is None
    )


async def test_rejecting_a_proposed_change_forgets_the_proposals_conversation_only(store: Store) -> None:
    ids, user, _ = await conversation(store)
    await store.review.approve(ids["sport"], actor=REVIEWER)
    # a later conversation proposes another value for the reviewed memory
    later = [f"Actually I quit running, now I swim with {WORD} the coach", "Swimming is great"]
    channel = uuid.uuid4()
    await write_as_the_worker(
        store, event_of(later, user=user, channel=channel, team=TEAM), [("sport", "Swims", (1,))]
    )
    [proposal] = await store.review.pending_revisions(ids["sport"])
    assert proposal.evidence is not None and WORD in proposal.evidence

    rejected = await store.forgetting.reject_memory(ids["sport"], actor=REVIEWER, forget=True)

    assert rejected is not None and rejected.forgotten_turns == 1
    assert rejected.memory.status == "active" and rejected.memory.value == "Runs marathons"
    assert rejected.memory.evidence == f"user: {as_evidence_text(SAID[4])}"
    assert await store.review.pending_revisions(ids["sport"]) == []
    # the first conversation is untouched; of the later one the cited message is gone
    texts = [t.text for t in await store.turns.export_turns(user)]
    assert SAID[2] in texts and later[1] in texts and later[0] not in texts
    assert [e.action for e in await store.review.audit_log(ids["sport"])][-1] == "reject"


async def test_nothing_pending_is_nothing_rejected_and_nothing_forgotten(store: Store) -> None:
    ids, user, _ = await conversation(store)
    await store.review.approve(ids["pet"], actor=REVIEWER)
    assert await store.forgetting.reject_memory(ids["pet"], actor=REVIEWER, forget=True) is None
    assert await store.forgetting.reject_memory(uuid.uuid4(), actor=REVIEWER, forget=True) is None
    assert [text for _, text, _ in await turn_rows(store, user)] == SAID


async def test_a_memory_of_no_team_forgets_only_turns_of_no_team(store: Store) -> None:
    ids, user, _ = await conversation(store, team=None)
    channel = (await store.turns.export_turns(user))[0].channel_id
    teamed = uuid.uuid4()
    await write_as_the_worker(store, event_of(SAID, user=teamed, channel=channel, team=TEAM))
    rejected = await store.forgetting.reject_memory(ids["pet"], actor=REVIEWER, forget=True)
    assert rejected is not None and rejected.forgotten_turns == 2 and rejected.memory.team_id is None
    assert [t.text for t in await store.turns.export_turns(teamed)] == SAID
