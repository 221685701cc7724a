"""Fusion knobs tried on LoCoMo dev and left out of the product (each measured no better than the
defaults): embedding the question rewritten as a statement too, a boost for memories naming the
query's names, and a learned linear model replacing the hand-set mix. The tuning scripts run them
through the real stores by swapping the stores' fusion functions inside `knobs_applied`.

    with knobs_applied(FusionKnobs(entity_boost=0.1)):
        await run_locomo(options)"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import store.core.base
import store.postgres.recall
import store.sqlite.backend
from store.model import Memory, RecallHit
from store.rules import recall
from store.rules.cues import TimeWindow
from store.rules.recall import QueryCues, ScoreFusion
from store.rules.terms import STOPWORDS, query_terms

# candidate features the knobs add to the product's (`store.rules.recall.FEATURES`)
KNOB_FEATURES: tuple[str, ...] = (*recall.FEATURES, "entity")


@dataclass(frozen=True, kw_only=True, slots=True)
class FusionKnobs:
    """The experimental knobs; the defaults leave recall exactly as the product ranks."""

    # the question rewritten as a statement ("When did Ana move to Porto?" -> "Ana move to Porto")
    # is embedded too and averaged in: memories are statements, not questions
    rewrite_questions: bool = False
    # added × the share of the query's names (capitalised words inside the sentence) a memory contains
    entity_boost: float = 0.0
    # a linear model over `KNOB_FEATURES` plus "conversation" (name, weight) replacing the hand-set
    # mix (vector_weight, time_boost, entity_boost, conversation_boost); fit by bench/fit_fusion.py
    learned: tuple[tuple[str, float], ...] | None = None


_QUESTION_LEAD = frozenset(
    [
        "what",
        "when",
        "where",
        "who",
        "whom",
        "whose",
        "which",
        "why",
        "how",
        "did",
        "does",
        "do",
        "is",
        "are",
        "was",
        "were",
        "has",
        "have",
        "had",
        "can",
        "could",
        "would",
        "will",
        "should",
        "might",
        "may",
    ]
)


def statement_form(question: str) -> str:
    """A question without its leading question and auxiliary words and its question mark
    ("When did Ana move to Porto?" -> "Ana move to Porto"); the text itself when nothing is left."""
    words = question.replace("?", " ").split()
    start = 0
    while start < len(words) and words[start].lower().strip(",") in _QUESTION_LEAD:
        start += 1
    rest = " ".join(words[start:])
    return rest if rest else question


_NAME = re.compile(r"\b[A-Z][\w'’-]*")


def query_entities(query: str) -> list[str]:
    """Lower-cased names in a query: capitalised words that do not start it, are not stop or question
    words and are at least two letters ("What did Caroline tell Mel?" -> caroline, mel)."""
    names: dict[str, None] = {}
    for match in _NAME.finditer(query):
        before = query[: match.start()].rstrip()
        if not before or before[-1] in ".!?":
            continue  # sentence start: capitalised anyway
        word = match.group(0).lower().rstrip("'’s").rstrip("'’")
        if len(word) > 1 and word not in STOPWORDS and word not in _QUESTION_LEAD:
            names.setdefault(word, None)
    return list(names)


def entity_share(entities: Sequence[str], memory: Memory) -> float:
    """The share of `entities` found among the memory's words (key and value)."""
    if not entities:
        return 0.0
    words = set(query_terms(f"{memory.key} {memory.value}"))
    return sum(1 for e in entities if e in words) / len(entities)


def knob_features(
    by_id: Mapping[uuid.UUID, Memory],
    branch_scores: Mapping[str, Mapping[uuid.UUID, float]],
    *,
    fusion: ScoreFusion,
    time_window: TimeWindow | None = None,
    when: bool = False,
    personal: bool = False,
    entities: Sequence[str] = (),
) -> dict[uuid.UUID, dict[str, float]]:
    """The product's candidate features plus `entity`, the share of the query's names it names."""
    features = recall.candidate_features(
        by_id, branch_scores, fusion=fusion, time_window=time_window, when=when, personal=personal
    )
    for memory_id, entry in features.items():
        memory = by_id.get(memory_id)
        entry["entity"] = entity_share(entities, memory) if memory is not None else 0.0
    return features


