"""Conversation memory: the turns of past conversations, written with their event, recalled only in
the context they were said in, listed, deleted and erased for the person they belong to.

A turn's context is (user, persona or none, team or none), matched exactly: a turn said to one
persona is never recalled for another persona or for none, one said in a team never outside it, and
no turn is ever recalled for another user or in `persona` scope. Recall ranks the context's most
recent `TURN_WINDOW` turns (vector and full text, through `ix_conversation_turns_context`), so a
recall for a user with a hundred thousand turns reads what one for a user with a few thousand reads.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from sqlalchemy import ColumnElement, String, and_, delete, func, or_, select, type_coerce
from sqlalchemy.ext.asyncio import AsyncConnection

from store.core.recall import (
    ScoreFusion,
    TermStats,
    candidate_count,
    embedding_queries,
    fuse_scores,
    keyword_terms,
    mean_direction,
    query_cues,
    query_terms,
    unit_rows,
)
from store.core.schema import NIL_UUID_SQL, TEXT_SEARCH_CONFIG, array_literal
from store.core.settings import SettingsRows
from store.model import (
    NIL_UUID,
    Conversation,
    ConversationQuery,
    Memory,
    NewTurn,
    Page,
    RecallHit,
    RecallInclude,
    RecallItem,
    Turn,
    TurnHit,
)
from store.postgres.params import float4_array
from store.rules.evidence import quoted_text
from store.rules.hint import evidence_said
from store.rules.pagination import newest_first_page
from store.rules.policy import merge_settings

if TYPE_CHECKING:
    from store.protocols import RecallStore

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
# score fusion (`store.recall.fuse_scores`), whose constants the LoCoMo dialog unit chose on dev
# (turns of one conversation asked together lift each other; a "When …?" question lifts turns
# naming a time)
TURN_FUSION = ScoreFusion()
# BM25 parameters of the SQLite text ranking over the window
_BM25_K1 = 1.2
_BM25_B = 0.75

# full text: a query word found only among the turns around a turn (its `search_text`) counts this
# much beside one found in the turn's own text (the dialog unit's key weight, chosen on LoCoMo dev)
CONTEXT_WORD_WEIGHT = 0.75

_TURN_COLUMNS = (
    "t.id, t.channel_id, t.event_id, t.user_id, t.persona_id, t.team_id, t.role, t.text, t.at, "
    "t.position, t.speaker"
)
# the context: same user, same persona (or none), same team (or none), through the context index
_CONTEXT_SQL = (
    f"t.user_id = CAST(%(user_id)s AS uuid) "
    f"AND coalesce(t.persona_id, {NIL_UUID_SQL}) = CAST(%(persona)s AS uuid) "
    f"AND coalesce(t.team_id, {NIL_UUID_SQL}) = CAST(%(team)s AS uuid)"
)

_INSERT_TURNS_SQL = (
    "INSERT INTO {turns} (id, channel_id, event_id, user_id, persona_id, team_id, role, text, at, "
    "position, speaker, search_text, embedding) SELECT id, channel_id, CAST(%(event_id)s AS uuid), user_id, "
    "persona_id, team_id, role, text, at, position, speaker, search_text, "
    "CAST((CAST(%(embeddings)s AS real[]))[start:start + {dim} - 1] AS vector({dim})) "
    "FROM unnest(CAST(%(ids)s AS uuid[]), CAST(%(channels)s AS uuid[]), CAST(%(users)s AS uuid[]), "
    "CAST(%(personas)s AS uuid[]), CAST(%(teams)s AS uuid[]), CAST(%(roles)s AS text[]), "
    "CAST(%(texts)s AS text[]), "
    "CAST(%(ats)s AS timestamptz[]), CAST(%(positions)s AS int[]), CAST(%(speakers)s AS text[]), "
    "CAST(%(search_texts)s AS text[]), CAST(%(starts)s AS int[])) "
    "AS n(id, channel_id, user_id, persona_id, team_id, role, text, at, position, speaker, search_text, "
    "start) "
    "ON CONFLICT (event_id, position) DO NOTHING"
)


def turns_insert_statement(
    table: str, event_id: uuid.UUID, turns: Sequence[NewTurn], dim: int
) -> tuple[str, dict[str, Any]]:
    """Postgres: one statement of fixed text (`%(name)s` parameters, columns as arrays) inserting an
    event's turns; a turn already stored for (event, position) is left as it is."""
    starts: list[int | None] = []
    stored = 0
    for turn in turns:
        starts.append(None if turn.embedding is None else 1 + stored * dim)
        stored += turn.embedding is not None
    params = {
        "event_id": event_id,
        "ids": array_literal([uuid.uuid4() for _ in turns]),
        "channels": array_literal([t.channel_id for t in turns]),
        "users": array_literal([t.user_id for t in turns]),
        "personas": array_literal([t.persona_id for t in turns]),
        "teams": array_literal([t.team_id for t in turns]),
        "roles": array_literal([t.role for t in turns]),
        "texts": array_literal([t.text for t in turns]),
        "ats": array_literal([t.at for t in turns]),
        "positions": array_literal([t.position for t in turns]),
        "speakers": array_literal([t.speaker for t in turns]),
        "search_texts": array_literal([t.search_text for t in turns]),
        "starts": array_literal(starts),
        # a dozen turns' vectors: one array conversion, not one Python float at a time
        "embeddings": float4_array(
            np.asarray([t.embedding for t in turns if t.embedding is not None], dtype=np.float32).ravel()
        ),
    }
    return _INSERT_TURNS_SQL.format(turns=table, dim=dim), params


