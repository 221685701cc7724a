"""`PostgresMemoryStore`: the MemoryStore on Postgres + pgvector (SQLAlchemy 2 async
engine, psycopg 3). Writes and review come from `store.core.store`; this module adds recall.

Recall takes two round trips. The first reads the query words' document frequencies among the
owners' active memories (`term_stats_sql`); the second is one statement with a vector branch (cosine
nearest neighbours) and a full-text branch (BM25 over the query's lexemes, OR semantics, idf from
the first trip, a lexeme found only in the key weighing `ScoreFusion.key_weight`), each limited to
the caller's owners and `active` rows in its WHERE clause, plus the same-key rows of other scopes so
overrides can be merged. The shared pure code then fuses the scores with the query's cues
(`store.core.recall.fuse_scores`, `store.rules.cues`), exactly as the SQLite store does.

Every pooled connection runs with `hnsw.iterative_scan = relaxed_order`: when the planner walks the
HNSW index for a big owner, pgvector keeps scanning until enough rows pass the owner filter instead
of silently returning fewer. Relaxed order is restored by ranking the CTE's rows by exact distance.
"""

from __future__ import annotations

import builtins
import math
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from psycopg.rows import dict_row
from sqlalchemy import event, func
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from store.core.base import psycopg_sql
from store.core.recall import (
    DEFAULT_WEIGHTS,
    RETRIEVERS,
    Bm25,
    ScoreFusion,
    TermStats,
    candidate_count,
    embedding_queries,
    fuse,
    fuse_scores,
    is_empty_query,
    mean_direction,
    query_cues,
    query_terms,
    resolve_scopes,
    term_stats,
    websearch_or_query,
)
from store.core.schema import TEXT_SEARCH_CONFIG, build_schema, hnsw_expression, vector_literal
from store.core.store import CoreStore
from store.errors import translating_errors
from store.migrate import (
    EmbeddingDimensionMismatch,
    SchemaError,
    current_revision,
    existing_embedding_dim,
    head_revision,
)
from store.model import Memory, MemorySettings, OwnerRef, RecallHit, Retriever
from store.postgres.event_write import PipelinedEventWrites
from store.protocols import Embedder
from store.rules.cues import TimeWindow
from store.rules.policy import storable_confidence
from store.rules.urls import to_sqlalchemy_url

_MEMORY_COLUMNS = (
    "m.id, m.scope, m.owner_id, m.user_id, m.key, m.value, m.source_channel_id, m.confidence, "
    "m.status, m.created_at, m.updated_at, m.team_id, m.evidence, m.observed_at"
)
# the same normalisation as store.core.recall.normalize_key: lower case, whitespace runs collapsed
_NORMALIZED_KEY = r"btrim(regexp_replace(lower({t}.key), '\s+', ' ', 'g'))"


@dataclass(frozen=True, kw_only=True, slots=True)
class RecallTuning:
    """Knobs of the vector branch; the defaults hold for the benchmark in bench/README.md."""

    ef_search: int = 100  # HNSW candidate list; at least the per-branch candidate count
    max_scan_tuples: int = 20_000  # iterative scan budget before pgvector gives up
    scan_mem_multiplier: float = 2.0  # work_mem multiple the iterative scan may use
    # A generic plan (psycopg prepares a statement after 5 uses) cannot see the owner or the
    # terms and may AND the owner index with a GIN scan of a common term: 3x slower at p50, 4x at
    # p99 in the benchmark. Custom plans cost ~0.3 ms of planning. None keeps the server default.
    plan_cache_mode: str | None = "force_custom_plan"
    # SSD/cached storage: with the default 4.0 the planner over-prices the owner's few heap pages
    random_page_cost: float | None = 1.1


@dataclass(frozen=True, kw_only=True, slots=True)
class RecallPlan:
    """One recall statement with its parameters and the query's time window (if it named one)."""

    sql: str
    params: dict[str, Any]
    time_window: TimeWindow | None
    when: bool = False  # the query asks "When …?"


