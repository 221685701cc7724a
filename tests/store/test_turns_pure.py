"""Pure parts of conversation memory: `include`, the window rankings, the turn lines, and the
evidence numbers of an LLM item."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from extraction.validate import evidence_numbers, parse_output
from store.core.turns import KnownShares
from store.model import Memory, Turn, TurnHit, TurnRole
from store.postgres.turns_sql import window_rows
from store.rules.hint import said_on, turn_bullet, turn_line
from store.rules.turn_recall import fuse_turn_scores, parse_include
from store.sqlite.turn_ranking import (
    bm25_ranking,
    bm25_scores,
    once_each,
    turn_window,
    vector_ranking,
    window_term_stats,
)
from tests.factories import past_turn, stored_fact

NOW = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)


def memory(key: str, value: str, observed: datetime | None = None) -> Memory:
    return stored_fact(key, value, at=NOW, observed_at=observed)


def turn(text: str, role: TurnRole = "user") -> Turn:
    return past_turn(text, role=role, at=NOW)


def test_include_takes_memories_and_or_turns() -> None:
    assert parse_include(None) == ("memories", "turns")
    assert parse_include(["turns", "turns"]) == ("turns",)
    with pytest.raises(ValueError, match="memories and/or turns"):
        parse_include(["facts"])


def test_window_rankings_rank_by_words_and_by_cosine() -> None:
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    texts = {a: "my sister lives in Porto", b: "the weather in Porto is rainy today", c: "hello"}
    assert bm25_ranking("where does my sister live", texts, 5) == [a]
    assert bm25_ranking("Porto sister", texts, 5) == [a, b]
    assert bm25_ranking("the", texts, 5) == []  # stop words only
    vectors = {a: [1.0, 0.0], b: [0.6, 0.8], c: [0.0, 1.0]}
    assert vector_ranking(vectors, [1.0, 0.1], 2) == [a, b]


def test_evidence_numbers_keep_what_names_a_message_and_never_reject_the_fact() -> None:
    assert evidence_numbers([3, 1, 3, True, "2", -1, 0, 4.0, 2.5], 8) == (3, 1, 4)
    assert evidence_numbers("3", 8) == () and evidence_numbers(None, 8) == ()
    assert evidence_numbers(2, 8) == (2,)
    assert evidence_numbers(list(range(1, 50)), 8) == tuple(range(1, 9))
    item = '{"key": "diet", "value": "Is vegan", "confidence": 0.9, "scope": "user", "evidence": "x"}'
    reply = '{"memories": [' + item + "]}"
    [candidate], rejected = parse_output(reply, ("user",))
    assert candidate.evidence == () and rejected == []


def stored_turn(channel: uuid.UUID, position: int, text: str) -> TurnHit:
    return TurnHit(turn=replace(turn(text), channel_id=channel, position=position), score=1.0)


def test_a_message_stored_twice_is_one_hit_with_its_copies_best_and_the_newest_copy_shown() -> None:
    one, other = uuid.uuid4(), uuid.uuid4()
    sailed = replace(turn("we sailed"), channel_id=one, position=3)
    copy = replace(sailed, id=uuid.uuid4(), event_id=uuid.uuid4(), at=sailed.at + timedelta(seconds=1))
    elsewhere = replace(sailed, id=uuid.uuid4(), channel_id=other)  # another conversation: another message
    again = replace(sailed, id=uuid.uuid4(), text="we sailed again")  # the same place, other words
    turns = {t.id: t for t in (sailed, copy, elsewhere, again)}
    scores = {
        "vector": {sailed.id: 0.9, elsewhere.id: 0.2, again.id: 0.1, copy.id: 0.5},
        "text": {copy.id: 3.0, again.id: 1.0},
    }
    hits = fuse_turn_scores(turns, scores, 10, query="Where did we sail?", now=NOW)
    assert hits[0].turn.id == copy.id  # the newer copy shows the message
    assert {hit.turn.id for hit in hits} == {copy.id, elsewhere.id, again.id}
    assert hits[0].sources == ("vector", "text") and hits[0].cosine == 0.9
    assert fuse_turn_scores(turns, scores, 2, query="Where did we sail?", now=NOW) == hits[:2]


def test_a_word_only_around_a_turn_counts_less_than_its_own() -> None:
    own, around = uuid.uuid4(), uuid.uuid4()
    words = {own: frozenset({"madeira", "sailing"}), around: frozenset({"twice"})}
    lengths = {own: 2, around: 2}
    context = {around: frozenset({"madeira", "sailing"})}
    assert bm25_scores("sailing madeira", words, lengths, 5, context_words=context) == [own, around]
    assert bm25_scores("sailing madeira", words, lengths, 5) == [own]


def test_a_turn_line_shows_the_speaker_else_the_role() -> None:
    said = turn("  Madeira,\n twice! ")
    assert turn_line(said) == "user: Madeira, twice!"
    named = replace(said, speaker="Ada")
    assert turn_line(named) == "Ada: Madeira, twice!"
    assert turn_bullet(named) == "- [4 March 2026] Ada: Madeira, twice!"
    assert said_on(datetime(2023, 5, 8, 23, 59, tzinfo=UTC)) == "8 May 2023"


def test_turn_scores_fuse_as_memory_scores_do_and_a_repeated_message_counts_once() -> None:
    session, elsewhere = uuid.uuid4(), uuid.uuid4()
    asked = replace(turn("we sailed to Madeira"), channel_id=session, position=2)
    repeat = replace(asked, id=uuid.uuid4(), event_id=uuid.uuid4())  # the other event's copy
    beside = replace(turn("it rained all week"), channel_id=session, position=3)
    far = replace(turn("it rained all week too"), channel_id=elsewhere, position=3)
    turns = {t.id: t for t in (asked, repeat, beside, far)}
    scores = {
        "vector": {asked.id: 0.9, repeat.id: 0.9, beside.id: 0.5, far.id: 0.5},
        "text": {asked.id: 2.0, repeat.id: 2.0},
    }
    hits = fuse_turn_scores(turns, scores, 10, query="Where did they sail?", now=NOW)
    assert hits[0].turn.text == "we sailed to Madeira"
    assert len([h for h in hits if h.turn.text == "we sailed to Madeira"]) == 1
    # equally similar, but said in the conversation of the best hit: it leads the other
    assert [h.turn.id for h in hits[1:]] == [beside.id, far.id]
    assert hits[0].sources == ("vector", "text")


def test_a_window_ranks_each_message_once_and_counts_word_shares_over_the_stored_turns() -> None:
    session = uuid.uuid4()
    sailed = replace(turn("we sailed to Madeira"), channel_id=session, position=2, speaker="Ada")
    copy = replace(sailed, id=uuid.uuid4(), event_id=uuid.uuid4())  # the other event's copy
    rained = replace(turn("it rained all week"), channel_id=session, position=3, speaker="Bea")
    assert once_each([sailed, copy, rained]) == [0, 2]
    window = turn_window(
        [sailed, copy, rained],
        ["[1, 0]", "[1, 0]", "[0, 1]"],
        2,
        search_texts=[
            "Ada: we sailed to Madeira",
            "Ada: we sailed to Madeira",
            "Ada: sailed\nBea: it rained",
        ],
    )
    assert window.ids == (sailed.id, rained.id)
    assert window.matrix.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    stats = window_term_stats(window, "Did Ada see Madeira?")
    # the shares count stored turns, as Postgres does without sorting its sample: the copy too
    assert stats.documents == 3
    # a word said around a turn counts for it: the name is in every turn's full text
    assert stats.word_share["ada"] == 1.0 and stats.word_share["madeira"] == 2 / 3
    assert stats.word_share["see"] == 0.0
    assert stats.mean_length == (5 + 5 + 7) / 3
    assert window_term_stats(turn_window([], [], 2), "Ada").documents == 0


def turn_row(turn: Turn, source: str, score: float) -> dict[str, object]:
    """A row of the Postgres turn recall statement for `turn` in one ranking."""
    fields = {name: getattr(turn, name) for name in ("id", "channel_id", "event_id", "user_id")}
    fields |= {name: getattr(turn, name) for name in ("persona_id", "team_id", "role", "text", "at")}
    fields |= {"position": turn.position, "speaker": turn.speaker}
    return fields | {"source": source, "rank": 1, "score": score, "word": None, "share": None}


def test_the_recall_rows_give_each_ranking_in_order_and_the_words_shares() -> None:
    a, b, c = turn("the lighthouse"), turn("the harbour"), turn("the quay")
    stats = {"source": "stats", "word": "lighthouse", "share": 0.25}
    found = window_rows(
        [turn_row(a, "vector", 0.9), turn_row(b, "vector", 0.5), turn_row(b, "text", 2.0), stats]
    )
    assert found.word_share == {"lighthouse": 0.25}
    assert list(found.turns) == [a.id, b.id]
    assert found.scores == {"vector": {a.id: 0.9, b.id: 0.5}, "text": {b.id: 2.0}}
    # the focused vector's ranking replaces the first one, still first; the text ranking stays
    again = found.with_vector_ranking(window_rows([turn_row(c, "vector", 0.7)]))
    assert list(again.turns) == [c.id, b.id]
    assert again.scores == {"vector": {c.id: 0.7}, "text": {b.id: 2.0}}
    assert again.word_share == found.word_share
    # a focused vector that ranks nothing leaves no vector scores
    assert window_rows([stats]).with_vector_ranking(window_rows([])).scores == {}


def test_the_known_shares_keep_the_newest_count_within_their_bounds() -> None:
    known = KnownShares(max_contexts=2, max_words=2)
    a, b, c = ((uuid.uuid4(), None, None) for _ in range(3))
    words = ["lighthouse", "harbour", "quay", "dock"]
    known.remember(a, {"lighthouse": 0.9, "harbour": 0.1})
    known.remember(a, {"lighthouse": 0.5, "quay": 0.2})
    # the newest count of a word wins; past two words the least recently counted goes
    assert known.guess(a, words) == {"lighthouse": 0.5, "quay": 0.2}
    assert known.guess(a, ["quay"]) == {"quay": 0.2}
    known.remember(b, {"quay": 0.3})
    known.guess(a, words)  # a guess does not make a context recent: a recall's count does
    known.remember(c, {"dock": 0.4})
    assert known.guess(a, words) == {}
    assert known.guess(b, words) == {"quay": 0.3}
    assert known.guess(c, words) == {"dock": 0.4}


def test_the_known_shares_hold_no_word_of_anyones() -> None:
    known = KnownShares()
    known.remember((uuid.uuid4(), None, None), {"lighthouse": 0.9})
    assert "lighthouse" not in repr(vars(known))
