"""The SQLite store's in-process turn ranking: a context's recent turns read once into a
`TurnWindow` (their words, lengths and unit-row embeddings), then scored by cosine in numpy and by
BM25 over their words. Postgres ranks the same window in SQL (`store.postgres.turns_sql`)."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from store.model import Turn
from store.rules.recall import TermStats
from store.rules.terms import keyword_terms, query_terms
from store.rules.turn_recall import CONTEXT_WORD_WEIGHT, TURN_STATS_SAMPLE, same_message
from store.sqlite.ranking import unit_rows

# BM25 parameters of the SQLite text ranking over the window
_BM25_K1 = 1.2
_BM25_B = 0.75


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnWindow:
    """A context's most recent turns prepared for ranking: the turns, each one's own words, the
    words only the turns around it have (`search_text`), its word count, and their embeddings as
    unit rows (zero rows for turns without one); `sample`: the full-text words and word count of
    the `TURN_STATS_SAMPLE` most recent stored turns, a message's copies included, which the
    query words' shares count over."""

    turns: dict[uuid.UUID, Turn]
    words: dict[uuid.UUID, frozenset[str]]
    lengths: dict[uuid.UUID, int]
    ids: tuple[uuid.UUID, ...]
    matrix: np.ndarray[Any, np.dtype[np.float32]]
    stamp: tuple[int, int] = (0, 0)
    context_words: Mapping[uuid.UUID, frozenset[str]] | None = None
    sample: tuple[tuple[frozenset[str], int], ...] = ()


def turn_window(
    turns: Sequence[Turn],
    embeddings: Sequence[str | None],
    dim: int,
    stamp: tuple[int, int] = (0, 0),
    search_texts: Sequence[str | None] | None = None,
) -> TurnWindow:
    """`TurnWindow` of turns (newest first) and their embeddings as JSON text (parsed in one go),
    each message ranked once (`once_each`: the first of its copies is kept); a missing or
    wrong-sized embedding is a zero row, which matches nothing. `search_texts` (one per turn, None
    for none): the words of the turns around each turn, matched at `CONTEXT_WORD_WEIGHT`."""
    around_texts = [None] * len(turns) if search_texts is None else list(search_texts)
    own = [tuple(query_terms(t.text)) for t in turns]
    around = [
        frozenset(query_terms(text)) - frozenset(found) if text else frozenset()
        for found, text in zip(own, around_texts, strict=True)
    ]
    full = list(map(_full_text, own, around))
    sample = tuple(full[:TURN_STATS_SAMPLE])
    kept = once_each(turns)
    if len(kept) < len(turns):
        turns = [turns[i] for i in kept]
        embeddings = [embeddings[i] for i in kept]
        own = [own[i] for i in kept]
        around = [around[i] for i in kept]
        around_texts = [around_texts[i] for i in kept]
        full = [full[i] for i in kept]
    present = [i for i, raw in enumerate(embeddings) if raw is not None]
    matrix = np.zeros((len(turns), dim), dtype=np.float32)
    if present:
        parsed = json.loads("[" + ",".join(str(embeddings[i]) for i in present) + "]")
        for i, vector in zip(present, parsed, strict=True):
            if len(vector) == dim:
                matrix[i] = vector
    return TurnWindow(
        turns={t.id: t for t in turns},
        words={t.id: frozenset(found) for t, found in zip(turns, own, strict=True)},
        lengths={t.id: length for t, (_, length) in zip(turns, full, strict=True)},
        ids=tuple(t.id for t in turns),
        matrix=unit_rows(matrix),
        stamp=stamp,
        context_words={
            t.id: beside for t, beside, text in zip(turns, around, around_texts, strict=True) if text
        },
        sample=sample,
    )


def _full_text(own: Sequence[str], around: frozenset[str]) -> tuple[frozenset[str], int]:
    """A turn's full-text words (its own and those only around it) and its word count."""
    return frozenset(own) | around, max(1, len(own) + len(around))


def once_each(turns: Sequence[Turn]) -> list[int]:
    """Indexes of `turns` holding each message once (`same_message`): the first of its copies."""
    seen: set[tuple[int, int, str]] = set()
    kept: list[int] = []
    for index, turn in enumerate(turns):
        key = same_message(turn)
        if key not in seen:
            seen.add(key)
            kept.append(index)
    return kept