def session_settings_sql(tuning: RecallTuning) -> list[str]:
    """The SET statements every pooled connection runs once."""
    if tuning.plan_cache_mode not in (None, "auto", "force_custom_plan", "force_generic_plan"):
        raise ValueError(
            "plan_cache_mode must be auto, force_custom_plan or force_generic_plan, "
            f"got {tuning.plan_cache_mode!r}"
        )
    statements = [
        "SET TIME ZONE 'UTC'",
        "SET hnsw.iterative_scan = relaxed_order",
        f"SET hnsw.ef_search = {int(tuning.ef_search)}",
        f"SET hnsw.max_scan_tuples = {int(tuning.max_scan_tuples)}",
        f"SET hnsw.scan_mem_multiplier = {float(tuning.scan_mem_multiplier)}",
    ]
    if tuning.plan_cache_mode is not None:
        statements.append(f"SET plan_cache_mode = {tuning.plan_cache_mode}")
    if tuning.random_page_cost is not None:
        statements.append(f"SET random_page_cost = {float(tuning.random_page_cost)}")
    return statements


def owner_sql(owners: Sequence[OwnerRef], alias: str) -> str:
    """SQL predicate (psycopg parameters `%(user_id)s`, `%(persona_id)s`, `%(team_id)s`) for the
    resolved owners, inside the team context: rows of no team, or of `%(team_id)s` (NULL: no team)."""
    parts = []
    for owner in owners:
        if owner.scope == "user":
            parts.append(f"({alias}.scope = 'user' AND {alias}.owner_id = %(user_id)s)")
        elif owner.scope == "persona":
            parts.append(f"({alias}.scope = 'persona' AND {alias}.owner_id = %(persona_id)s)")
        else:
            parts.append(
                f"({alias}.scope = 'persona_user' AND {alias}.owner_id = %(persona_id)s "
                f"AND {alias}.user_id = %(user_id)s)"
            )
    teams = f"({alias}.team_id IS NULL OR {alias}.team_id = %(team_id)s)"
    return "((" + " OR ".join(parts) + f") AND {teams})"


