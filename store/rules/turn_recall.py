"""Conversation turns in recall, the part both stores share and no database decides: how many of a
context's turns a recall ranks, what makes two stored turns one message, how a turn recall's
branch scores fuse (as the memory recall's do), and how recall merges memories and turns into one
list (`merge_recall`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from store.model import Memory, RecallHit, RecallInclude, RecallItem, Turn, TurnHit
from store.rules.evidence import quoted_text
from store.rules.hint import evidence_said
from store.rules.recall import ScoreFusion, fuse_scores, query_cues

# how many of a context's most recent turns a recall ranks (bounds its cost whatever the context's
# size; with 90 days of history, a context needs ~45 turns a day to outgrow it)
TURN_WINDOW = 4000
# how many of a context's most recent turns (each message once) estimate the query words'
# document frequencies (idf, and the words most turns hold): as the memory recall samples its own
TURN_STATS_SAMPLE = 1000
# a turn's text as stored (after redaction): a message longer than this keeps its beginning
TURN_MAX_CHARS = 4000
# how recall merges memories and turns into one list (`merge_recall`): a memory about as close to
# the question as the best turn (its cosine at least the best turn's minus `LEAD_MARGIN`) leads, at
# most `LEAD_MAX` of them whatever the limit (so a longer list starts as a shorter one does); the
# rest are merged by rank, each scored `weight / (k + rank in its own list)`. The lead was chosen on
# LoCoMo dev with the reference extractor (facts as a capable model writes them;
# bench/tune_product.py) among the variants that cost the rules extractor nothing on dev; the rank
# constants were the rules extractor's choice before there was a lead
ITEM_RRF_K = 10
MEMORY_ITEM_WEIGHT = 0.25
TURN_ITEM_WEIGHT = 1.0
LEAD_MARGIN = 0.1
LEAD_MAX = 6
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
        key=f"{turn.channel_id} {turn.position} {turn.text}",
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


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemMerge:
    """How recall merges its memories and turns into one list: which memories lead (`lead_margin`,
    `lead_max`) and how the rest interleave (`k`, `memory_weight`, `turn_weight`)."""

    lead_margin: float | None = LEAD_MARGIN  # None: no memory leads for its closeness alone
    lead_max: int = LEAD_MAX
    k: int = ITEM_RRF_K
    memory_weight: float = MEMORY_ITEM_WEIGHT
    turn_weight: float = TURN_ITEM_WEIGHT


ITEM_MERGE = ItemMerge()


def leading_memories(
    memories: Sequence[RecallHit], turns: Sequence[TurnHit], limit: int, merge: ItemMerge = ITEM_MERGE
) -> list[int]:
    """Which of the memories lead the merged list (their indexes, in the memories' own order):
    those whose cosine with the query is at least the best turn's minus `lead_margin` (every one
    with a cosine when no turn has one), at most `lead_max` and `limit`. A memory found by full
    text alone has no cosine and does not lead."""
    if merge.lead_margin is None or not memories:
        return []
    cap = min(merge.lead_max, limit)
    best_turn = max((t.cosine for t in turns if t.cosine is not None), default=None)
    floor = None if best_turn is None else best_turn - merge.lead_margin
    leading = [
        index
        for index, hit in enumerate(memories)
        if hit.cosine is not None and (floor is None or hit.cosine >= floor)
    ]
    return leading[:cap]


def merge_recall(
    memories: Sequence[RecallHit],
    turns: Sequence[TurnHit],
    limit: int,
    *,
    merge: ItemMerge = ITEM_MERGE,
) -> list[RecallItem]:
    """Memories and turns in one ranked list of at most `limit`: the memories that answer the
    question about as well as the best turn lead (`leading_memories`); the rest follow merged by
    rank, each scored `weight / (k + rank in its own list)`, and a turn a memory above it quotes is
    left out (`without_quoted_turns`). Each list's own order is kept among its items that follow."""
    leading = leading_memories(memories, turns, limit, merge)
    items = [
        RecallItem(
            kind="memory",
            score=merge.memory_weight / (merge.k + rank),
            memory=hit.memory,
            sources=hit.sources,
            cosine=hit.cosine,
        )
        for rank, hit in enumerate(memories, start=1)
    ]
    chosen = set(leading)
    leaders = [items[index] for index in leading]
    rest = [item for index, item in enumerate(items) if index not in chosen]
    rest += [
        RecallItem(
            kind="turn",
            score=merge.turn_weight / (merge.k + rank),
            turn=hit.turn,
            sources=hit.sources,
            cosine=hit.cosine,
        )
        for rank, hit in enumerate(turns, start=1)
    ]
    # stable: at equal score a memory stays before a turn
    rest.sort(key=lambda item: -item.score)
    return without_quoted_turns(leaders + rest, limit)


def without_quoted_turns(items: Sequence[RecallItem], limit: int) -> list[RecallItem]:
    """The first `limit` of `items`, leaving out each turn that a memory placed above it already
    quotes (its evidence holds the turn's text, from the same conversation): turns add what the
    facts do not hold."""
    quoted: set[tuple[uuid.UUID, str]] = set()
    kept: list[RecallItem] = []
    for item in items:
        if len(kept) >= limit:
            break
        if item.memory is not None:
            if item.memory.source_channel_id is not None:
                channel = item.memory.source_channel_id
                quoted.update((channel, text) for text in evidence_said(item.memory.evidence))
        elif item.turn is not None and (item.turn.channel_id, quoted_text(item.turn.text)) in quoted:
            continue
        kept.append(item)
    return kept


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