# the context's most recent turns (`%(window)s` of them), newest first, with `{columns}`
_RECENT_CTE = (
    "recent AS MATERIALIZED (SELECT t.id, t.channel_id, t.position, t.text, {columns} "
    f"FROM conversation_turns t WHERE {_CONTEXT_SQL} ORDER BY t.at DESC LIMIT %(window)s)"
)
# one row per message (`same_message`) among `{rows}`, the first by `{order}`: an event sent once per
# participant stores its messages once per event, and a copy must not take a candidate's place
_ONCE_SQL = (
    'SELECT DISTINCT ON (x.channel_id, x.position, x.text COLLATE "C") x.* FROM {rows} x '
    'ORDER BY x.channel_id, x.position, x.text COLLATE "C", {order}'
)


def turn_term_stats_sql() -> str:
    """Postgres: per query word (`%(words)s`), its lexemes and how many of the context's `%(sample)s`
    most recent messages (`TURN_STATS_SAMPLE`; each message once among its `%(window)s` most recent
    turns) hold each in their full text, plus the number of those turns and their mean lexeme count: rows for
    `store.core.recall.term_stats`."""
    return (
        "WITH "
        + _RECENT_CTE.format(columns="t.search_tsv, t.at")
        + ", w AS MATERIALIZED (SELECT * FROM ("
        + _ONCE_SQL.format(rows="recent", order="x.at DESC, x.id")
        + ") AS o ORDER BY o.at DESC, o.id LIMIT %(sample)s), "
        "words AS (SELECT u.word, l.lex FROM unnest(CAST(%(words)s AS text[])) AS u(word), "
        f"unnest(tsvector_to_array(to_tsvector('{TEXT_SEARCH_CONFIG}', u.word))) AS l(lex)), "
        "lexes AS MATERIALIZED (SELECT x.lex, plainto_tsquery('simple', x.lex) AS query "
        "FROM (SELECT DISTINCT lex FROM words) AS x), "
        "df AS (SELECT x.lex, count(w.search_tsv) AS containing FROM lexes x "
        "LEFT JOIN w ON w.search_tsv @@ x.query GROUP BY x.lex) "
        "SELECT u.word, u.lex, df.containing, (SELECT count(*) FROM w), "
        "(SELECT coalesce(avg(length(search_tsv)), 0) FROM w) FROM words u JOIN df ON df.lex = u.lex"
    )