def recall_sql(
    *,
    owners: Sequence[OwnerRef],
    branches: Sequence[str],
    embedding_dim: int,
    value_weighted: bool = False,
) -> str:
    """The single recall statement for the given branches (`vector`, `text` or `top`).

    `value_weighted`: in the full-text branch a query lexeme found in the memory's value weighs its
    idf, one found only in its key `%(key_weight)s` × its idf (the value's lexemes are parsed at
    query time, for the rows that match). Returns rows of memory columns plus `source` and `rank`
    (NULL for override-only rows)."""
    where = f"m.status = 'active' AND {owner_sql(owners, 'm')}"
    ctes: list[str] = []
    ranked: list[str] = []
    if "vector" in branches:
        hnsw = hnsw_expression(embedding_dim)
        if hnsw is not None and hnsw[0] != "embedding":
            distance = (
                f"CAST(m.embedding AS halfvec({embedding_dim})) <=> CAST(%(qv)s AS halfvec({embedding_dim}))"
            )
        else:
            distance = f"m.embedding <=> CAST(%(qv)s AS vector({embedding_dim}))"
        ctes.append(
            f"vec AS MATERIALIZED (SELECT m.id, {distance} AS distance FROM memories m "
            f"WHERE {where} AND m.embedding IS NOT NULL ORDER BY distance LIMIT %(k)s)"
        )
        ranked.append(
            "SELECT id, 'vector' AS source, row_number() OVER (ORDER BY distance, id) AS rank, "
            "1 - distance AS score FROM vec"
        )
    if "text" in branches:
        # BM25 with binary term frequency: idf per query lexeme comes from the owner's own memories
        # (computed by `term_stats_sql`), so a word most of them contain weighs almost nothing
        weight, value_lexemes = "t.idf", ""
        if value_weighted:
            weight = (
                "t.idf * CASE WHEN v.tsv @@ plainto_tsquery('simple', t.lex) THEN 1 ELSE %(key_weight)s END"
            )
            value_lexemes = f", LATERAL (SELECT to_tsvector('{TEXT_SEARCH_CONFIG}', m.value)) AS v(tsv)"
        ctes.append(
            "txt AS MATERIALIZED (SELECT m.id, "
            f"coalesce((SELECT sum({weight}) FROM "
            "unnest(CAST(%(lexemes)s AS text[]), CAST(%(idfs)s AS float8[])) AS t(lex, idf) "
            "WHERE m.search_tsv @@ plainto_tsquery('simple', t.lex)), 0) "
            "* (%(k1)s + 1) / (1 + %(k1)s * (1 - %(b)s + %(b)s * length(m.search_tsv) / %(avglen)s)) "
            f"AS relevance FROM memories m, websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', %(tq)s) AS q(query)"
            f"{value_lexemes} "
            f"WHERE {where} AND m.search_tsv @@ q.query ORDER BY relevance DESC, m.id LIMIT %(k)s)"
        )
        ranked.append(
            "SELECT id, 'text' AS source, row_number() OVER (ORDER BY relevance DESC, id) AS rank, "
            "relevance AS score FROM txt"
        )
    if "top" in branches:
        ctes.append(
            "top AS MATERIALIZED (SELECT m.id, m.confidence, m.updated_at FROM memories m "
            f"WHERE {where} ORDER BY m.confidence DESC, m.updated_at DESC, m.id LIMIT %(k)s)"
        )
        ranked.append(
            "SELECT id, 'top' AS source, row_number() OVER "
            "(ORDER BY confidence DESC, updated_at DESC, id) AS rank, confidence AS score FROM top"
        )
    if not ranked:
        raise ValueError("recall_sql needs at least one branch")
    ctes.append("ranked AS (" + " UNION ALL ".join(ranked) + ")")
    if len(owners) > 1:
        # rows of other scopes with a ranked row's key: a persona_user override must win the merge
        # even when only the user-scope row it overrides matched the query
        ctes.append(
            "hits AS (SELECT id FROM ranked UNION SELECT w.id FROM memories w "
            f"WHERE w.status = 'active' AND {owner_sql(owners, 'w')} AND {_NORMALIZED_KEY.format(t='w')} IN "
            f"(SELECT {_NORMALIZED_KEY.format(t='x')} FROM memories x WHERE x.id IN (SELECT id FROM ranked)))"
        )
    else:
        ctes.append("hits AS (SELECT DISTINCT id FROM ranked)")
    return (
        "WITH " + ",\n".join(ctes) + f"\nSELECT {_MEMORY_COLUMNS}, r.source, r.rank, r.score FROM hits h "
        "JOIN memories m ON m.id = h.id LEFT JOIN ranked r ON r.id = h.id"
    )


def term_stats_sql(owners: Sequence[OwnerRef]) -> str:
    """Per query word: its lexemes and how many of the owners' active memories contain each, plus
    the number of memories and their mean lexeme count (read from at most `%(sample)s` rows, so a
    huge persona scope costs a bounded scan)."""
    where = f"m.status = 'active' AND {owner_sql(owners, 'm')}"
    return (
        f"WITH owned AS MATERIALIZED (SELECT m.search_tsv FROM memories m WHERE {where} LIMIT %(sample)s), "
        "words AS (SELECT u.word, l.lex FROM unnest(CAST(%(words)s AS text[])) AS u(word), "
        f"unnest(tsvector_to_array(to_tsvector('{TEXT_SEARCH_CONFIG}', u.word))) AS l(lex)), "
        "lexes AS (SELECT DISTINCT lex FROM words), "
        "df AS (SELECT x.lex, count(o.search_tsv) AS containing FROM lexes x "
        "LEFT JOIN owned o ON o.search_tsv @@ plainto_tsquery('simple', x.lex) GROUP BY x.lex) "
        "SELECT w.word, w.lex, df.containing, (SELECT count(*) FROM owned), "
        "(SELECT coalesce(avg(length(search_tsv)), 0) FROM owned) FROM words w JOIN df ON df.lex = w.lex"
    )


