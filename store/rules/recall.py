"""Pure recall logic shared by both stores: scope resolution, query cues, BM25 statistics,
reciprocal rank and score fusion, merging the same key across scopes. No I/O: the Postgres and
SQLite stores only fetch candidates and call these functions, so both rank the same way (the
SQLite store's in-process vector and full-text scoring is `store.sqlite.ranking`).

Fusion works on *rankings* (ordered id lists, one per retriever). A memory's score is the sum over
rankings of `weight / (k + rank)` (rank from 1). Memories that share a key (case and whitespace
folded) are one result: the most specific scope's row is shown (persona_user > persona > user),
with the best score of the group and the union of its sources, so an override is never shadowed
by the row it overrides.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

import numpy as np

from store.model import SCOPE_PRIORITY, Memory, OwnerRef, RecallHit, Retriever
from store.rules.cues import (
    TimeWindow,
    asks_when,
    informative_query,
    mentions_time,
    parse_time_cue,
    speaks_for_self,
    states_constraint,
)
from store.rules.keys import embedding_text as embedding_text  # re-exported; store.rules.keys is the one home
from store.rules.keys import normalize_key as normalize_key
from store.rules.terms import is_empty_query

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
RETRIEVERS: tuple[Retriever, ...] = ("hybrid", "vector", "keyword")
RRF_K = 60
DEFAULT_WEIGHTS: Mapping[str, float] = {"vector": 1.0, "text": 1.0, "top": 1.0}
# a candidate's identity inside fusion: its uuid, or the uuid's 128-bit integer (`UUID.int`), which
# orders and compares the same but hashes in C: fusion looks ids up ~30 times per candidate, and a
# uuid's `__hash__` is a Python call each time
CandidateKey = TypeVar("CandidateKey", uuid.UUID, int)


class Candidate(Protocol):
    """What score fusion reads of a candidate (a `Memory`, or a turn as `TurnCandidate` has it):
    its key and value (the cues' words), its conversation and when it was said."""

    @property
    def key(self) -> str: ...

    @property
    def value(self) -> str: ...

    @property
    def source_channel_id(self) -> Hashable | None: ...

    @property
    def created_at(self) -> datetime: ...


def resolve_scopes(user_id: uuid.UUID, persona_id: uuid.UUID | None) -> tuple[OwnerRef, ...]:
    """Owners a recall may read: with a persona its three scopes, without it `user` only."""
    if persona_id is None:
        return (OwnerRef(scope="user", owner_id=user_id),)
    return (
        OwnerRef(scope="persona_user", owner_id=persona_id, user_id=user_id),
        OwnerRef(scope="persona", owner_id=persona_id),
        OwnerRef(scope="user", owner_id=user_id),
    )


def writable_owner(user_id: uuid.UUID, persona_id: uuid.UUID | None) -> OwnerRef:
    """Where an explicit save by this user goes: persona_user with a persona, else user."""
    if persona_id is None:
        return OwnerRef(scope="user", owner_id=user_id)
    return OwnerRef(scope="persona_user", owner_id=persona_id, user_id=user_id)


def candidate_count(limit: int) -> int:
    """How many rows each retriever fetches for `limit` results (merging may drop some)."""
    return max(limit * 3, 30)


def rrf_scores(
    rankings: Mapping[str, Sequence[CandidateKey]],
    *,
    weights: Mapping[str, float] = DEFAULT_WEIGHTS,
    k: int = RRF_K,
) -> dict[CandidateKey, tuple[float, tuple[str, ...]]]:
    """Reciprocal rank fusion: id → (sum of weight/(k+rank), names of the rankings it appears in)."""
    scores: dict[CandidateKey, float] = {}
    sources: dict[CandidateKey, list[str]] = {}
    for name, ranking in rankings.items():
        weight = weights.get(name, 1.0)
        for rank, memory_id in enumerate(ranking, start=1):
            scores[memory_id] = scores.get(memory_id, 0.0) + weight / (k + rank)
            sources.setdefault(memory_id, []).append(name)
    return {mid: (scores[mid], tuple(sources[mid])) for mid in scores}


_SOURCE_ORDER = {"vector": 0, "text": 1, "top": 2}


def _winner_order(memory: Memory) -> tuple[int, float, timedelta, uuid.UUID]:
    # most specific scope, then most confident, then most recent (epoch minus time sorts newest first)
    return (SCOPE_PRIORITY[memory.scope], -memory.confidence, _EPOCH - memory.updated_at, memory.id)


def fuse(
    rows: Iterable[Memory],
    rankings: Mapping[str, Sequence[uuid.UUID]],
    *,
    limit: int,
    weights: Mapping[str, float] = DEFAULT_WEIGHTS,
    k: int = RRF_K,
) -> list[RecallHit]:
    """Fuse rankings by reciprocal rank into at most `limit` hits, one per key, most specific scope shown.

    `rows` must contain every ranked id plus any same-key rows of other scopes (for overrides);
    rows that share no key with a ranked row are ignored."""
    keyed = {name: [mid.int for mid in ranking] for name, ranking in rankings.items()}
    return _merged_by_key(rows, rrf_scores(keyed, weights=weights, k=k), limit=limit)


@dataclass(frozen=True, kw_only=True, slots=True)
class ScoreFusion:
    """How score fusion weighs the branches and the query's cues (measured in bench/README.md)."""

    # defaults chosen on the LoCoMo dev split only (bench/README.md, `bench/tune_fusion.py`)
    vector_weight: float = 0.5  # the rest goes to full text
    time_boost: float = 0.5  # added when a memory's created_at falls in the query's time window
    time_slack: timedelta = timedelta(days=3)
    conversation_boost: float = 0.3  # share of the strong hits coming from the memory's conversation
    conversation_top: int = 10
    # query words found in more than this share of the owner's memories (the user's own name) are
    # dropped from a second query embedding averaged with the first; None: embed the query as is
    focus_share: float | None = 0.1
    # the cosine min-max runs from the best candidate down to the one at this rank (those below
    # score 0), so the vector side's scale does not depend on how many candidates were fetched
    # (`candidate_count`: 3 per result asked); None: down to the last candidate
    vector_floor_rank: int | None = 60
    # full text: how much a query word found only in a memory's key counts beside one found in its
    # value (1: key and value are one text). A key carrying context (the turns around a reply)
    # matches the neighbours' words; the value's own words are the stronger evidence
    key_weight: float = 0.75
    # added when the query asks "When …?" and the memory's value names a time ("yesterday", "last
    # week", a month, a year: `store.rules.cues.mentions_time`); the answer to a when-question is a time,
    # and a memory telling when something happened says so in words like these
    when_boost: float = 0.2
    # added when the message speaks for the person ("What should I cook tonight?") and the memory
    # limits what may be suggested (an allergy, a diet, an injury: `store.rules.cues.states_constraint`):
    # such a fact answers every request it constrains, though its words are far from the message's
    constraint_boost: float = 0.25


FEATURES: tuple[str, ...] = (
    "vector",
    "text",
    "cosine",
    "vector_rank",
    "text_rank",
    "both",
    "time",
    "when",
    "constraint",
)


def candidate_features(
    by_id: Mapping[CandidateKey, Candidate],
    branch_scores: Mapping[str, Mapping[CandidateKey, float]],
    *,
    fusion: ScoreFusion,
    time_window: TimeWindow | None = None,
    when: bool = False,
    personal: bool = False,
) -> dict[CandidateKey, dict[str, float]]:
    """What fusion knows about each candidate (`FEATURES`): `vector` the cosine min-max normalised
    over the candidates (down to the `vector_floor_rank`-th), `text` BM25 over the best one,
    `cosine` the raw cosine, `vector_rank` and `text_rank` 1/rank in each branch, `both` 1 when
    both branches found it, `time` 1 when its created_at is in the query's time window
    (± `time_slack`), `when` 1 when the query asks "When …?" (`when`) and its value names a time
    (`store.rules.cues.mentions_time`), `constraint` 1 when the message speaks for the person
    (`personal`) and the memory states a constraint (`store.rules.cues.states_constraint`)."""
    features: dict[CandidateKey, dict[str, float]] = {}
    for name, scores in branch_scores.items():
        if not scores or name not in ("vector", "text"):
            continue
        if name == "vector":
            normalised = _normalise(scores, min_max=True, floor_rank=fusion.vector_floor_rank)
        else:
            normalised = _normalise(scores, min_max=False)
        ranked = sorted(normalised.items(), key=lambda item: (-item[1], item[0]))
        rank_name, vector = f"{name}_rank", name == "vector"
        for rank, (memory_id, value) in enumerate(ranked, start=1):
            entry = features.get(memory_id)
            if entry is None:  # not `setdefault`: it would make a dict for every candidate
                entry = features[memory_id] = dict.fromkeys(FEATURES, 0.0)
            entry[name] = value
            entry[rank_name] = 1.0 / rank
            if vector:
                entry["cosine"] = float(scores[memory_id])
    window = time_window.widened(fusion.time_slack) if time_window is not None else None
    for memory_id, entry in features.items():
        entry["both"] = 1.0 if entry["vector_rank"] and entry["text_rank"] else 0.0
        memory = by_id.get(memory_id)
        if memory is None:
            continue
        if window is not None and window.contains(memory.created_at):
            entry["time"] = 1.0
        if when and mentions_time(memory.value):
            entry["when"] = 1.0
        if personal and states_constraint(memory.key, memory.value):
            entry["constraint"] = 1.0
    return features


def first_stage_score(entry: Mapping[str, float], fusion: ScoreFusion, branches: int) -> float:
    """A candidate's score before the conversation cue: `vector_weight` mixing plus the time, when and
    constraint boosts."""
    vector_weight = 1.0 if branches == 1 else fusion.vector_weight
    text_weight = 1.0 if branches == 1 else 1.0 - fusion.vector_weight
    return (
        vector_weight * entry["vector"]
        + text_weight * entry["text"]
        + fusion.time_boost * entry["time"]
        + fusion.when_boost * entry["when"]
        + fusion.constraint_boost * entry["constraint"]
    )


def conversation_scores(
    by_id: Mapping[CandidateKey, Candidate], scores: Mapping[CandidateKey, float], top: int
) -> dict[CandidateKey, float]:
    """Per candidate, the summed score of the `top` strongest candidates from its conversation,
    relative to the best conversation's (0 when it has no conversation or none of them is there)."""
    strongest = sorted(scores, key=lambda mid: (-scores[mid], mid))[:top]
    per_conversation: dict[Hashable, float] = {}
    for memory_id in strongest:
        channel = by_id[memory_id].source_channel_id if memory_id in by_id else None
        if channel is not None:
            per_conversation[channel] = per_conversation.get(channel, 0.0) + scores[memory_id]
    if not per_conversation:
        return {}
    best = max(per_conversation.values()) or 1.0
    out: dict[CandidateKey, float] = {}
    for memory_id in scores:
        channel = by_id[memory_id].source_channel_id if memory_id in by_id else None
        if channel in per_conversation:
            out[memory_id] = per_conversation[channel] / best
    return out


def fuse_scores(
    rows: Iterable[Memory],
    branch_scores: Mapping[str, Mapping[uuid.UUID, float]],
    *,
    limit: int,
    fusion: ScoreFusion = ScoreFusion(),
    time_window: TimeWindow | None = None,
    when: bool = False,
    personal: bool = False,
) -> list[RecallHit]:
    """Fuse branch *scores* (`vector`: cosine similarity, `text`: BM25) into at most `limit` hits
    (`fused_scores`); same-key rows merge as in `fuse`."""
    by_id = {m.id.int: m for m in rows}
    keyed = {name: {mid.int: score for mid, score in found.items()} for name, found in branch_scores.items()}
    scored, cosines = fused_scores(
        by_id, keyed, fusion=fusion, time_window=time_window, when=when, personal=personal
    )
    return _merged_by_key(by_id.values(), scored, limit=limit, cosines=cosines)


def fused_scores(
    by_id: Mapping[int, Candidate],
    branch_scores: Mapping[str, Mapping[int, float]],
    *,
    fusion: ScoreFusion,
    time_window: TimeWindow | None = None,
    when: bool = False,
    personal: bool = False,
) -> tuple[dict[int, tuple[float, tuple[str, ...]]], dict[int, float]]:
    """Each candidate's fused score with the branches that found it, and the raw cosine of each
    the vector branch found; candidates and scores keyed by their id's integer (`CandidateKey`).

    Vector scores are min-max normalised over the candidates, text scores divided by the best one,
    then mixed by `vector_weight`. Candidates from the query's time window get `time_boost`; when the
    query asks "When …?" (`when`), those whose value names a time get `when_boost`; when it speaks for
    the person (`personal`), those stating a constraint get `constraint_boost`; then candidates from
    the same conversation as the strongest hits get up to `conversation_boost` (facts told together
    tend to be asked together)."""
    branches = sum(1 for name, scores in branch_scores.items() if scores and name in ("vector", "text"))
    features = candidate_features(
        by_id, branch_scores, fusion=fusion, time_window=time_window, when=when, personal=personal
    )
    combined = {mid: first_stage_score(entry, fusion, branches) for mid, entry in features.items()}
    conversation_weight = fusion.conversation_boost
    if conversation_weight and combined:
        for memory_id, share in conversation_scores(by_id, combined, fusion.conversation_top).items():
            combined[memory_id] += conversation_weight * share
    scored = {mid: (score, _branches(features[mid])) for mid, score in combined.items()}
    cosines = {mid: entry["cosine"] for mid, entry in features.items() if entry["vector_rank"]}
    return scored, cosines


def _branches(entry: Mapping[str, float]) -> tuple[str, ...]:
    """The branches that found a candidate (its `candidate_features`), vector first."""
    if entry["vector_rank"]:
        return ("vector", "text") if entry["text_rank"] else ("vector",)
    return ("text",) if entry["text_rank"] else ()


def _normalise(
    scores: Mapping[CandidateKey, float], *, min_max: bool, floor_rank: int | None = None
) -> dict[CandidateKey, float]:
    """Scores over the best one (`min_max` False), or min-max scaled from the best down to the
    lowest, or down to the `floor_rank`-th best when given (lower ones clip to 0)."""
    values = sorted((v for v in scores.values() if math.isfinite(v)), reverse=True)
    if not values:
        return {}
    high = values[0]
    low = 0.0
    if min_max:
        low = values[-1] if floor_rank is None else values[min(len(values), max(floor_rank, 1)) - 1]
    span = high - low
    if span <= 0.0:
        return {mid: 1.0 if v >= high else 0.0 for mid, v in scores.items() if math.isfinite(v)}
    return {mid: max(0.0, (v - low) / span) for mid, v in scores.items() if math.isfinite(v)}


def merge_by_key(
    rows: Iterable[Memory],
    scored: Mapping[uuid.UUID, tuple[float, tuple[str, ...]]],
    *,
    limit: int,
    cosines: Mapping[uuid.UUID, float] | None = None,
) -> list[RecallHit]:
    """One hit per key (most specific scope shown, best score of the group, and the group's best
    raw query cosine of `cosines` when the vector branch found one), best first."""
    keyed_cosines = None if cosines is None else {mid.int: cosine for mid, cosine in cosines.items()}
    keyed = {mid.int: entry for mid, entry in scored.items()}
    return _merged_by_key(rows, keyed, limit=limit, cosines=keyed_cosines)


def _merged_by_key(
    rows: Iterable[Memory],
    scored: Mapping[int, tuple[float, tuple[str, ...]]],
    *,
    limit: int,
    cosines: Mapping[int, float] | None = None,
) -> list[RecallHit]:
    """`merge_by_key` with `scored` and `cosines` keyed by each id's integer (`CandidateKey`)."""
    by_key: dict[int, Memory] = {}
    groups: dict[str, list[int]] = {}
    for memory in rows:
        by_key[memory.id.int] = memory
        groups.setdefault(normalize_key(memory.key), []).append(memory.id.int)
    merged = merged_groups(
        groups.values(), scored, cosines or {}, order=lambda key: _winner_order(by_key[key])
    )
    return [
        RecallHit(memory=by_key[shown], score=score, sources=sources, cosine=cosine)
        for score, shown, sources, cosine in merged[:limit]
    ]


Order = TypeVar("Order", bound=tuple[Any, ...])


def _source_rank(name: str) -> tuple[int, str]:
    # the branches as hits list them: vector, text, top, then any other by name
    return (_SOURCE_ORDER.get(name, 3), name)


def merged_groups(
    groups: Iterable[Sequence[int]],
    scored: Mapping[int, tuple[float, tuple[str, ...]]],
    cosines: Mapping[int, float],
    *,
    order: Callable[[int], Order],
) -> list[tuple[float, int, tuple[str, ...], float | None]]:
    """One result per group of candidates (keyed by their id's integer) that `scored` holds one of:
    the best score among them (0 at the least), the member shown (the least by `order`, scored or
    not), the union of their branches and their best raw cosine; best score first, then the shown
    member's `order`. The memory merge (groups by key) and the turn merge (by message) alike."""
    fused: list[tuple[float, Order, int, tuple[str, ...], float | None]] = []
    for members in groups:
        if len(members) == 1:  # most groups: no copy, no override
            (shown,) = members
            entry = scored.get(shown)
            if entry is None:
                continue
            score, sources = max(0.0, entry[0]), entry[1]
            if len(sources) > 1:
                sources = tuple(sorted(sources, key=_source_rank))
            cosine = cosines.get(shown)
        else:
            found = [scored[key] for key in members if key in scored]
            if not found:
                continue
            shown = min(members, key=order)
            score = max(0.0, *(entry[0] for entry in found))
            sources = tuple(sorted({name for _, names in found for name in names}, key=_source_rank))
            cosine = max((cosines[key] for key in members if key in cosines), default=None)
        fused.append((-score, order(shown), shown, sources, cosine))
    fused.sort(key=lambda item: (item[0], item[1]))
    return [(-negative, shown, sources, cosine) for negative, _, shown, sources, cosine in fused]


def bm25_idf(documents: int, containing: int) -> float:
    """BM25 inverse document frequency (always positive) of a term in `containing` of `documents`."""
    return math.log(1.0 + (documents - containing + 0.5) / (containing + 0.5))


def top_order(memories: Iterable[Memory]) -> list[Memory]:
    """Empty-query order: confidence descending, then most recently updated first."""
    return sorted(memories, key=lambda m: (-m.confidence, _EPOCH - m.updated_at, m.id))


# -- query cues and term statistics (both stores) -----------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class QueryCues:
    """What recall matches for a query: its text without the words naming a time, and that time;
    whether it asks "When …?"; whether it speaks for the person (`store.rules.cues.speaks_for_self`)."""

    text: str
    time_window: TimeWindow | None
    when: bool = False
    personal: bool = False


def query_cues(query: str, *, now: datetime) -> QueryCues:
    """The query's time cue (if any), the text left to match (the whole query when the time words
    were all it had), whether it asks "When …?" and whether it speaks for the person."""
    cue = parse_time_cue(query, now=now)
    when = asks_when(query)
    personal = speaks_for_self(query)
    if cue is None or is_empty_query(cue.remaining_query):
        window = cue.window if cue is not None else None
        return QueryCues(text=query, time_window=window, when=when, personal=personal)
    return QueryCues(text=cue.remaining_query, time_window=cue.window, when=when, personal=personal)


@dataclass(frozen=True, kw_only=True, slots=True)
class Bm25:
    """Full-text scoring: BM25 with idf from the owner's own memories (Postgres: binary term frequency;
    SQLite: FTS5's `bm25()` with these k1 and b)."""

    k1: float = 1.2
    b: float = 0.75
    stats_sample: int = 5000  # memories read to estimate document frequencies


@dataclass(frozen=True, kw_only=True, slots=True)
class TermStats:
    """Document frequencies of a query's words among the recalled owners' active memories."""

    documents: int
    mean_length: float
    idf: dict[str, float]  # lexeme -> BM25 idf
    word_share: dict[str, float]  # query word -> fraction of memories containing it


def term_stats(rows: Sequence[tuple[Any, ...]]) -> TermStats:
    """`TermStats` from rows of (word, lexeme, containing, documents, mean length)."""
    if not rows:
        return TermStats(documents=0, mean_length=0.0, idf={}, word_share={})
    documents, mean_length = int(rows[0][3]), float(rows[0][4])
    idf: dict[str, float] = {}
    word_share: dict[str, float] = {}
    for word, lexeme, containing, *_ in rows:
        idf[lexeme] = bm25_idf(documents, int(containing))
        share = int(containing) / documents if documents else 0.0
        word_share[word] = max(word_share.get(word, 0.0), share)
    return TermStats(documents=documents, mean_length=mean_length, idf=idf, word_share=word_share)


def embedding_queries(text: str, word_share: Mapping[str, float], fusion: ScoreFusion) -> list[str]:
    """The texts whose embeddings' mean direction is the query vector: the query itself, the query
    without the words most of the owner's memories contain (`focus_share`), each only when it
    differs."""
    texts = [text]
    if fusion.focus_share is not None:
        texts.append(informative_query(text, word_share, max_share=fusion.focus_share))
    return list(dict.fromkeys(t for t in texts if t.strip()))


def mean_direction(vectors: Sequence[Sequence[float]]) -> list[float]:
    """The unit-length mean of unit vectors (the direction between them)."""
    summed = np.sum(np.asarray(vectors, dtype=np.float64), axis=0)
    norm = float(np.linalg.norm(summed))
    return [float(x) for x in (summed / norm if norm > 0 else summed)]
