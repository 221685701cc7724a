"""The Postgres statements of conversation turns: an event's turns inserted in one statement of
fixed text (columns as arrays), and a context's recent window ranked by vector distance and by full
text (BM25 over its lexemes), with the query words' document frequencies read first."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from store.core.rows import TURN_COLUMNS, columns_sql
from store.model import NewTurn
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


# the context's most recent turns (`%(window)s` of them), newest first, with `{columns}`: read from
# the context index alone (`turn_window_includes`), a context's turns being spread over the heap
# one page each; the full text of a turn too long for the index (`window_tsv` NULL) from its row
_RECENT_CTE = (
    "recent AS MATERIALIZED (SELECT t.id, t.channel_id, t.position, t.text_key, {columns} "
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


def turn_term_stats_sql() -> str:
    """Postgres: per query word (`%(words)s`), its lexemes and how many of the context's `%(sample)s`
    most recent messages (`TURN_STATS_SAMPLE`; each message once among its `%(window)s` most recent
    turns) hold each in their full text, plus the number of those turns and their mean lexeme count: rows for
    `store.rules.recall.term_stats`."""
    return (
        "WITH "
        + _RECENT_CTE.format(columns=f"t.at, {_WINDOW_TSV_SQL}")
        + ", w AS MATERIALIZED (SELECT * FROM ("
        + _ONCE_SQL.format(rows="recent", order="x.at DESC, x.id")
        + ") AS o ORDER BY o.at DESC, o.id LIMIT %(sample)s), "
        "words AS (SELECT u.word, l.lex FROM unnest(CAST(%(words)b AS text[])) AS u(word), "
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
    # the window keeps each turn's distance, not its vector, and what the ranking reads, all of it
    # in the context index; a result's columns are read from its row
    recent = [_WINDOW_TSV_SQL]
    if vector:
        # the query vector cast once (a sub-select: an InitPlan); in the generic plan of a prepared
        # statement a cast of the parameter would run again for every turn
        recent.append(f"t.embedding <=> (SELECT CAST(CAST(%(qv)s AS real[]) AS vector({dim}))) AS distance")
    ctes = [_RECENT_CTE.format(columns=", ".join(recent))]
    ranked: list[str] = []
    if vector:
        # a turn without an embedding has no distance (`<=>` is strict)
        ctes.append(
            "vec_rows AS (SELECT w.id, w.channel_id, w.position, w.text_key, w.distance FROM recent w "
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
            "FROM unnest(CAST(%(lexemes)b AS text[]), CAST(%(idfs)b AS float8[])) "
            "WITH ORDINALITY AS l(lex, idf, n))"
        )
        ctes.append(
            "hit AS MATERIALIZED (SELECT w.id, w.channel_id, w.position, w.text_key, w.search_tsv, "
            "ts_filter(w.search_tsv, '{a}') AS own FROM recent w, "
            f"websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', %(tq)s) AS q(query) WHERE w.search_tsv @@ q.query)"
        )
        ctes.append(
            "txt_rows AS (SELECT h.id, h.channel_id, h.position, h.text_key, "
            # summed in the query's lexeme order, so copies of a message score exactly alike
            "sum(l.idf * CASE WHEN h.own @@ l.query THEN 1 ELSE %(context_weight)s END ORDER BY l.n) "
            "* (%(k1)s + 1) / (1 + %(k1)s * (1 - %(b)s + %(b)s * max(length(h.search_tsv)) / %(avglen)s)) "
            "AS relevance FROM hit h JOIN lex l ON h.search_tsv @@ l.query "
            "GROUP BY h.id, h.channel_id, h.position, h.text_key "
            "ORDER BY relevance DESC, h.id LIMIT 2 * %(k)s)"
        )
        ctes.append("txt AS (" + _ONCE_SQL.format(rows="txt_rows", order="x.relevance DESC, x.id") + ")")
        ranked.append(
            "SELECT id, 'text' AS source, row_number() OVER (ORDER BY relevance DESC, id) AS rank, "
            "relevance AS score FROM (SELECT * FROM txt ORDER BY relevance DESC, id LIMIT %(k)s) AS x"
        )
    ctes.append("ranked AS (" + " UNION ALL ".join(ranked) + ")")
    return (
        "WITH " + ", ".join(ctes) + f" SELECT {_TURN_COLUMNS}, r.source, r.rank, r.score FROM ranked r "
        "JOIN conversation_turns t ON t.id = r.id ORDER BY r.source DESC, r.rank"
    )