def postgres_connect_args(
    connect_timeout_s: float | None, statement_timeout_s: float | None, *, parallel_query: bool = True
) -> dict[str, Any]:
    """psycopg connect arguments: `connect_timeout` (whole seconds, at least 1), and as startup
    options (no extra round trip, they survive the pool's resets) the session's
    `statement_timeout` and, without `parallel_query`, no parallel workers (short OLTP statements:
    launching workers costs more than it saves)."""
    args: dict[str, Any] = {}
    if connect_timeout_s:
        args["connect_timeout"] = max(1, math.ceil(connect_timeout_s))
    options = []
    if statement_timeout_s:
        options.append(f"-c statement_timeout={max(1, round(statement_timeout_s * 1000))}")
    if not parallel_query:
        options.append("-c max_parallel_workers_per_gather=0")
    if options:
        args["options"] = " ".join(options)
    return args


class PostgresMemoryStore(PipelinedEventWrites, CoreStore):
    """MemoryStore on Postgres with pgvector; migrate the database first (`store.migrate`)."""

    def __init__(
        self,
        database_url: str,
        embedder: Embedder,
        *,
        pool_size: int = 10,
        max_overflow: int = 10,
        pool_pre_ping: bool = True,
        tuning: RecallTuning | None = None,
        weights: Mapping[str, float] = DEFAULT_WEIGHTS,
        fusion: ScoreFusion | None = None,
        bm25: Bm25 | None = None,
        echo: bool = False,
        settings_defaults: MemorySettings | None = None,
        connect_timeout_s: float | None = 10.0,
        statement_timeout_s: float | None = 60.0,
        parallel_query: bool = True,
    ) -> None:
        """`connect_timeout_s`: opening a connection gives up after it (an unreachable host fails
        instead of hanging); `statement_timeout_s`: the sessions' `statement_timeout`. None or 0:
        none."""
        engine = create_async_engine(
            to_sqlalchemy_url(database_url),
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_pre_ping=pool_pre_ping,
            echo=echo,
            connect_args=postgres_connect_args(
                connect_timeout_s, statement_timeout_s, parallel_query=parallel_query
            ),
            # errors (and so log lines and DLQ reasons) never carry SQL parameters: memory values
            hide_parameters=True,
        )
        self._tuning = tuning or RecallTuning()
        self._weights = dict(weights)
        self._fusion = fusion or ScoreFusion()
        self._bm25 = bm25 or Bm25()
        event.listen(engine.sync_engine, "connect", self._configure_session)
        super().__init__(
            engine=engine,
            schema=build_schema(embedder.dim, "postgresql"),
            embedder=embedder,
            settings_defaults=settings_defaults,
        )
        # recall is a single SELECT: autocommit saves the BEGIN/COMMIT round trips
        self._read_engine: AsyncEngine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._idle = []
        self._idle_limit = pool_size // 2

    def _configure_session(self, dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("; ".join(session_settings_sql(self._tuning)))
        cursor.close()
        # a SET inside a transaction is undone by the pool's rollback-on-return: commit it
        dbapi_connection.commit()

    async def check_schema(self) -> None:
        """Raise `SchemaError` unless the database is migrated to this version and dimension."""

        def inspect(sync_conn: Connection) -> tuple[str | None, int | None]:
            """(alembic revision, embedding dimension) of the database."""
            return current_revision(sync_conn), existing_embedding_dim(sync_conn)

        async with translating_errors(), self._engine.connect() as conn:
            revision, dim = await conn.run_sync(inspect)
        if revision is None or dim is None:
            raise SchemaError(
                "the database has no persona-memory schema yet: run `pmem migrate` "
                "(it reads PMEM_DATABASE_URL and PMEM_EMBEDDING_DIM)"
            )
        if dim != self._schema.embedding_dim:
            raise EmbeddingDimensionMismatch(existing=dim, configured=self._schema.embedding_dim)
        head = head_revision()
        if revision != head:
            raise SchemaError(
                f"the database schema is at revision {revision} but this version of persona-memory "
                f"needs {head}: run `pmem migrate`"
            )
        # another embedding model than the one the stored vectors were made with: refuse
        await self.check_embedding_identity()

    def _now(self) -> Any:
        # the server's clock, so timestamps agree across worker hosts
        return func.now()

    async def _statement(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int,
        retriever: Retriever,
        query_embedding: Sequence[float] | None,
        team_id: uuid.UUID | None = None,
    ) -> RecallPlan | None:
        """The recall SQL, its parameters and the query's time window; None when no branch can run."""
        if retriever not in RETRIEVERS:
            raise ValueError(f"retriever must be one of {', '.join(RETRIEVERS)}, got {retriever!r}")
        owners = resolve_scopes(user_id, persona_id)
        params: dict[str, Any] = {
            "k": candidate_count(limit),
            "user_id": user_id,
            "persona_id": persona_id,
            "team_id": team_id,
        }
        if is_empty_query(query):
            sql = recall_sql(owners=owners, branches=["top"], embedding_dim=self._schema.embedding_dim)
            return RecallPlan(sql=sql, params=params, time_window=None)
        cues = query_cues(query, now=datetime.now(UTC))
        text = cues.text
        branches: list[str] = []
        needs_stats = retriever != "vector" or query_embedding is None
        stats = await self._term_stats(owners, params, text) if needs_stats else None
        if retriever in ("hybrid", "vector"):
            if query_embedding is not None:
                vector = self._check_dim(query_embedding, "query embedding")
            else:
                assert stats is not None
                vector = await self._query_vector(text, stats)
            params["qv"] = vector_literal(vector)
            branches.append("vector")
        tsquery = websearch_or_query(text)
        if retriever in ("hybrid", "keyword") and tsquery is not None and stats is not None and stats.idf:
            params.update(
                tq=tsquery,
                lexemes=list(stats.idf),
                idfs=list(stats.idf.values()),
                k1=self._bm25.k1,
                b=self._bm25.b,
                avglen=max(stats.mean_length, 1.0),
            )
            branches.append("text")
        if not branches:
            return None
        value_weighted = "text" in branches and self._fusion.key_weight != 1.0
        if value_weighted:
            params["key_weight"] = float(self._fusion.key_weight)
        sql = recall_sql(
            owners=owners,
            branches=branches,
            embedding_dim=self._schema.embedding_dim,
            value_weighted=value_weighted,
        )
        return RecallPlan(
            sql=sql,
            params=params,
            time_window=cues.time_window,
            when=cues.when,
        )

    async def _term_stats(
        self, owners: Sequence[OwnerRef], params: Mapping[str, Any], text: str
    ) -> TermStats:
        """Document frequencies of the query's words among the owners' active memories."""
        words = query_terms(text)
        if not words:
            return TermStats(documents=0, mean_length=0.0, idf={}, word_share={})
        rows = await self._fetch(
            term_stats_sql(owners),
            {**params, "words": words, "sample": self._bm25.stats_sample},
        )
        return term_stats(rows)

    async def _query_vector(self, text: str, stats: TermStats) -> builtins.list[float]:
        """The mean direction of the query's embedding texts (`store.core.recall.embedding_queries`)."""
        texts = embedding_queries(text, stats.word_share, self._fusion)
        vectors = await self.embed_queries(texts)
        return vectors[0] if len(vectors) == 1 else mean_direction(vectors)

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        # reads run one statement each under READ COMMITTED anyway: a transaction around them
        # only costs the BEGIN and ROLLBACK round trips
        async with translating_errors(), self._read_engine.connect() as conn:
            yield conn

    async def _fetch(
        self, sql: str, params: Mapping[str, Any] | None = None
    ) -> builtins.list[tuple[Any, ...]]:
        """Run one statement on a pooled connection's psycopg driver, in autocommit.

        Recall is the hot path: this skips SQLAlchemy's statement and row processing (about a
        millisecond per call) and the BEGIN/COMMIT round trips; psycopg prepares the few
        statement shapes server-side after their fifth use."""
        async with self._driver() as (_, driver), driver.cursor() as cursor:
            await cursor.execute(sql, params)
            rows: builtins.list[tuple[Any, ...]] = await cursor.fetchall()
        return rows

    async def _read_rows(self, sql: str, params: Mapping[str, Any]) -> builtins.list[Mapping[Any, Any]]:
        """`StoreBase._read_rows` on the psycopg driver, as `_fetch`."""
        async with self._driver() as (_, driver), driver.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(psycopg_sql(sql), params)
            rows = await cursor.fetchall()
        return list(rows)

    async def recall(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int = 20,
        *,
        retriever: Retriever = "hybrid",
        query_embedding: Sequence[float] | None = None,
        team_id: uuid.UUID | None = None,
    ) -> builtins.list[RecallHit]:
        """Active memories of the user (and persona) in the team context (`team_id`: rows of no team
        and of that team), hybrid-ranked; empty query → top by confidence."""
        if limit <= 0:
            return []
        plan = await self._statement(user_id, persona_id, query, limit, retriever, query_embedding, team_id)
        if plan is None:
            return []
        memories: dict[uuid.UUID, Memory] = {}
        ranks: dict[str, list[tuple[int, uuid.UUID]]] = {}
        scores: dict[str, dict[uuid.UUID, float]] = {}
        for row in await self._fetch(plan.sql, plan.params):
            memory = Memory(
                id=row[0],
                scope=row[1],
                owner_id=row[2],
                user_id=row[3],
                key=row[4],
                value=row[5],
                source_channel_id=row[6],
                confidence=storable_confidence(row[7]),  # REAL: 0.7 reads back as 0.69999998
                status=row[8],
                created_at=row[9],
                updated_at=row[10],
                team_id=row[11],
                evidence=row[12],
                observed_at=row[13],
            )
            memories[memory.id] = memory
            if row[14] is not None:
                ranks.setdefault(row[14], []).append((row[15], memory.id))
                scores.setdefault(row[14], {})[memory.id] = float(row[16])
        if "top" in ranks:
            rankings = {source: [mid for _, mid in sorted(pairs)] for source, pairs in ranks.items()}
            return fuse(memories.values(), rankings, limit=limit, weights=self._weights)
        return fuse_scores(
            memories.values(),
            scores,
            limit=limit,
            fusion=self._fusion,
            time_window=plan.time_window,
            when=plan.when,
        )

    async def explain_recall(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int = 20,
        *,
        retriever: Retriever = "hybrid",
    ) -> str:
        """EXPLAIN (ANALYZE, BUFFERS) of the recall statement (for tuning and the benchmark)."""
        plan = await self._statement(user_id, persona_id, query, limit, retriever, None)
        if plan is None:
            return "(no statement: the query has no searchable terms for this retriever)"
        return "\n".join(
            str(row[0]) for row in await self._fetch("EXPLAIN (ANALYZE, BUFFERS) " + plan.sql, plan.params)
        )

    async def session_settings(self) -> dict[str, str]:
        """The recall settings a pooled connection actually runs with (see `RecallTuning`)."""
        names = (
            "hnsw.iterative_scan",
            "hnsw.ef_search",
            "hnsw.max_scan_tuples",
            "plan_cache_mode",
            "random_page_cost",
            "TimeZone",
        )
        # loading the extension library validates placeholder values set before it was loaded
        await self._fetch("SELECT '[1]'::vector")
        return {name: str((await self._fetch(f"SHOW {name}"))[0][0]) for name in names}
