"""Pure parts of conversation memory: the merged ranking, `include`, the window rankings, the
two-section hint, and the evidence numbers of an LLM item."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from extraction.validate import evidence_numbers, parse_output
from store.model import Memory, RecallHit, RecallItem, Turn, TurnHit, TurnRole
from store.rules.hint import EARLIER_HEADER, KNOWN_HEADER, build_hint, said_on, turn_bullet, turn_line
from store.rules.turn_recall import (
    ItemMerge,
    distinct_turns,
    fuse_turn_scores,
    leading_memories,
    merge_recall,
    parse_include,
    without_quoted_turns,
)
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


def fact_hit(key: str, cosine: float | None, **fields: object) -> RecallHit:
    return RecallHit(memory=replace(memory(key, "v"), **fields), score=1.0, cosine=cosine)  # type: ignore[arg-type]


def turn_hit(text: str, cosine: float | None, **fields: object) -> TurnHit:
    return TurnHit(turn=replace(turn(text), **fields), score=1.0, cosine=cosine)  # type: ignore[arg-type]


def test_facts_about_as_close_as_the_best_turn_lead_at_most_lead_max_whatever_the_limit() -> None:
    merge = ItemMerge(lead_margin=0.1, lead_max=3)
    facts = [fact_hit(f"k{i}", 0.6) for i in range(5)]
    turns = [turn_hit(f"t{i}", 0.65 - i * 0.01) for i in range(20)]
    merged = merge_recall(facts, turns, 10, merge=merge)
    # 3 facts lead, in their own order; the rest interleave by rank
    assert [i.kind for i in merged[:4]] == ["memory"] * 3 + ["turn"]
    assert [i.memory.key for i in merged[:3] if i.memory] == ["k0", "k1", "k2"]
    assert len(merged) == 10
    assert [i.turn.text for i in merged if i.turn] == [f"t{i}" for i in range(7)]
    # a longer list starts as the shorter one does
    assert merge_recall(facts, turns, 20, merge=merge)[:10] == merged
    assert [i.kind for i in merge_recall(facts, turns, 2, merge=merge)] == ["memory"] * 2


def test_a_fact_far_less_close_than_the_best_turn_does_not_lead() -> None:
    merge = ItemMerge(lead_margin=0.1, lead_max=5)
    facts = [fact_hit("close", 0.6), fact_hit("far", 0.3), fact_hit("close again", 0.6)]
    turns = [turn_hit(f"t{i}", 0.65) for i in range(30)]
    assert leading_memories(facts, turns, 10, merge) == [0, 2]
    merged = merge_recall(facts, turns, 10, merge=merge)
    assert [i.memory.key for i in merged[:2] if i.memory] == ["close", "close again"]
    # the rest by rank: a fact's first rank after the lead scores as a turn's 34th, past the limit
    assert [i.kind for i in merged[2:]] == ["turn"] * 8


def test_a_fact_found_by_full_text_alone_or_with_no_turns_to_compare() -> None:
    merge = ItemMerge(lead_margin=0.1, lead_max=5)
    turns = [turn_hit("t", 0.5)]
    assert leading_memories([fact_hit("text only", None), fact_hit("k", 0.45)], turns, 10, merge) == [1]
    # no turn has a cosine (history off, or turns found by full text alone): facts lead
    assert leading_memories([fact_hit("k", 0.2)], [turn_hit("t", None)], 10, merge) == [0]
    assert leading_memories([fact_hit("k", 0.2)], [], 10, merge) == [0]
    assert leading_memories([fact_hit("k", 0.9)], turns, 10, ItemMerge(lead_margin=None)) == []


def test_a_turn_a_fact_above_it_quotes_is_left_out_and_the_next_one_takes_its_place() -> None:
    channel = uuid.uuid4()
    said = "I went   vegan last spring"
    quoting = fact_hit("diet", 0.9, evidence="user: I went vegan last spring", source_channel_id=channel)
    turns = [
        turn_hit(said, 0.8, channel_id=channel),
        turn_hit(said, 0.8),  # the same words in another conversation: not what the fact quotes
        turn_hit("Lyon has good vegan places", 0.7, channel_id=channel),
    ]
    merged = merge_recall([quoting], turns, 3)
    assert merged[0].memory is not None
    assert [i.turn.channel_id == channel for i in merged[1:] if i.turn] == [False, True]
    assert [i.turn.text for i in merged[1:] if i.turn] == [said, "Lyon has good vegan places"]
    # a turn placed above the fact stays: only what comes after a quoting fact repeats it
    assert [i.kind for i in without_quoted_turns(merge_recall([], turns, 3), 3)] == ["turn"] * 3


def test_merged_recall_keeps_each_lists_order_and_the_limit() -> None:
    facts = [fact_hit(f"k{i}", 0.1) for i in range(3)]
    turns = [turn_hit(f"t{i}", 0.9) for i in range(3)]
    merged = merge_recall(facts, turns, 6)
    assert [i.memory.key for i in merged if i.memory] == ["k0", "k1", "k2"]
    assert [i.turn.text for i in merged if i.turn] == ["t0", "t1", "t2"]
    assert merge_recall([], turns, 2)[0].turn == turns[0].turn
    assert len(merge_recall(facts, turns, 4)) == 4
    assert [i.cosine for i in merge_recall(facts, [], 1)] == [0.1]


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


def test_the_hint_has_what_is_known_dated_and_earlier_conversations_within_the_budget() -> None:
    items = [
        RecallItem(kind="memory", score=1.0, memory=memory("diet", "Is vegan", observed=NOW)),
        RecallItem(kind="turn", score=0.9, turn=turn("I went vegan after the marathon\nin Porto")),
        RecallItem(kind="memory", score=0.8, memory=memory("city", "Lives in Lyon")),
    ]
    hint = build_hint(items)
    assert hint == (
        f"{KNOWN_HEADER}\n- diet: Is vegan (said 4 March 2026)\n- city: Lives in Lyon\n\n"
        f"{EARLIER_HEADER}\n- [4 March 2026] user: I went vegan after the marathon in Porto"
    )
    crowded = [RecallItem(kind="memory", score=1.0, memory=memory(f"k{i}", "x" * 200)) for i in range(60)]
    crowded += [RecallItem(kind="turn", score=0.5, turn=turn("y" * 1000)) for _ in range(10)]
    text = build_hint(crowded, max_chars=6000)
    assert len(text) <= 6000 and EARLIER_HEADER in text and KNOWN_HEADER in text
    assert text.count("\n- [4 March 2026]") <= 5
    assert build_hint([]) == ""


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


def test_distinct_turns_drops_a_message_repeated_lower_and_keeps_the_order() -> None:
    one, other = uuid.uuid4(), uuid.uuid4()
    hits = [
        stored_turn(one, 3, "we sailed"),
        stored_turn(one, 4, "to Madeira"),
        stored_turn(one, 3, "we sailed"),  # the same message, stored by the other event
        stored_turn(other, 3, "we sailed"),  # another conversation: another message
        stored_turn(one, 3, "we sailed again"),  # the same place, other words: another message
    ]
    kept = distinct_turns(hits)
    assert kept == [hits[0], hits[1], hits[3], hits[4]]
    assert distinct_turns([]) == []


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


def test_a_window_holds_each_message_once_and_counts_word_shares_over_them() -> None:
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
    assert stats.documents == 2
    # a word said around a turn counts for it: the name is in both turns' full text
    assert stats.word_share["ada"] == 1.0 and stats.word_share["madeira"] == 0.5
    assert stats.word_share["see"] == 0.0
    assert window_term_stats(turn_window([], [], 2), "Ada").documents == 0