def turn_window_sql(*, dim: int, vector: bool, text: bool) -> str:
    """Postgres: the context's most recent `window` turns ranked by vector distance (`qv`) and by
    full text (`tq`: BM25 with binary term frequency, each query lexeme its idf from
    `lexemes`/`idfs`, one found only among the turns around a turn weighing `context_weight` of
    it), each its best `k` messages (the best `2k` rows, each message once: a message stored by
    both events of a conversation takes one place); rows of turn columns plus `source`, `rank`,
    `score`, the vector ranking's first, each ranking best first."""
    # the window keeps each turn's distance, not its vector, and the columns of a result: its rows
    # stay narrow (no spill past `work_mem`), and the results need no second read of the table
    # (a lookup by primary key per result, most of them outside the buffer cache)
    recent = ["t.event_id, t.user_id, t.persona_id, t.team_id, t.role, t.at, t.speaker, t.search_tsv"]
    if vector:
        recent.append(f"t.embedding <=> CAST(CAST(%(qv)s AS real[]) AS vector({dim})) AS distance")
    ctes = [_RECENT_CTE.format(columns=", ".join(recent))]
    ranked: list[str] = []
    if vector:
        # a turn without an embedding has no distance (`<=>` is strict)
        ctes.append(
            "vec_rows AS (SELECT w.id, w.channel_id, w.position, w.text, w.distance FROM recent w "
            "WHERE w.distance IS NOT NULL ORDER BY w.distance, w.id LIMIT 2 * %(k)s)"
        )
        ctes.append("vec AS (" + _ONCE_SQL.format(rows="vec_rows", order="x.distance, x.id") + ")")
        ranked.append(
            "SELECT id, 'vector' AS source, row_number() OVER (ORDER BY distance, id) AS rank, "
            "1 - distance AS score FROM (SELECT * FROM vec ORDER BY distance, id LIMIT %(k)s) AS v"
        )
    if text:
        # each query lexeme's tsquery built once; the rows matching any of them, each with its own
        # words (the full text's weight-A lexemes, `TURN_TSV_SQL`) filtered once
        ctes.append(
            "lex AS MATERIALIZED (SELECT l.idf, l.n, plainto_tsquery('simple', l.lex) AS query "
            "FROM unnest(CAST(%(lexemes)s AS text[]), CAST(%(idfs)s AS float8[])) "
            "WITH ORDINALITY AS l(lex, idf, n))"
        )
        ctes.append(
            "hit AS MATERIALIZED (SELECT w.id, w.channel_id, w.position, w.text, w.search_tsv, "
            "ts_filter(w.search_tsv, '{a}') AS own FROM recent w, "
            f"websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', %(tq)s) AS q(query) WHERE w.search_tsv @@ q.query)"
        )
        ctes.append(
            "txt_rows AS (SELECT h.id, h.channel_id, h.position, h.text, "
            # summed in the query's lexeme order, so copies of a message score exactly alike
            "sum(l.idf * CASE WHEN h.own @@ l.query THEN 1 ELSE %(context_weight)s END ORDER BY l.n) "
            "* (%(k1)s + 1) / (1 + %(k1)s * (1 - %(b)s + %(b)s * max(length(h.search_tsv)) / %(avglen)s)) "
            "AS relevance FROM hit h JOIN lex l ON h.search_tsv @@ l.query "
            "GROUP BY h.id, h.channel_id, h.position, h.text ORDER BY relevance DESC, h.id LIMIT 2 * %(k)s)"
        )
        ctes.append("txt AS (" + _ONCE_SQL.format(rows="txt_rows", order="x.relevance DESC, x.id") + ")")
        ranked.append(
            "SELECT id, 'text' AS source, row_number() OVER (ORDER BY relevance DESC, id) AS rank, "
            "relevance AS score FROM (SELECT * FROM txt ORDER BY relevance DESC, id LIMIT %(k)s) AS x"
        )
    ctes.append("ranked AS (" + " UNION ALL ".join(ranked) + ")")
    return (
        "WITH " + ", ".join(ctes) + f" SELECT {_TURN_COLUMNS}, r.source, r.rank, r.score FROM ranked r "
        "JOIN recent t ON t.id = r.id ORDER BY r.source DESC, r.rank"
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnWindow:
    """A context's most recent turns prepared for ranking: the turns, each one's own words, the
    words only the turns around it have (`search_text`), its word count, and their embeddings as
    unit rows (zero rows for turns without one)."""

    turns: dict[uuid.UUID, Turn]
    words: dict[uuid.UUID, frozenset[str]]
    lengths: dict[uuid.UUID, int]
    ids: tuple[uuid.UUID, ...]
    matrix: np.ndarray[Any, np.dtype[np.float32]]
    stamp: tuple[int, int] = (0, 0)
    context_words: Mapping[uuid.UUID, frozenset[str]] | None = None


def turn_window(
    turns: Sequence[Turn],
    embeddings: Sequence[str | None],
    dim: int,
    stamp: tuple[int, int] = (0, 0),
    search_texts: Sequence[str | None] | None = None,
) -> TurnWindow:
    """`TurnWindow` of turns and their embeddings as JSON text (parsed in one go), each message
    once (`once_each`: the first of its copies is kept); a missing or wrong-sized embedding is a
    zero row, which matches nothing. `search_texts` (one per turn, None for none): the words of the
    turns around each turn, matched at `CONTEXT_WORD_WEIGHT`."""
    kept = once_each(turns)
    if len(kept) < len(turns):
        turns = [turns[i] for i in kept]
        embeddings = [embeddings[i] for i in kept]
        search_texts = None if search_texts is None else [search_texts[i] for i in kept]
    present = [i for i, raw in enumerate(embeddings) if raw is not None]
    matrix = np.zeros((len(turns), dim), dtype=np.float32)
    if present:
        parsed = json.loads("[" + ",".join(str(embeddings[i]) for i in present) + "]")
        for i, vector in zip(present, parsed, strict=True):
            if len(vector) == dim:
                matrix[i] = vector
    words = {t.id: tuple(query_terms(t.text)) for t in turns}
    around = [None] * len(turns) if search_texts is None else list(search_texts)
    context_words = {
        t.id: frozenset(query_terms(text)) - frozenset(words[t.id])
        for t, text in zip(turns, around, strict=True)
        if text
    }
    return TurnWindow(
        turns={t.id: t for t in turns},
        words={tid: frozenset(found) for tid, found in words.items()},
        lengths={tid: max(1, len(found) + len(context_words.get(tid, ()))) for tid, found in words.items()},
        ids=tuple(t.id for t in turns),
        matrix=unit_rows(matrix),
        stamp=stamp,
        context_words=context_words,
    )


def once_each(turns: Sequence[Turn]) -> builtins.list[int]:
    """Indexes of `turns` holding each message once (`same_message`): the first of its copies."""
    seen: set[tuple[uuid.UUID, int, str]] = set()
    kept: list[int] = []
    for index, turn in enumerate(turns):
        key = same_message(turn)
        if key not in seen:
            seen.add(key)
            kept.append(index)
    return kept


def window_term_stats(window: TurnWindow, text: str) -> TermStats:
    """How many of the window's `TURN_STATS_SAMPLE` most recent turns hold each query word in their
    full text (their own words or the turns' around them), as `store.core.recall.TermStats` (word
    shares; the window's BM25 computes its own idf)."""
    sample = window.ids[:TURN_STATS_SAMPLE]
    documents = len(sample)
    if not documents:
        return TermStats(documents=0, mean_length=0.0, idf={}, word_share={})
    around = window.context_words or {}
    empty: frozenset[str] = frozenset()
    share = {
        word: sum(1 for tid in sample if word in window.words[tid] or word in around.get(tid, empty))
        / documents
        for word in query_terms(text)
    }
    mean_length = sum(window.lengths[tid] for tid in sample) / documents
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


def window_rankings(
    window: TurnWindow, query: str, query_vector: Sequence[float], k: int
) -> dict[str, list[uuid.UUID]]:
    """The window's `vector` (cosine) and `text` (BM25) rankings for a query, each its best `k`."""
    return {
        name: sorted(found, key=lambda tid: (-found[tid], str(tid)))
        for name, found in window_scores(window, query, query_vector, k).items()
    }


def bm25_ranking(query: str, texts: Mapping[uuid.UUID, str], k: int) -> builtins.list[uuid.UUID]:
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
) -> builtins.list[uuid.UUID]:
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
) -> builtins.list[uuid.UUID]:
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


