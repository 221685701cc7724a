"""Conversation turns in recall, the part both stores share and no database decides: how many of a
context's turns a recall ranks, what makes two stored turns one message, how a turn recall's
branch scores fuse (as the memory recall's do), and how recall lists memories, then the turns that
add something new (`facts_then_turns`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime

from store.model import Memory, RecallHit, RecallInclude, RecallItem, Revision, Turn, TurnHit
from store.rules.novelty import new_turn_indexes
from store.rules.recall import ScoreFusion, fuse_scores, query_cues

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


def same_message(turn: Turn) -> tuple[uuid.UUID, int, str]:
    """What makes two stored turns one message: the conversation, the position and the text (an
    event sent once per participant stores each of its messages once per event)."""
    return (turn.channel_id, turn.position, turn.text)


def distinct_turns(hits: Sequence[TurnHit]) -> list[TurnHit]:
    """The hits without a repeat of a message ranked higher (`same_message`), order kept."""
    seen: set[tuple[uuid.UUID, int, str]] = set()
    out: list[TurnHit] = []
    for hit in hits:
        key = same_message(hit.turn)
        if key not in seen:
            seen.add(key)
            out.append(hit)
    return out


def turn_document(turn: Turn) -> Memory:
    """A turn as the score fusion reads a candidate (`store.rules.recall.fuse_scores`): its text the
    value, its conversation the source, when it was said its time, and one key per message (its
    conversation, position and text), so a message stored by two events is one result."""
    return Memory(
        id=turn.id,
        scope="user",
        owner_id=turn.user_id,
        user_id=None,
        # the conversation as its 32 hex digits: one key per message as its hyphenated form would
        # be, at a third of the cost (`str` of a UUID formats its `hex`, then slices and joins it)
        key=f"{turn.channel_id.hex} {turn.position} {turn.text}",
        value=turn.text,
        source_channel_id=turn.channel_id,
        confidence=1.0,
        status="active",
        created_at=turn.at,
        updated_at=turn.at,
    )


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
    memory recall fuses its own, with the query's cues (its time window, "When …?"), into hits,
    best first, each message once (`distinct_turns`)."""
    cues = query_cues(query, now=now)
    hits = fuse_scores(
        [turn_document(turn) for turn in turns.values()],
        {name: {tid: s for tid, s in found.items() if tid in turns} for name, found in scores.items()},
        limit=limit,
        fusion=fusion,
        time_window=cues.time_window,
        when=cues.when,
    )
    return distinct_turns(
        [
            TurnHit(turn=turns[hit.memory.id], score=hit.score, sources=hit.sources, cosine=hit.cosine)
            for hit in hits
        ]
    )


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
        [hit.turn for hit in turns], message=message, shown=[hit.memory for hit in shown]
    )
    for index in fresh[:turn_limit]:
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
