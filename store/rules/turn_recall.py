"""Conversation turns in recall, the part both stores share and no database decides: how many of a
context's turns a recall ranks, what makes two stored turns one message, how a turn recall's
branch scores fuse (as the memory recall's do), and how recall lists memories, then the turns that
add something new (`facts_then_turns`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from store.model import RecallHit, RecallInclude, RecallItem, Revision, Turn, TurnHit
from store.rules.novelty import new_turn_indexes
from store.rules.recall import ScoreFusion, fused_scores, merged_groups, query_cues

# how many of a context's most recent turns a recall ranks (bounds its cost whatever the context's
# size; with 90 days of history, a context needs ~45 turns a day to outgrow it)
TURN_WINDOW = 4000
# how many of a context's most recent stored turns estimate the query words' document frequencies
# (idf, and the words most turns hold), as the memory recall samples its own: each stored turn
# counts, so a message an event sent again counts twice (both numbers grow alike, and counting it
# once would cost a sort of the whole sample per recall)
TURN_STATS_SAMPLE = 1000
# a turn's text as stored (after redaction): a message longer than this keeps its beginning
TURN_MAX_CHARS = 4000
# how a turn recall mixes its vector and full-text scores and the query's cues: the memory recall's
# score fusion (`store.rules.recall.fuse_scores`), whose constants the LoCoMo dialog unit chose on dev
# (turns of one conversation asked together lift each other; a "When …?" question lifts turns
# naming a time)
TURN_FUSION = ScoreFusion()
# full text: a query word found only among the turns around a turn (its `search_text`) counts this
# much beside one found in the turn's own text (the dialog unit's key weight, chosen on LoCoMo dev)
CONTEXT_WORD_WEIGHT = 0.75
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def same_message(turn: Turn) -> tuple[int, int, str]:
    """What makes two stored turns one message: the conversation (its uuid's integer, which hashes
    in C), the position and the text (an event sent once per participant stores each of its
    messages once per event)."""
    return (turn.channel_id.int, turn.position, turn.text)


class TurnCandidate(NamedTuple):
    """A turn as the score fusion reads a candidate (`store.rules.recall.Candidate`): its text the
    key and value, its conversation the source, when it was said its time."""

    key: str
    value: str
    source_channel_id: int  # the conversation's uuid as an integer (`uuid.UUID.int`)
    created_at: datetime


def fuse_turn_scores(
    turns: Mapping[uuid.UUID, Turn],
    scores: Mapping[str, Mapping[uuid.UUID, float]],
    limit: int,
    *,
    query: str,
    now: datetime,
    fusion: ScoreFusion = TURN_FUSION,
) -> list[TurnHit]:
    """A turn recall's branch scores (`vector`: cosine, `text`: full-text relevance) fused as the
    memory recall fuses its own (`store.rules.recall.fused_scores`), with the query's cues (its
    time window, "When …?"), into at most `limit` hits, best first, each message once
    (`same_message`: its copies' best score and cosine, their sources, the most recent copy shown)."""
    cues = query_cues(query, now=now)
    by_id = {turn.id.int: turn for turn in turns.values()}
    # the conversation by its uuid's integer: fusion looks it up for every candidate, and a uuid's
    # `__hash__` and `__eq__` are Python calls
    candidates = {
        key: TurnCandidate(
            key=turn.text, value=turn.text, source_channel_id=turn.channel_id.int, created_at=turn.at
        )
        for key, turn in by_id.items()
    }
    keyed = {
        name: {key: score for tid, score in found.items() if (key := tid.int) in by_id}
        for name, found in scores.items()
    }
    scored, cosines = fused_scores(
        candidates, keyed, fusion=fusion, time_window=cues.time_window, when=cues.when
    )
    messages: dict[tuple[int, int, str], list[int]] = {}
    for key, turn in by_id.items():
        messages.setdefault(same_message(turn), []).append(key)
    # of a message's copies the most recent is shown, then the lowest id (as among equal memories)
    merged = merged_groups(
        messages.values(), scored, cosines, order=lambda key: (_EPOCH - by_id[key].at, key)
    )
    return [
        TurnHit(turn=by_id[shown], score=score, sources=sources, cosine=cosine)
        for score, shown, sources, cosine in merged[:limit]
    ]


def facts_then_turns(
    memories: Sequence[RecallHit],
    turns: Sequence[TurnHit],
    *,
    limit: int,
    turn_limit: int,
    message: str,
    pending: Mapping[uuid.UUID, Revision] | None = None,
) -> list[RecallItem]:
    """Recall's one list: the first `limit` memories by relevance, then at most `turn_limit` turns
    that add something new beside them for the `message` (`store.rules.novelty`: no restatement of
    it, no filler, no repeat, none a listed memory quotes). Each kind keeps its own order and limit,
    so a turn never takes a memory's place; `pending`: the memories' changes awaiting review."""
    shown = memories[:limit]
    changes = pending or {}
    items = [
        RecallItem(
            kind="memory",
            score=hit.score,
            memory=hit.memory,
            sources=hit.sources,
            cosine=hit.cosine,
            pending_change=changes.get(hit.memory.id),
        )
        for hit in shown
    ]
    if turn_limit <= 0:
        return items
    fresh = new_turn_indexes(
        [hit.turn for hit in turns], message=message, shown=[hit.memory for hit in shown], limit=turn_limit
    )
    for index in fresh:
        hit = turns[index]
        items.append(
            RecallItem(kind="turn", score=hit.score, turn=hit.turn, sources=hit.sources, cosine=hit.cosine)
        )
    return items


def parse_include(values: Sequence[str] | None) -> tuple[RecallInclude, ...]:
    """The `include` of a recall request: `memories`, `turns` or both (None or empty: both);
    raises ValueError naming an unknown value."""
    if not values:
        return ("memories", "turns")
    chosen: list[RecallInclude] = []
    for value in values:
        kind: RecallInclude
        if value == "memories":
            kind = "memories"
        elif value == "turns":
            kind = "turns"
        else:
            raise ValueError(f"include takes memories and/or turns, got {value!r}")
        if kind not in chosen:
            chosen.append(kind)
    return tuple(chosen)