def same_message(turn: Turn) -> tuple[uuid.UUID, int, str]:
    """What makes two stored turns one message: the conversation, the position and the text (an
    event sent once per participant stores each of its messages once per event)."""
    return (turn.channel_id, turn.position, turn.text)


def distinct_turns(hits: Sequence[TurnHit]) -> builtins.list[TurnHit]:
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
    """A turn as the score fusion reads a candidate (`store.recall.fuse_scores`): its text the
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
) -> builtins.list[TurnHit]:
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
) -> builtins.list[int]:
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
) -> builtins.list[RecallItem]:
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


def without_quoted_turns(items: Sequence[RecallItem], limit: int) -> builtins.list[RecallItem]:
    """The first `limit` of `items`, leaving out each turn that a memory placed above it already
    quotes (its evidence holds the turn's text, from the same conversation): turns add what the
    facts do not hold."""
    quoted: set[tuple[uuid.UUID, str]] = set()
    kept: builtins.list[RecallItem] = []
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


def turn_from_row(row: Any) -> Turn:
    """A `Turn` from a SQLAlchemy row or a mapping holding the turn columns by name."""
    data: Any = row._mapping if hasattr(row, "_mapping") else row
    return Turn(
        id=data["id"],
        channel_id=data["channel_id"],
        event_id=data["event_id"],
        user_id=data["user_id"],
        persona_id=data["persona_id"],
        team_id=data["team_id"],
        role=data["role"],
        text=data["text"],
        at=data["at"],
        position=data["position"],
        speaker=data["speaker"],
    )


class ConversationTurns(SettingsRows):
    """Writing, recalling, listing, deleting and erasing conversation turns (both backends)."""

    # -- writes (inside `write_event`'s transaction) --------------------------------------------

    async def _insert_turns(
        self, conn: AsyncConnection, event_id: uuid.UUID, turns: Sequence[NewTurn]
    ) -> None:
        """Store an event's turns in the caller's transaction; a turn already stored is kept."""
        if turns:
            await self._backend.insert_turns(conn, event_id, turns)

    # -- reads ----------------------------------------------------------------------------------

    _turn = staticmethod(turn_from_row)

    def _turn_columns(self) -> builtins.list[Any]:
        t = self._schema.turns
        return [
            t.c.id,
            t.c.channel_id,
            t.c.event_id,
            t.c.user_id,
            t.c.persona_id,
            t.c.team_id,
            t.c.role,
            t.c.text,
            t.c.at,
            t.c.position,
            t.c.speaker,
        ]

    def _in_turn_context(
        self, user_id: uuid.UUID, persona_id: uuid.UUID | None, team_id: uuid.UUID | None
    ) -> builtins.list[ColumnElement[bool]]:
        """SQL for "said in this context" (the exact user, persona or none, team or none), in the
        context index's expressions."""
        t = self._schema.turns
        nil = self._backend.nil()
        return [
            t.c.user_id == user_id,
            func.coalesce(t.c.persona_id, nil) == (persona_id or NIL_UUID),
            func.coalesce(t.c.team_id, nil) == (team_id or NIL_UUID),
        ]

    async def recall_turns(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int = 10,
        *,
        team_id: uuid.UUID | None = None,
        query_embedding: Sequence[float] | None = None,
    ) -> builtins.list[TurnHit]:
        """The turns said in this context (the same user, persona or none, team or none) that best
        match the query, among the context's most recent `TURN_WINDOW`; an empty query finds none."""
        if limit <= 0 or not query_terms(query):
            return []
        # as the memory recall: the words naming a time are a cue, not words to match, and the
        # query is embedded also without the words most of the context's turns hold (the speakers'
        # names), so what the question is about steers the vector
        text = query_cues(query, now=datetime.now(UTC)).text
        stats = await self._backend.turn_term_stats(user_id, persona_id, team_id, text)
        if query_embedding is not None:
            vector = self._check_dim(query_embedding, "query embedding")
        else:
            vectors = await self.embed_queries(embedding_queries(text, stats.word_share, TURN_FUSION))
            vector = vectors[0] if len(vectors) == 1 else mean_direction(vectors)
        return await self._backend.recall_turns(
            user_id, persona_id, team_id, query, vector, candidate_count(limit), limit, text=text, stats=stats
        )

    async def _read_turn_window(
        self,
        conn: AsyncConnection,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        team_id: uuid.UUID | None,
        stamp: tuple[int, int],
    ) -> TurnWindow:
        t = self._schema.turns
        stmt = (
            select(*self._turn_columns(), t.c.search_text, type_coerce(t.c.embedding, String))
            .where(*self._in_turn_context(user_id, persona_id, team_id))
            .order_by(t.c.at.desc())
            .limit(TURN_WINDOW)
        )
        rows = (await conn.execute(stmt)).all()
        turns = [self._turn(row) for row in rows]
        return await asyncio.to_thread(
            turn_window,
            turns,
            [row[-1] for row in rows],
            self._schema.embedding_dim,
            stamp,
            [row[-2] for row in rows],
        )

    async def recall_items(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int = 20,
        *,
        team_id: uuid.UUID | None = None,
        include: Sequence[RecallInclude] = ("memories", "turns"),
    ) -> builtins.list[RecallItem]:
        """Memories and turns of this context in one ranked list (`merge_recall`), each `kind`
        only when `include` names it. Settings (memory enabled, history on) are the caller's
        concern (`store.services.context_recall`)."""
        recall = cast("RecallStore", self).recall  # each backend's own memory recall

        async def memories() -> builtins.list[RecallHit]:
            if "memories" not in include:
                return []
            return await recall(user_id, persona_id, query, limit, team_id=team_id)

        async def turns() -> builtins.list[TurnHit]:
            if "turns" not in include:
                return []
            return await self.recall_turns(user_id, persona_id, query, limit, team_id=team_id)

        found_memories, found_turns = await asyncio.gather(memories(), turns())
        return merge_recall(found_memories, found_turns, limit)

    async def conversation(self, user_id: uuid.UUID, event_id: uuid.UUID) -> builtins.list[Turn]:
        """The turns of one of this user's remembered conversations, in order (empty: none of theirs)."""
        t = self._schema.turns
        stmt = (
            select(*self._turn_columns())
            .where(t.c.user_id == user_id, t.c.event_id == event_id)
            .order_by(t.c.position)
        )
        async with self._reading() as conn:
            return [self._turn(row) for row in (await conn.execute(stmt)).all()]

    async def list_conversations(self, query: ConversationQuery) -> Page[Conversation]:
        """A person's remembered conversations (one per event), newest first, one page: when it
        started, persona, team, its first turn's text and how many turns are kept."""
        t = self._schema.turns
        conditions: builtins.list[ColumnElement[bool]] = [t.c.user_id == query.user_id]
        if query.persona_id is not None:
            conditions.append(t.c.persona_id == query.persona_id)
        if query.team_id is not None:
            conditions.append(t.c.team_id == query.team_id)
        started = func.min(t.c.at).label("started_at")
        groups = (
            select(
                t.c.event_id,
                func.min(t.c.position).label("first_position"),
                started,
                func.count().label("turn_count"),
            )
            .where(*conditions)
            .group_by(t.c.event_id)
            .subquery()
        )
        stmt = select(groups).order_by(groups.c.started_at.desc(), groups.c.event_id.desc())
        stmt = stmt.where(*self._after(groups.c.started_at, groups.c.event_id, query.cursor))
        stmt = stmt.limit(query.limit + 1)
        async with self._reading() as conn:
            heads = (await conn.execute(stmt)).all()
            firsts: dict[uuid.UUID, Turn] = {}
            if heads:
                pairs = [and_(t.c.event_id == h.event_id, t.c.position == h.first_position) for h in heads]
                first_rows = (await conn.execute(select(*self._turn_columns()).where(or_(*pairs)))).all()
                firsts = {row.event_id: self._turn(row) for row in first_rows}
        entries = []
        for head in heads:
            first = firsts.get(head.event_id)
            if first is None:
                continue  # deleted between the two reads
            entries.append(
                (
                    head.started_at,
                    head.event_id,
                    Conversation(
                        event_id=head.event_id,
                        channel_id=first.channel_id,
                        persona_id=first.persona_id,
                        team_id=first.team_id,
                        started_at=head.started_at,
                        first_line=first.text.strip().splitlines()[0] if first.text.strip() else "",
                        turn_count=int(head.turn_count),
                    ),
                )
            )
        items, cursor = newest_first_page(entries, query.limit)
        return Page(items=items, next_cursor=cursor)

    # -- deletion, erasure, retention -----------------------------------------------------------

    async def delete_conversation(
        self, user_id: uuid.UUID, event_id: uuid.UUID, *, teams: frozenset[uuid.UUID] | None = None
    ) -> int:
        """Erase the turns of one of this user's conversations (of `teams` only, when given);
        how many were erased (0: none of theirs)."""
        t = self._schema.turns
        conditions = [t.c.user_id == user_id, t.c.event_id == event_id]
        if teams is not None:
            conditions.append(t.c.team_id.in_(sorted(teams)))
        async with self._transaction() as conn:
            result = await conn.execute(delete(t).where(*conditions))
        return int(result.rowcount or 0)

    async def delete_conversations(
        self, user_id: uuid.UUID, *, teams: frozenset[uuid.UUID] | None = None
    ) -> int:
        """Erase every remembered conversation of this user (of `teams` only, when given); how
        many turns were erased."""
        t = self._schema.turns
        conditions = [t.c.user_id == user_id]
        if teams is not None:
            conditions.append(t.c.team_id.in_(sorted(teams)))
        async with self._transaction() as conn:
            result = await conn.execute(delete(t).where(*conditions))
        return int(result.rowcount or 0)

    async def export_turns(self, user_id: uuid.UUID) -> tuple[Turn, ...]:
        """Every stored turn of this user, oldest first (for the export)."""
        t = self._schema.turns
        stmt = (
            select(*self._turn_columns())
            .where(t.c.user_id == user_id)
            .order_by(t.c.at, t.c.event_id, t.c.position)
        )
        async with self._reading() as conn:
            return tuple(self._turn(row) for row in (await conn.execute(stmt)).all())

    async def _turn_contexts(self) -> builtins.list[tuple[uuid.UUID | None, uuid.UUID | None]]:
        """Distinct (team, persona) pairs among stored turns: each has its own `history_days`."""
        t = self._schema.turns
        async with self._reading() as conn:
            rows = (await conn.execute(select(t.c.team_id, t.c.persona_id).distinct())).all()
        return sorted({(row.team_id, row.persona_id) for row in rows}, key=lambda p: (str(p[0]), str(p[1])))

    async def expire_turns(self, *, now: datetime, batch: int = 5000) -> int:
        """Erase turns said more than `history_days` before `now` (per team and persona settings),
        in batches; how many were erased."""
        t = self._schema.turns
        erased = 0
        for team_id, persona_id in await self._turn_contexts():
            policy = merge_settings(await self.settings_rows(team_id, persona_id), self._settings_defaults)
            if policy.history_days is None:
                continue
            cutoff = now - timedelta(days=policy.history_days)
            team = t.c.team_id.is_(None) if team_id is None else t.c.team_id == team_id
            persona = t.c.persona_id.is_(None) if persona_id is None else t.c.persona_id == persona_id
            while True:
                ids = select(t.c.id).where(team, persona, t.c.at < cutoff).limit(batch).scalar_subquery()
                async with self._transaction() as conn:
                    result = await conn.execute(delete(t).where(t.c.id.in_(ids)))
                count = int(result.rowcount or 0)
                erased += count
                if count < batch:
                    break
        return erased
