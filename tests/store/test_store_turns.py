"""Evidence and conversation memory on both stores: evidence and time kept, shown, exported and erased;
turns written with their event (once), recalled only in their own context, listed, deleted,
expired and erased."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extraction.embeddings import hashing_vector
from store.core.backend import FocusedVector, TurnRecall
from store.model import ConversationQuery, NewMemory, NewTurn, ReviewQuery, SettingsRow, UserMemoryQuery
from store.services.context_recall import ContextRecall, items_in_context
from tests.factories import user_fact
from tests.store.conftest import DIM
from tests.store.store_testkit import Store

TEAM_A = uuid.UUID("aaaaaaaa-0000-4000-8000-000000000001")
TEAM_B = uuid.UUID("bbbbbbbb-0000-4000-8000-000000000002")
PERSONA_A = uuid.UUID("cccccccc-0000-4000-8000-000000000003")
PERSONA_B = uuid.UUID("dddddddd-0000-4000-8000-000000000004")
SAID = datetime(2026, 3, 4, 10, 30, tzinfo=UTC)
EVIDENCE = "user: I went vegan after the marathon in Porto"


def turn(
    user: uuid.UUID,
    position: int,
    text: str,
    *,
    persona: uuid.UUID | None = None,
    team: uuid.UUID | None = None,
    at: datetime = SAID,
    channel: uuid.UUID | None = None,
    speaker: str | None = None,
    search_text: str | None = None,
) -> NewTurn:
    return NewTurn(
        channel_id=channel or uuid.UUID(int=7),
        user_id=user,
        persona_id=persona,
        team_id=team,
        role="user" if position % 2 else "assistant",
        text=text,
        at=at,
        position=position,
        speaker=speaker,
        search_text=search_text,
    )


def fact(user: uuid.UUID, key: str, value: str, **fields: object) -> NewMemory:
    return user_fact(user, key, value, **fields)  # type: ignore[arg-type]


async def test_evidence_and_time_are_kept_and_shown_wherever_the_memory_is(store: Store) -> None:
    user = uuid.uuid4()
    new = fact(user, "diet", "Is vegan", evidence=EVIDENCE, observed_at=SAID)
    written = await store.writes.write_event(event_id=uuid.uuid4(), memories=[new])
    memory_id = written.results[0].memory_id
    memory = await store.listing.get_by_id(memory_id)
    assert memory is not None and memory.evidence == EVIDENCE and memory.observed_at == SAID
    [queued] = (await store.review.review_queue(ReviewQuery())).items
    assert queued.evidence == EVIDENCE and queued.observed_at == SAID
    [mine] = (await store.listing.list_for_user(UserMemoryQuery(user_id=user))).items
    assert mine.evidence == EVIDENCE
    assert (await store.listing.export_user(user)).memories[0].evidence == EVIDENCE


async def test_a_proposal_carries_its_own_evidence_and_approval_moves_it_to_the_memory(store: Store) -> None:
    user = uuid.uuid4()
    first = await store.writes.upsert(
        fact(user, "diet", "Is vegetarian", status="active", evidence="user: veggie")
    )
    later = SAID + timedelta(days=30)
    proposed = fact(user, "diet", "Is vegan", evidence=EVIDENCE, observed_at=later)
    result = (await store.writes.write_event(event_id=uuid.uuid4(), memories=[proposed])).results[0]
    assert result.action == "revision_proposed"
    [revision] = await store.review.pending_revisions(first.memory_id)
    assert revision.evidence == EVIDENCE and revision.observed_at == later
    [item] = (await store.review.review_queue(ReviewQuery())).items
    assert item.kind == "revision" and item.evidence == EVIDENCE
    stored = await store.listing.get_by_id(first.memory_id)
    assert stored is not None and stored.evidence == "user: veggie"  # until a person approves
    approved = await store.review.approve(first.memory_id, actor="admin:1")
    assert approved is not None and approved.evidence == EVIDENCE and approved.observed_at == later


async def test_a_word_said_only_in_the_evidence_finds_the_memory(store: Store) -> None:
    user = uuid.uuid4()
    await store.writes.upsert(fact(user, "diet", "Is vegan", status="active", evidence=EVIDENCE))
    await store.writes.upsert(fact(user, "city", "Lives in Lyon", status="active"))
    hits = await store.recall(user, None, "marathon", 5, retriever="keyword")
    assert [h.memory.key for h in hits] == ["diet"]


async def test_an_event_writes_its_turns_once_whatever_the_redeliveries(store: Store) -> None:
    user, event = uuid.uuid4(), uuid.uuid4()
    turns = [turn(user, 1, "I ran the Porto marathon"), turn(user, 2, "Congratulations!")]
    first = await store.writes.write_event(event_id=event, memories=[], turns=turns)
    again = await store.writes.write_event(event_id=event, memories=[], turns=turns)
    assert not first.duplicate and again.duplicate
    stored = await store.turns.conversation(user, event)
    assert [(t.position, t.role, t.text) for t in stored] == [
        (1, "user", "I ran the Porto marathon"),
        (2, "assistant", "Congratulations!"),
    ]
    assert all(t.event_id == event and t.at == SAID for t in stored)


async def test_turns_are_written_in_the_same_transaction_as_the_memories(store: Store) -> None:
    user, event = uuid.uuid4(), uuid.uuid4()
    await store.writes.write_event(
        event_id=event,
        memories=[fact(user, "race", "Ran the Porto marathon")],
        turns=[turn(user, 1, "I ran the Porto marathon")],
    )
    assert len(await store.turns.conversation(user, event)) == 1
    assert await store.writes.is_processed(event)


async def test_turn_recall_finds_what_was_said_and_only_for_its_speaker(store: Store) -> None:
    user, other = uuid.uuid4(), uuid.uuid4()
    await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[],
        turns=[turn(user, 1, "My sister Ana lives in Porto"), turn(user, 2, "Nice city")],
    )
    await store.writes.write_event(
        event_id=uuid.uuid4(), memories=[], turns=[turn(other, 1, "Porto is rainy")]
    )
    hits = await store.turns.recall_turns(user, None, "where does my sister live", 5)
    assert hits and hits[0].turn.text == "My sister Ana lives in Porto"
    assert all(h.turn.user_id == user for h in hits)
    assert await store.turns.recall_turns(user, None, "", 5) == []


async def test_recall_in_context_merges_memories_and_turns_and_include_selects(store: Store) -> None:
    user = uuid.uuid4()
    await store.writes.upsert(fact(user, "sister", "Sister Ana lives in Porto", status="active"))
    await store.writes.write_event(
        event_id=uuid.uuid4(), memories=[], turns=[turn(user, 1, "Ana moved to Porto")]
    )
    both = await items_in_context(
        store, ContextRecall(user_id=user, persona_id=None, team_id=None, query="Porto Ana", limit=10)
    )
    # the reviewed fact leads: no turn is closer to the question (this turn has no embedding)
    assert [i.kind for i in both] == ["memory", "turn"]
    only_turns = await items_in_context(
        store,
        ContextRecall(
            user_id=user, persona_id=None, team_id=None, query="Porto Ana", limit=10, include=("turns",)
        ),
    )
    assert [i.kind for i in only_turns] == ["turn"]
    only_memories = await items_in_context(
        store,
        ContextRecall(
            user_id=user, persona_id=None, team_id=None, query="Porto Ana", limit=10, include=("memories",)
        ),
    )
    assert [i.kind for i in only_memories] == ["memory"]


CONTEXTS = st.tuples(
    st.sampled_from(["u1", "u2"]),
    st.sampled_from([PERSONA_A, PERSONA_B, None]),
    st.sampled_from([TEAM_A, TEAM_B, None]),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(said=st.lists(CONTEXTS, min_size=1, max_size=8), asked=CONTEXTS)
async def test_a_turn_is_recalled_only_in_the_context_it_was_said_in(
    store: Store,
    said: list[tuple[str, uuid.UUID | None, uuid.UUID | None]],
    asked: tuple[str, uuid.UUID | None, uuid.UUID | None],
) -> None:
    users = {"u1": uuid.uuid4(), "u2": uuid.uuid4()}  # fresh per example: examples share the store
    written: dict[uuid.UUID, tuple[str, uuid.UUID | None, uuid.UUID | None]] = {}
    for user, persona, team in said:
        event = uuid.uuid4()
        # each its own conversation: one message repeated in one conversation is recalled once
        new = turn(
            users[user], 1, "the harbour lighthouse story", persona=persona, team=team, channel=uuid.uuid4()
        )
        await store.writes.write_event(event_id=event, memories=[], turns=[new])
        [stored] = await store.turns.conversation(users[user], event)
        written[stored.id] = (user, persona, team)
    user, persona, team = asked
    hits = await store.turns.recall_turns(users[user], persona, "lighthouse harbour", 50, team_id=team)
    # the oracle: exactly the turns said by this user to this persona (or none) in this team (or none)
    assert {h.turn.id for h in hits} == {tid for tid, ctx in written.items() if ctx == asked}


async def test_conversations_are_listed_newest_first_and_deleted_one_or_all(store: Store) -> None:
    user = uuid.uuid4()
    events = [uuid.uuid4() for _ in range(3)]
    for day, event in enumerate(events):
        at = SAID + timedelta(days=day)
        await store.writes.write_event(
            event_id=event,
            memories=[],
            turns=[
                turn(user, 2, f"Day {day} first line\nsecond line", at=at, persona=PERSONA_A),
                turn(user, 3, "ok", at=at),
            ],
        )
    page = await store.turns.list_conversations(ConversationQuery(user_id=user, limit=2))
    assert [c.event_id for c in page.items] == [events[2], events[1]]
    assert page.items[0].first_line == "Day 2 first line" and page.items[0].turn_count == 2
    assert page.items[0].persona_id == PERSONA_A
    rest = await store.turns.list_conversations(
        ConversationQuery(user_id=user, limit=2, cursor=page.next_cursor)
    )
    assert [c.event_id for c in rest.items] == [events[0]] and rest.next_cursor is None
    assert await store.turns.delete_conversation(uuid.uuid4(), events[0]) == 0  # not theirs
    assert await store.turns.delete_conversation(user, events[0]) == 2
    assert await store.turns.delete_conversations(user) == 4
    assert (await store.turns.list_conversations(ConversationQuery(user_id=user))).items == ()


async def test_the_export_holds_the_turns_and_erasing_the_user_removes_them(store: Store) -> None:
    user = uuid.uuid4()
    await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[fact(user, "race", "Ran a marathon", evidence=EVIDENCE)],
        turns=[turn(user, 1, "I ran the Porto marathon", team=TEAM_A), turn(user, 3, "in 2025", team=TEAM_B)],
    )
    export = await store.listing.export_user(user)
    assert [t.text for t in export.turns] == ["I ran the Porto marathon", "in 2025"]
    await store.erasure.erase_user(user, actor="admin:1", teams=frozenset({TEAM_A}))
    assert [t.text for t in (await store.listing.export_user(user)).turns] == ["in 2025"]
    await store.erasure.erase_user(user, actor="admin:1")
    after = await store.listing.export_user(user)
    assert after.turns == () and after.memories == ()


async def test_retention_erases_turns_older_than_history_days_per_persona(make_store: object) -> None:
    from store.model import MemorySettings

    store: Store = await make_store(settings_defaults=MemorySettings(history_days=90))  # type: ignore[operator]
    user = uuid.uuid4()
    now = datetime(2026, 12, 1, tzinfo=UTC)
    await store.settings.replace_settings(SettingsRow(level="persona", target_id=PERSONA_A, history_days=7))
    old, recent = now - timedelta(days=30), now - timedelta(days=1)
    await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[],
        turns=[
            turn(user, 1, "old with persona", persona=PERSONA_A, at=old),
            turn(user, 2, "recent with persona", persona=PERSONA_A, at=recent),
        ],
    )
    await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[],
        turns=[
            turn(user, 1, "old without persona", at=old),
            turn(user, 2, "ancient", at=now - timedelta(days=91)),
        ],
    )
    report = await store.erasure.retention(now=now)
    assert report.erased_turns == 2
    assert sorted(t.text for t in (await store.listing.export_user(user)).turns) == [
        "old without persona",
        "recent with persona",
    ]
    assert (await store.erasure.retention(now=now)).erased_turns == 0


def text_columns_holding(url: str, needle: str) -> list[str]:
    """Every (table.column) of a text-like type in the public schema containing `needle`."""
    hits = []
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' "
            "AND data_type IN ('text', 'character varying', 'tsvector', 'json', 'jsonb')"
        ).fetchall()
        assert any(table == "conversation_turns" for table, _ in columns)
        for table, column in columns:
            row = conn.execute(
                f'SELECT count(*) FROM "{table}" WHERE "{column}"::text ILIKE %s', (f"%{needle}%",)
            ).fetchone()
            if row and row[0]:
                hits.append(f"{table}.{column}")
    return hits


def sqlite_text_holding(path: str, needle: str) -> list[str]:
    """The same probe over every table (full-text tables included) of an SQLite file."""
    import sqlite3

    hits = []
    with sqlite3.connect(path) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for column in [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]:
                count = conn.execute(
                    f'SELECT count(*) FROM "{table}" WHERE CAST("{column}" AS TEXT) LIKE ?', (f"%{needle}%",)
                ).fetchone()[0]
                if count:
                    hits.append(f"{table}.{column}")
    return hits


def holding(store: Store, needle: str) -> list[str]:
    url = store.engine.url
    if url.get_backend_name() == "sqlite":
        assert url.database is not None
        return sqlite_text_holding(url.database, needle)
    return text_columns_holding(url.render_as_string(hide_password=False).replace("+psycopg", ""), needle)


async def write_everything(store: Store, user: uuid.UUID, word: str) -> uuid.UUID:
    """A memory whose evidence says `word`, a proposal citing it, and two conversations saying it."""
    first = await store.writes.upsert(
        fact(user, "hobby", "Keeps a diary", status="active", evidence=f"user: {word}")
    )
    event = uuid.uuid4()
    await store.writes.write_event(
        event_id=event,
        memories=[fact(user, "hobby", "Keeps a diary daily", evidence=f"user: my {word} daily")],
        turns=[turn(user, 1, f"I write my {word} daily", persona=PERSONA_A, at=SAID, speaker=f"{word} Ada")],
    )
    # the word said only by the turn before it: in the search text, not the turn's own
    around = f"Bea: what of the {word}?\nAda: again"
    await store.writes.write_event(
        event_id=uuid.uuid4(), memories=[], turns=[turn(user, 2, "again", at=SAID, search_text=around)]
    )
    return first.memory_id


async def test_every_erasure_path_leaves_no_text_of_evidence_or_turns(store: Store) -> None:
    word = "Esperantodiary"
    user = uuid.uuid4()
    # a person's delete-all of their conversations, then erasing the memory
    memory_id = await write_everything(store, user, word)
    assert set(holding(store, word)) >= {
        "conversation_turns.text",
        "conversation_turns.speaker",
        "conversation_turns.search_text",
        "memories.evidence",
        "memory_revisions.evidence",
    }
    await store.turns.delete_conversations(user)
    await store.erasure.erase(memory_id, actor=f"user:{user}")
    assert holding(store, word) == []
    # the service's erasure of a user
    await write_everything(store, user, word)
    await store.erasure.erase_user(user, actor="service")
    assert holding(store, word) == []
    # retention
    await write_everything(store, user, word)
    await store.erasure.erase_user(user, actor="service")  # the memories; the turns expire below
    await write_everything(store, user, word)
    for each in (await store.listing.list_for_user(UserMemoryQuery(user_id=user))).items:
        await store.erasure.erase(each.id)
    report = await store.erasure.retention(now=SAID + timedelta(days=365))
    assert report.erased_turns == 2
    assert holding(store, word) == []


async def test_the_speaker_is_kept_shown_and_exported_and_the_search_text_finds_a_reply(
    store: Store,
) -> None:
    user = uuid.uuid4()
    event = uuid.uuid4()
    question = "Bea: where did you go sailing last summer?"
    await store.writes.write_event(
        event_id=event,
        memories=[],
        turns=[
            turn(user, 1, "where did you go sailing last summer?", speaker="Bea", search_text=question),
            # the reply alone names no sailing: its search text carries the question it answers
            turn(user, 2, "Madeira, twice!", speaker="Ada", search_text=f"{question}\nAda: Madeira, twice!"),
            turn(user, 3, "Lovely", search_text="Ada: Madeira, twice!\nuser: Lovely"),
        ],
    )
    stored = await store.turns.conversation(user, event)
    assert [(t.speaker, t.said_by) for t in stored] == [("Bea", "Bea"), ("Ada", "Ada"), (None, "user")]
    assert [t.speaker for t in await store.turns.export_turns(user)] == ["Bea", "Ada", None]
    hits = await store.turns.recall_turns(user, None, "sailing summer", 3)
    assert {h.turn.text for h in hits} >= {"Madeira, twice!"}
    # its own words rank a turn above one that only has them around it
    assert hits[0].turn.text == "where did you go sailing last summer?"
    items = await items_in_context(
        store,
        ContextRecall(
            user_id=user, persona_id=None, team_id=None, query="Madeira", limit=5, include=("turns",)
        ),
    )
    speakers = {item.turn.text: item.turn.speaker for item in items if item.turn is not None}
    assert speakers["Madeira, twice!"] == "Ada"


async def stored_twice(store: Store, second: str) -> uuid.UUID:
    """A new user's two-message conversation, written by two events as it is sent once per
    participant; the user."""
    user, channel = uuid.uuid4(), uuid.uuid4()
    for _ in range(2):
        await store.writes.write_event(
            event_id=uuid.uuid4(),
            memories=[],
            turns=[
                turn(user, 1, "the lighthouse keeper waved", channel=channel, speaker="Ada"),
                turn(user, 2, second, channel=channel, speaker="Bea"),
            ],
        )
    return user


async def test_a_message_stored_by_two_events_of_one_conversation_is_recalled_once(store: Store) -> None:
    user = await stored_twice(store, "the harbour lighthouse again")
    hits = await store.turns.recall_turns(user, None, "lighthouse", 10)
    assert sorted(h.turn.text for h in hits) == [
        "the harbour lighthouse again",
        "the lighthouse keeper waved",
    ]


async def window_shares(store: Store, user: uuid.UUID, text: str) -> dict[str, float]:
    """The query words' shares of the context's recent turns as the backend hands them to the
    recall's `focus` (which keeps the query's own vector)."""
    shares: list[dict[str, float]] = []

    async def focus(word_share: Mapping[str, float]) -> list[float] | None:
        shares.append(dict(word_share))
        return None

    asked = TurnRecall(
        user_id=user,
        persona_id=None,
        team_id=None,
        query=text,
        text=text,
        vector=hashing_vector(text, DIM),
        focus=focus,
        k=10,
        limit=10,
    )
    await store._backend.recall_turns(asked)  # type: ignore[attr-defined]
    [share] = shares
    return share


async def test_the_window_statistics_count_the_stored_turns(store: Store) -> None:
    user = await stored_twice(store, "the harbour at dusk")
    # two messages, each stored twice, one with each word
    assert await window_shares(store, user, "lighthouse keeper") == {"lighthouse": 0.5, "keeper": 0.5}
    # and one stored once: five stored turns, a copy counting as its message again (both stores)
    await store.writes.write_event(
        event_id=uuid.uuid4(), memories=[], turns=[turn(user, 1, "the keeper slept", channel=uuid.uuid4())]
    )
    assert await window_shares(store, user, "lighthouse keeper") == {"lighthouse": 0.4, "keeper": 0.6}
    # nobody else's turns: an empty window
    assert not any((await window_shares(store, uuid.uuid4(), "lighthouse")).values())


async def test_the_backend_ranks_by_the_vector_its_focus_gives(store: Store) -> None:
    user, channel = uuid.uuid4(), uuid.uuid4()
    said = ["the lighthouse keeper waved", "we ate in the harbour"]
    await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[],
        turns=[
            dataclasses.replace(turn(user, i + 1, text, channel=channel), embedding=hashing_vector(text, DIM))
            for i, text in enumerate(said)
        ],
    )

    async def harbour(word_share: Mapping[str, float]) -> list[float] | None:
        return hashing_vector("we ate in the harbour", DIM)

    def asked(focus: FocusedVector | None) -> TurnRecall:
        # no turn holds the query's word: the vector alone ranks
        return TurnRecall(
            user_id=user,
            persona_id=None,
            team_id=None,
            query="quasar",
            text="quasar",
            vector=hashing_vector("the lighthouse keeper waved", DIM),
            focus=focus,
            k=10,
            limit=1,
        )

    for focus, first in ((None, said[0]), (harbour, said[1])):
        hits = await store._backend.recall_turns(asked(focus))  # type: ignore[attr-defined]
        assert [h.turn.text for h in hits] == [first]


async def test_a_long_turn_is_found_by_its_words_and_counted_in_the_statistics(store: Store) -> None:
    # on Postgres a turn this long has no full text in the context index (`window_tsv` NULL): recall
    # reads it from the row, in the statistics and in the ranking alike
    user, channel = uuid.uuid4(), uuid.uuid4()
    long_text = "the lighthouse keeper kept a log of " + " ".join(f"ship{n} sailed" for n in range(120))
    await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[],
        turns=[
            turn(user, 1, long_text, channel=channel),
            turn(user, 2, "we talked about the harbour", channel=channel),
            turn(user, 3, "the lighthouse was closed", channel=channel),
        ],
    )
    assert await window_shares(store, user, "lighthouse keeper") == {"lighthouse": 2 / 3, "keeper": 1 / 3}
    hits = await store.turns.recall_turns(user, None, "keeper", 1)
    assert [h.turn.text for h in hits] == [long_text]


async def test_a_recall_guesses_the_words_shares_from_the_last_and_a_wrong_guess_changes_nothing(
    store: Store,
) -> None:
    # every turn names the lighthouse, one the harbour: the query is embedded without "lighthouse"
    user, channel = uuid.uuid4(), uuid.uuid4()
    said = [f"the lighthouse log, entry {n}" for n in range(11)] + ["the lighthouse by the harbour"]
    await store.writes.write_event(
        event_id=uuid.uuid4(),
        memories=[],
        turns=[
            dataclasses.replace(turn(user, i + 1, text, channel=channel), embedding=hashing_vector(text, DIM))
            for i, text in enumerate(said)
        ],
    )

    async def recalled() -> list[tuple[str, float]]:
        hits = await store.turns.recall_turns(user, None, "lighthouse harbour", 3)
        return [(h.turn.text, h.score) for h in hits]

    first = await recalled()  # nothing known: the query's own vector, then the focused one
    statements = count_statements(store)
    again = await recalled()  # the shares the first counted guess right
    if statements is not None:
        assert statements() == 1
    # a wrong guess (harbour everywhere, lighthouse nowhere) is corrected by the recall's own count
    store.turns._known_shares.remember((user, None, None), {"lighthouse": 0.0, "harbour": 1.0})
    wrong = await recalled()
    assert first[0][0] == "the lighthouse by the harbour"
    assert first == again == wrong


def count_statements(store: Store) -> Callable[[], int] | None:
    """On Postgres, how many statements the store's recalls run from now on (None on SQLite)."""
    connections = getattr(store._backend, "_connections", None)  # type: ignore[attr-defined]
    if connections is None:
        return None
    fetch = connections.fetch
    calls: list[str] = []

    async def counted(sql: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(sql)
        return await fetch(sql, *args, **kwargs)

    connections.fetch = counted
    return lambda: len(calls)