def knob_first_stage(
    entry: Mapping[str, float], fusion: ScoreFusion, knobs: FusionKnobs, branches: int
) -> float:
    """The first-stage score with the knobs: the learned model when set, else the product's plus
    the entity boost."""
    if knobs.learned is not None:
        return sum(weight * entry.get(name, 0.0) for name, weight in knobs.learned if name != "conversation")
    return recall.first_stage_score(entry, fusion, branches) + knobs.entity_boost * entry["entity"]


def knob_fuse_scores(
    rows: Iterable[Memory],
    branch_scores: Mapping[str, Mapping[uuid.UUID, float]],
    *,
    knobs: FusionKnobs,
    limit: int,
    fusion: ScoreFusion,
    time_window: TimeWindow | None = None,
    when: bool = False,
    personal: bool = False,
    entities: Sequence[str] = (),
) -> list[RecallHit]:
    """`store.rules.recall.fuse_scores` with the knobs applied."""
    by_id = {m.id: m for m in rows}
    branches = sum(1 for name, scores in branch_scores.items() if scores and name in ("vector", "text"))
    features = knob_features(
        by_id,
        branch_scores,
        fusion=fusion,
        time_window=time_window,
        when=when,
        personal=personal,
        entities=entities,
    )
    combined = {mid: knob_first_stage(entry, fusion, knobs, branches) for mid, entry in features.items()}
    weight = (
        dict(knobs.learned).get("conversation", 0.0)
        if knobs.learned is not None
        else fusion.conversation_boost
    )
    if weight and combined:
        for memory_id, share in recall.conversation_scores(by_id, combined, fusion.conversation_top).items():
            combined[memory_id] += weight * share
    sources = {
        mid: tuple(name for name in ("vector", "text") if entry[f"{name}_rank"])
        for mid, entry in features.items()
    }
    scored = {mid: (score, sources[mid]) for mid, score in combined.items()}
    return recall.merge_by_key(by_id.values(), scored, limit=limit)


# the names of the query being recalled, from the stores' `query_cues` call to their `fuse_scores`
# call (one recall runs in one task, so concurrent recalls do not see each other's)
_QUERY_NAMES: ContextVar[tuple[str, ...]] = ContextVar("query_names", default=())


# (candidates, branch scores, the fusion's keyword arguments, the query's names)
Observer = Callable[
    [list[Memory], Mapping[str, Mapping[uuid.UUID, float]], Mapping[str, Any], tuple[str, ...]], None
]


@contextmanager
def knobs_applied(knobs: FusionKnobs, *, observe: Observer | None = None) -> Iterator[None]:
    """Both stores recall with `knobs` inside the block (their fusion functions swapped, then
    restored); `observe` sees each fusion's candidates, branch scores, cues and query names."""

    def cues(query: str, *, now: datetime) -> QueryCues:
        _QUERY_NAMES.set(tuple(query_entities(query)))
        return recall.query_cues(query, now=now)

    def fuse(rows: Iterable[Memory], branch_scores: Any, **kw: Any) -> list[RecallHit]:
        rows = list(rows)
        if observe is not None:
            observe(rows, branch_scores, kw, _QUERY_NAMES.get())
        return knob_fuse_scores(rows, branch_scores, knobs=knobs, entities=_QUERY_NAMES.get(), **kw)

    def texts(text: str, word_share: Mapping[str, float], fusion: ScoreFusion) -> list[str]:
        out = recall.embedding_queries(text, word_share, fusion)
        if knobs.rewrite_questions:
            out.append(statement_form(out[-1]))
        return list(dict.fromkeys(t for t in out if t.strip()))

    # where the stores call them: each backend's ranking (Postgres: `PgRecall`), and the query
    # vector both share
    rankers = (store.postgres.recall, store.sqlite.backend)
    swapped = {
        "query_cues": (cues, rankers),
        "fuse_scores": (fuse, rankers),
        "embedding_queries": (texts, (store.core.base,)),
    }
    saved = [
        (module, name, getattr(module, name)) for name, (_, modules) in swapped.items() for module in modules
    ]
    for module, name, _ in saved:
        setattr(module, name, swapped[name][0])
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