def window_term_stats(window: TurnWindow, text: str) -> TermStats:
    """How many of the window's `TURN_STATS_SAMPLE` most recent stored turns (`TurnWindow.sample`)
    hold each query word in their full text (their own words or the turns' around them), as
    `store.rules.recall.TermStats` (word shares; the window's BM25 computes its own idf)."""
    documents = len(window.sample)
    if not documents:
        return TermStats(documents=0, mean_length=0.0, idf={}, word_share={})
    share = {
        word: sum(1 for words, _ in window.sample if word in words) / documents for word in query_terms(text)
    }
    mean_length = sum(length for _, length in window.sample) / documents
    return TermStats(documents=documents, mean_length=mean_length, idf={}, word_share=share)


def window_scores(
    window: TurnWindow, query: str, query_vector: Sequence[float], k: int
) -> dict[str, dict[uuid.UUID, float]]:
    """The window's `vector` (cosine) and `text` (BM25) scores for a query, each its best `k`."""
    scores: dict[str, dict[uuid.UUID, float]] = {}
    if window.ids:
        cosines = window.matrix @ np.asarray(query_vector, dtype=np.float32)
        order = np.argsort(-cosines, kind="stable")[:k]
        usable = {window.ids[i]: float(cosines[i]) for i in order if np.any(window.matrix[i])}
        if usable:
            scores["vector"] = usable
    text = bm25_score_map(query, window.words, window.lengths, k, context_words=window.context_words)
    if text:
        scores["text"] = text
    return scores


def bm25_ranking(query: str, texts: Mapping[uuid.UUID, str], k: int) -> list[uuid.UUID]:
    """Ids of the `k` texts best matching the query's informative words (BM25 over these texts
    alone, binary term frequency), best first; texts matching none are left out."""
    words = {tid: frozenset(query_terms(text)) for tid, text in texts.items()}
    lengths = {tid: max(1, len(query_terms(text))) for tid, text in texts.items()}
    return bm25_scores(query, words, lengths, k)


def bm25_scores(
    query: str,
    words: Mapping[uuid.UUID, frozenset[str]],
    lengths: Mapping[uuid.UUID, int],
    k: int,
    *,
    context_words: Mapping[uuid.UUID, frozenset[str]] | None = None,
) -> list[uuid.UUID]:
    """`bm25_ranking` over texts already split into words (and their word counts); a term found
    only among a text's `context_words` counts `CONTEXT_WORD_WEIGHT` of its idf."""
    found = bm25_score_map(query, words, lengths, k, context_words=context_words)
    return sorted(found, key=lambda tid: (-found[tid], str(tid)))


def bm25_score_map(
    query: str,
    words: Mapping[uuid.UUID, frozenset[str]],
    lengths: Mapping[uuid.UUID, int],
    k: int,
    *,
    context_words: Mapping[uuid.UUID, frozenset[str]] | None = None,
) -> dict[uuid.UUID, float]:
    """The BM25 scores of `bm25_scores`' `k` best texts."""
    terms = [t for t in keyword_terms(query) if t != "or"]
    if not terms or not words:
        return {}
    around = context_words or {}
    empty: frozenset[str] = frozenset()
    mean_length = sum(lengths.values()) / len(lengths)
    count = len(words)
    idf = {}
    for term in terms:
        containing = sum(1 for tid, found in words.items() if term in found or term in around.get(tid, empty))
        idf[term] = math.log(1 + (count - containing + 0.5) / (containing + 0.5))
    scores: dict[uuid.UUID, float] = {}
    for tid, found in words.items():
        others = around.get(tid, empty)
        weight = sum(
            idf[t] if t in found else CONTEXT_WORD_WEIGHT * idf[t] for t in terms if t in found or t in others
        )
        if not weight:
            continue
        norm = 1 - _BM25_B + _BM25_B * lengths[tid] / mean_length
        scores[tid] = weight * (_BM25_K1 + 1) / (1 + _BM25_K1 * norm)
    best = sorted(scores, key=lambda tid: (-scores[tid], str(tid)))[:k]
    return {tid: scores[tid] for tid in best}


def vector_ranking(
    vectors: Mapping[uuid.UUID, Sequence[float]], query_vector: Sequence[float], k: int
) -> list[uuid.UUID]:
    """Ids of the `k` vectors nearest the query by cosine, best first (ties by id)."""
    if not vectors:
        return []
    ids = list(vectors)
    matrix = np.asarray([vectors[i] for i in ids], dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1)
    norms[norms == 0] = 1.0
    query = np.asarray(query_vector, dtype=np.float32)
    qnorm = float(np.linalg.norm(query)) or 1.0
    cosines = (matrix @ query) / (norms * qnorm)
    order = sorted(range(len(ids)), key=lambda i: (-float(cosines[i]), str(ids[i])))
    return [ids[i] for i in order[:k]]
