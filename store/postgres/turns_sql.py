"""The Postgres statements of conversation turns: an event's turns inserted in one statement of
fixed text (columns as arrays), and a context's recent window ranked by vector distance and by full
text (BM25 over its lexemes) in one statement that counts the query words' document frequencies
too; the vector ranking alone again when those frequencies change the query vector."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from store.core.rows import TURN_COLUMNS, columns_sql, turn_from_row
from store.model import NewTurn, Turn
from store.postgres.dialect import TEXT_SEARCH_CONFIG, context_key_sql
from store.postgres.params import float4_array

_TURN_COLUMNS = columns_sql(TURN_COLUMNS, "t")
# the context: same user, same persona (or none), same team (or none), through the context index
_CONTEXT_SQL = (
    f"t.user_id = CAST(%(user_id)s AS uuid) "
    f"AND {context_key_sql('t.persona_id')} = CAST(%(persona)s AS uuid) "
    f"AND {context_key_sql('t.team_id')} = CAST(%(team)s AS uuid)"
)

_INSERT_TURNS_SQL = (
    "INSERT INTO {turns} (id, channel_id, event_id, user_id, persona_id, team_id, role, text, at, "
    "position, speaker, search_text, embedding) SELECT id, channel_id, CAST(%(event_id)s AS uuid), user_id, "
    "persona_id, team_id, role, text, at, position, speaker, search_text, "
    "CAST((CAST(%(embeddings)s AS real[]))[start:start + {dim} - 1] AS vector({dim})) "
    "FROM unnest(CAST(%(ids)b AS uuid[]), CAST(%(channels)b AS uuid[]), CAST(%(users)b AS uuid[]), "
    "CAST(%(personas)b AS uuid[]), CAST(%(teams)b AS uuid[]), CAST(%(roles)b AS text[]), "
    "CAST(%(texts)b AS text[]), "
    "CAST(%(ats)b AS timestamptz[]), CAST(%(positions)b AS int[]), CAST(%(speakers)b AS text[]), "
    "CAST(%(search_texts)b AS text[]), CAST(%(starts)b AS int[])) "
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
        "ids": [uuid.uuid4() for _ in turns],
        "channels": [t.channel_id for t in turns],
        "users": [t.user_id for t in turns],
        "personas": [t.persona_id for t in turns],
        "teams": [t.team_id for t in turns],
        "roles": [t.role for t in turns],
        "texts": [t.text for t in turns],
        "ats": [t.at for t in turns],
        "positions": [t.position for t in turns],
        "speakers": [t.speaker for t in turns],
        "search_texts": [t.search_text for t in turns],
        "starts": starts,
        # a dozen turns' vectors: one array conversion, not one Python float at a time
        "embeddings": float4_array(
            np.asarray([t.embedding for t in turns if t.embedding is not None], dtype=np.float32).ravel()
        ),
    }
    return _INSERT_TURNS_SQL.format(turns=table, dim=dim), params


# the context's most recent turns (`%(window)s` of them), newest first, with `{columns}` (each after
# a comma): read from
# the context index alone (`turn_window_includes`), a context's turns being spread over the heap
# one page each; the full text of a turn too long for the index (`window_tsv` NULL) from its row
_RECENT_CTE = (
    "recent AS MATERIALIZED (SELECT t.id, t.channel_id, t.position, t.text_key{columns} "
    f"FROM conversation_turns t WHERE {_CONTEXT_SQL} ORDER BY t.at DESC LIMIT %(window)s)"
)
_WINDOW_TSV_SQL = (
    "coalesce(t.window_tsv, (SELECT s.search_tsv FROM conversation_turns s WHERE s.id = t.id)) AS search_tsv"
)
# one row per message (`same_message`: the text by its key, `TURN_TEXT_KEY_SQL`) among `{rows}`,
# the first by `{order}`: an event sent once per participant stores its messages once per event,
# and a copy must not take a candidate's place
_ONCE_SQL = (
    "SELECT DISTINCT ON (x.channel_id, x.position, x.text_key) x.* FROM {rows} x "
    "ORDER BY x.channel_id, x.position, x.text_key, {order}"
)
# the query vector cast once (a sub-select: an InitPlan); in the generic plan of a prepared
# statement a cast of the parameter would run again for every turn
_DISTANCE_SQL = "t.embedding <=> (SELECT CAST(CAST(%(qv)s AS real[]) AS vector({dim}))) AS distance"


def _stats_ctes() -> list[str]:
    """The CTEs of the query words' document frequencies among the context's `%(sample)s` most
    recent turns (the window's first, in the order the index gave them): `sample` their full
    text, `words` each word's lexemes (`i`, `j`: their order in the query), `lexes` each lexeme
    once with its tsquery and its order `n` (where the query first has it), `holding` the sample's
    turns that hold any of them, `df` how many hold each, `docs` the sample's size and mean lexeme
    count."""
    return [
        "sample AS MATERIALIZED (SELECT w.search_tsv FROM recent w LIMIT %(sample)s)",
        "words AS (SELECT u.word, u.i, l.lex, l.j "
        "FROM unnest(CAST(%(words)b AS text[])) WITH ORDINALITY AS u(word, i), "
        f"unnest(tsvector_to_array(to_tsvector('{TEXT_SEARCH_CONFIG}', u.word))) "
        "WITH ORDINALITY AS l(lex, j))",
        "lexes AS MATERIALIZED (SELECT f.lex, row_number() OVER (ORDER BY f.i, f.j) AS n, "
        "plainto_tsquery('simple', f.lex) AS query "
        "FROM (SELECT DISTINCT ON (lex) lex, i, j FROM words ORDER BY lex, i, j) AS f)",
        # one match per sample turn against all the lexemes at once, then each lexeme counted
        # among the few that hold one: not a pass over the whole sample per lexeme
        "holding AS MATERIALIZED (SELECT s.search_tsv FROM sample s WHERE s.search_tsv @@ "
        "(SELECT CAST(string_agg(CAST(x.query AS text), ' | ') AS tsquery) FROM lexes x "
        "WHERE numnode(x.query) > 0))",
        "df AS MATERIALIZED (SELECT x.lex, x.n, x.query, "
        "(SELECT count(*) FROM holding s WHERE s.search_tsv @@ x.query) AS containing FROM lexes x)",
        "docs AS MATERIALIZED (SELECT count(*) AS documents, "
        "coalesce(avg(length(search_tsv)), 0) AS mean_length FROM sample)",
    ]


def _vector_ctes() -> tuple[list[str], str]:
    """The vector ranking over `recent` (each turn's `distance`): its CTEs and its ranked rows
    (`id`, `source`, `rank`, `score`), the best `%(k)s` messages."""
    # a turn without an embedding has no distance (`<=>` is strict)
    ctes = [
        "vec_rows AS (SELECT w.id, w.channel_id, w.position, w.text_key, w.distance FROM recent w "
        "WHERE w.distance IS NOT NULL ORDER BY w.distance, w.id LIMIT 2 * %(k)s)",
        "vec AS (" + _ONCE_SQL.format(rows="vec_rows", order="x.distance, x.id") + ")",
    ]
    ranked = (
        "SELECT id, 'vector' AS source, row_number() OVER (ORDER BY distance, id) AS rank, "
        "1 - distance AS score FROM (SELECT * FROM vec ORDER BY distance, id LIMIT %(k)s) AS v"
    )
    return ctes, ranked


def _text_ctes() -> tuple[list[str], str]:
    """The full-text ranking over `recent` (BM25, binary term frequency, each query lexeme's idf from
    `df` and `docs`, `_stats_ctes`): its CTEs and its ranked rows, the best `%(k)s` messages."""
    avglen = "(SELECT greatest(CAST(d.mean_length AS float8), 1.0) FROM docs d)"
    ctes = [
        # `store.rules.recall.bm25_idf` in SQL, in its operations' order (the same float)
        "lex AS MATERIALIZED (SELECT ln(1.0 + (CAST(d.documents - df.containing AS float8) + 0.5) "
        "/ (CAST(df.containing AS float8) + 0.5)) AS idf, df.n, df.query FROM df CROSS JOIN docs d)",
        # the rows matching any query lexeme, each with its own words (the full text's weight-A
        # lexemes, `TURN_TSV_SQL`) filtered once
        "hit AS MATERIALIZED (SELECT w.id, w.channel_id, w.position, w.text_key, w.search_tsv, "
        "ts_filter(w.search_tsv, '{a}') AS own FROM recent w, "
        f"websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', %(tq)s) AS q(query) WHERE w.search_tsv @@ q.query)",
        "txt_rows AS (SELECT h.id, h.channel_id, h.position, h.text_key, "
        # summed in the query's lexeme order, so copies of a message score exactly alike
        "sum(l.idf * CASE WHEN h.own @@ l.query THEN 1 ELSE %(context_weight)s END ORDER BY l.n) "
        f"* (%(k1)s + 1) / (1 + %(k1)s * (1 - %(b)s + %(b)s * max(length(h.search_tsv)) / {avglen})) "
        "AS relevance FROM hit h JOIN lex l ON h.search_tsv @@ l.query "
        "GROUP BY h.id, h.channel_id, h.position, h.text_key "
        "ORDER BY relevance DESC, h.id LIMIT 2 * %(k)s)",
        "txt AS (" + _ONCE_SQL.format(rows="txt_rows", order="x.relevance DESC, x.id") + ")",
    ]
    ranked = (
        "SELECT id, 'text' AS source, row_number() OVER (ORDER BY relevance DESC, id) AS rank, "
        "relevance AS score FROM (SELECT * FROM txt ORDER BY relevance DESC, id LIMIT %(k)s) AS x"
    )
    return ctes, ranked


def turn_vector_sql(*, dim: int) -> str:
    """Postgres: the context's most recent `window` turns ranked by vector distance (`qv`) alone,
    its best `k` messages (the best `2k` rows, each message once); rows of turn columns plus
    `source`, `rank`, `score` — `turn_recall_sql`'s vector ranking, for another query vector."""
    # the window keeps each turn's distance, not its vector, all of it in the context index; a
    # result's columns are read from its row
    vec_ctes, vec_ranked = _vector_ctes()
    ctes = [_RECENT_CTE.format(columns=f", {_DISTANCE_SQL.format(dim=dim)}"), *vec_ctes]
    return (
        "WITH " + ", ".join(ctes) + f" SELECT {_TURN_COLUMNS}, r.source, r.rank, r.score "
        f"FROM ({vec_ranked}) AS r JOIN conversation_turns t ON t.id = r.id ORDER BY r.rank"
    )


def turn_recall_sql(*, dim: int, text: bool) -> str:
    """Postgres: a turn recall in one statement reading the context's window once: the query words'
    document frequencies (among the window's `%(sample)s` most recent turns: `TURN_STATS_SAMPLE`),
    the window ranked by vector distance and, with `text`, by BM25 with those frequencies' idf
    (binary term frequency, a lexeme found only among the turns around a turn weighing
    `context_weight`); rows of turn columns plus `source`, `rank`, `score` (the vector ranking's
    first, each best first), then one row per query word (`source` 'stats', turn columns NULL) with
    `word` and `share`, the largest fraction of the sample holding one of its lexemes."""
    ctes = [
        _RECENT_CTE.format(columns=f", {_WINDOW_TSV_SQL}, {_DISTANCE_SQL.format(dim=dim)}"),
        *_stats_ctes(),
    ]
    vec_ctes, vec_ranked = _vector_ctes()
    ctes += vec_ctes
    ranked = [vec_ranked]
    if text:
        txt_ctes, txt_ranked = _text_ctes()
        ctes += txt_ctes
        ranked.append(txt_ranked)
    ctes.append(
        "ranked AS (SELECT id, source, rank, score, CAST(NULL AS text) AS word, "
        "CAST(NULL AS float8) AS share FROM (" + " UNION ALL ".join(ranked) + ") AS b "
        # a word's share as `store.rules.recall.term_stats` has it (0 in an empty window)
        "UNION ALL SELECT NULL, 'stats', NULL, NULL, u.word, max(CASE WHEN d.documents > 0 "
        "THEN CAST(df.containing AS float8) / d.documents ELSE 0 END) "
        "FROM words u JOIN df ON df.lex = u.lex CROSS JOIN docs d GROUP BY u.word)"
    )
    return (
        "WITH " + ", ".join(ctes) + f" SELECT {_TURN_COLUMNS}, r.source, r.rank, r.score, r.word, r.share "
        "FROM ranked r LEFT JOIN conversation_turns t ON t.id = r.id ORDER BY r.source DESC, r.rank"
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class WindowRows:
    """A turn recall statement's rows decoded: each ranking's turns and scores (`source` ->
    best first) in the order the rows came, and the query words' shares of the window."""

    ranked: Mapping[str, Sequence[tuple[Turn, float]]]
    word_share: Mapping[str, float]

    def with_vector_ranking(self, other: WindowRows) -> WindowRows:
        """These rows with `other`'s vector ranking in place of their own (still first)."""
        rest = {source: hits for source, hits in self.ranked.items() if source != "vector"}
        vector = other.ranked.get("vector", ())
        return WindowRows(ranked={"vector": vector, **rest}, word_share=self.word_share)

    @property
    def turns(self) -> dict[uuid.UUID, Turn]:
        """Every ranked turn by id, in the order the rankings list them."""
        return {turn.id: turn for hits in self.ranked.values() for turn, _ in hits}

    @property
    def scores(self) -> dict[str, dict[uuid.UUID, float]]:
        """Each ranking's score per turn id (a ranking without rows left out)."""
        ranked = self.ranked.items()
        return {source: {turn.id: score for turn, score in hits} for source, hits in ranked if hits}


def window_rows(rows: Sequence[Mapping[str, Any]]) -> WindowRows:
    """`WindowRows` from the rows of `turn_recall_sql` or `turn_vector_sql` (no `stats` rows: no
    shares)."""
    ranked: dict[str, list[tuple[Turn, float]]] = {}
    share: dict[str, float] = {}
    decoded: dict[uuid.UUID, Turn] = {}  # a turn both rankings found is decoded once
    for row in rows:
        source = row["source"]
        if source == "stats":
            share[row["word"]] = float(row["share"])
            continue
        turn = decoded.get(row["id"])
        if turn is None:
            turn = decoded[row["id"]] = turn_from_row(row)
        ranked.setdefault(source, []).append((turn, float(row["score"])))
    return WindowRows(ranked=ranked, word_share=share)
