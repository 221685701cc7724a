"""`SqliteMemoryStore`: the same MemoryStore and HistoryStore contract on SQLite (aiosqlite), for a
single process without Postgres.

Recall ranks exactly as on Postgres: the same query cues, the same score fusion with time and
conversation boosts, the same merging of a key across scopes (`store.recall`, `store.cues`). Full
text is SQLite's FTS5 (`porter unicode61` tokenizer, so "preferences" finds "prefers"; OR over the
query's informative words; `bm25()` scores), in a table `memories_fts` that triggers keep in step
with `memories`. Vectors are scored with numpy off the event loop: the caller's owners' embeddings
are read once into a unit-row matrix, kept until anything is written (this process's writes, or
another connection's, seen through `PRAGMA data_version`). Owner isolation is in the SQL WHERE
clauses that read the rows, never a filter in Python.

The tables are created on first use (`store.migrate` does the same), so `sqlite:///:memory:` works.
Writers are serialised by one pooled connection and `BEGIN IMMEDIATE`. SQLite's lower() folds ASCII
only.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import String, column, event, func, literal_column, select, table, text, type_coerce
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool

from store.core import CoreStore
from store.recall import (
    DEFAULT_WEIGHTS,
    RETRIEVERS,
    ScoreFusion,
    candidate_count,
    focused_query,
    fts5_match,
    fuse,
    fuse_scores,
    is_empty_query,
    keyword_terms,
    mean_direction,
    normalize_key,
    query_cues,
    resolve_scopes,
    top_cosines,
    unit_rows,
)
from store.schema import build_schema
from store.types import Memory, OwnerRef, RecallHit, Retriever
from store.typing import Embedder
from store.urls import to_sqlalchemy_url

# FTS5 mirror of memories.key and memories.value. Its `memory_id` joins back to memories.id (the
# rowid of a table without an INTEGER PRIMARY KEY may change on VACUUM, so it is not the link).
FTS_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5("
    "memory_id UNINDEXED, key, value, tokenize = 'porter unicode61')",
    "CREATE TRIGGER IF NOT EXISTS memories_fts_insert AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts (memory_id, key, value) VALUES (new.id, new.key, new.value); END",
    "CREATE TRIGGER IF NOT EXISTS memories_fts_delete AFTER DELETE ON memories BEGIN "
    "DELETE FROM memories_fts WHERE memory_id = old.id; END",
    "CREATE TRIGGER IF NOT EXISTS memories_fts_update AFTER UPDATE OF id, key, value ON memories "
    "BEGIN DELETE FROM memories_fts WHERE memory_id = old.id; "
    "INSERT INTO memories_fts (memory_id, key, value) VALUES (new.id, new.key, new.value); END",
)
_FTS = table("memories_fts", column("memory_id"), column("key"), column("value"))
FTS_BACKFILL = (
    "INSERT INTO memories_fts (memory_id, key, value) SELECT m.id, m.key, m.value FROM memories m "
    "WHERE NOT EXISTS (SELECT 1 FROM memories_fts f WHERE f.memory_id = m.id)"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class OwnerVectors:
    """The embeddings of one set of owners' active memories, as unit rows, with their ids and keys."""

    stamp: tuple[int, int]
    ids: list[uuid.UUID]
    keys: list[str]  # normalised (store.recall.normalize_key)
    matrix: np.ndarray[Any, np.dtype[np.float32]]
    usable: np.ndarray[Any, np.dtype[np.bool_]]


def owner_vectors(
    stamp: tuple[int, int], rows: Sequence[tuple[str, str, str | None]], dim: int
) -> OwnerVectors:
    """`OwnerVectors` from (id, key, embedding JSON) rows; a missing or wrong-sized embedding is a
    zero row that is never returned."""
    matrix = np.zeros((len(rows), dim), dtype=np.float32)
    usable = np.zeros(len(rows), dtype=np.bool_)
    for index, (_, _, raw) in enumerate(rows):
        if raw is None:
            continue
        vector = json.loads(raw)
        if len(vector) == dim:
            matrix[index] = vector
            usable[index] = True
    return OwnerVectors(
        stamp=stamp,
        ids=[uuid.UUID(str(row[0])) for row in rows],
        keys=[normalize_key(row[1]) for row in rows],
        matrix=unit_rows(matrix),
        usable=usable & (np.linalg.norm(matrix, axis=1) > 0.0),
    )


class SqliteMemoryStore(CoreStore):
    """MemoryStore + HistoryStore on SQLite; `database_url` is `sqlite:///path.db` (or `:memory:`)."""

    def __init__(
        self,
        database_url: str,
        embedder: Embedder,
        *,
        weights: Mapping[str, float] = DEFAULT_WEIGHTS,
        fusion: ScoreFusion | None = None,
        busy_timeout_ms: int = 30_000,
        vector_cache_owners: int = 64,
    ) -> None:
        # one connection: SQLite has one writer anyway, and `:memory:` must stay one database
        engine = create_async_engine(
            to_sqlalchemy_url(database_url),
            poolclass=AsyncAdaptedQueuePool,
            pool_size=1,
            max_overflow=0,
            pool_timeout=busy_timeout_ms / 1000,
        )
        self._busy_timeout_ms = busy_timeout_ms
        event.listen(engine.sync_engine, "connect", self._configure_connection)
        event.listen(engine.sync_engine, "begin", self._begin_immediate)
        super().__init__(engine=engine, schema=build_schema(embedder.dim, "sqlite"), embedder=embedder)
        self._weights = dict(weights)
        self._fusion = fusion or ScoreFusion()
        self._schema_ready = False
        self._schema_lock = asyncio.Lock()
        # owners' embeddings as numpy matrices, least recently used dropped beyond the bound; a write
        # through this store bumps `_generation`, another connection's commit `PRAGMA data_version`
        self._vectors: OrderedDict[tuple[OwnerRef, ...], OwnerVectors] = OrderedDict()
        self._vector_cache_owners = vector_cache_owners
        self._generation = 0

    def _configure_connection(self, dbapi_connection: Any, _record: Any) -> None:
        # let SQLAlchemy emit BEGIN itself (see _begin_immediate) instead of pysqlite's implicit one
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()

    @staticmethod
    def _begin_immediate(conn: Any) -> None:
        # take the write lock up front: a deferred transaction that later writes can fail with
        # SQLITE_BUSY when another process wrote in between
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    async def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        async with self._schema_lock:
            if not self._schema_ready:
                async with self._engine.begin() as conn:
                    await conn.run_sync(self._schema.metadata.create_all)
                    for statement in FTS_DDL:
                        await conn.exec_driver_sql(statement)
                    # rows written before the full-text table existed (a database from an older version)
                    await conn.exec_driver_sql(FTS_BACKFILL)
                self._schema_ready = True

    async def check_schema(self) -> None:
        """Create the tables if missing (SQLite needs no separate migration step)."""
        await self._ensure_schema()

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[AsyncConnection]:
        await self._ensure_schema()
        try:
            async with self._engine.begin() as conn:
                yield conn
        finally:
            self._generation += 1

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        await self._ensure_schema()
        async with self._engine.connect() as conn:
            yield conn

    async def recall(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int = 20,
        *,
        retriever: Retriever = "hybrid",
        query_embedding: Sequence[float] | None = None,
    ) -> builtins.list[RecallHit]:
        """Active memories of the user (and persona), hybrid-ranked; empty query → top by confidence."""
        if retriever not in RETRIEVERS:
            raise ValueError(f"retriever must be one of {', '.join(RETRIEVERS)}, got {retriever!r}")
        if limit <= 0:
            return []
        owners = resolve_scopes(user_id, persona_id)
        k = candidate_count(limit)
        if is_empty_query(query):
            return await self._recall_top(owners, k, limit)
        cues = query_cues(query, now=datetime.now(UTC))
        match = fts5_match(cues.text)
        wants_vector = retriever in ("hybrid", "vector")
        wants_text = retriever in ("hybrid", "keyword") and match is not None
        scores: dict[str, dict[uuid.UUID, float]] = {}
        word_share: dict[str, float] = {}
        async with self._reading() as conn:
            vectors = await self._owner_vectors(conn, owners) if wants_vector or len(owners) > 1 else None
            if wants_text and match is not None:
                scores["text"] = await self._text_scores(conn, owners, match, k)
            if wants_vector and query_embedding is None and self._fusion.focus_share is not None:
                word_share = await self._word_share(conn, owners, cues.text)
        if wants_vector and vectors is not None:
            if query_embedding is not None:
                query_vector = self._check_dim(query_embedding, "query embedding")
            else:
                query_vector = await self._query_vector(cues.text, word_share)
            found = await asyncio.to_thread(top_cosines, vectors.matrix, vectors.usable, query_vector, k)
            scores["vector"] = {vectors.ids[index]: cosine for index, cosine in found}
        scores = {name: branch for name, branch in scores.items() if branch}
        if not scores:
            return []
        wanted = {mid for branch in scores.values() for mid in branch}
        memories = await self._memories(self._with_same_key(wanted, vectors))
        return fuse_scores(memories, scores, limit=limit, fusion=self._fusion, time_window=cues.time_window)

    async def _recall_top(self, owners: Sequence[OwnerRef], k: int, limit: int) -> builtins.list[RecallHit]:
        """Empty query: the owners' top memories by confidence, then recency."""
        m = self._schema.memories
        statement = (
            select(m.c.id)
            .where(m.c.status == "active", self._owner_clause(owners))
            .order_by(m.c.confidence.desc(), m.c.updated_at.desc(), m.c.id)
            .limit(k)
        )
        async with self._reading() as conn:
            top = [uuid.UUID(str(row[0])) for row in (await conn.execute(statement)).all()]
            vectors = await self._owner_vectors(conn, owners) if len(owners) > 1 else None
        memories = await self._memories(self._with_same_key(set(top), vectors))
        return fuse(memories, {"top": top}, limit=limit, weights=self._weights)

    def _with_same_key(self, ids: set[uuid.UUID], vectors: OwnerVectors | None) -> set[uuid.UUID]:
        """`ids` plus the other scopes' rows sharing a key with one of them, so the most specific
        scope's row wins the merge even when only the row it overrides matched."""
        if vectors is None:
            return ids
        keys = {key for mid, key in zip(vectors.ids, vectors.keys, strict=True) if mid in ids}
        return ids | {mid for mid, key in zip(vectors.ids, vectors.keys, strict=True) if key in keys}

    async def _query_vector(self, text: str, word_share: Mapping[str, float]) -> builtins.list[float]:
        """Embedding of the query, averaged with the query minus the words most memories contain."""
        focused = focused_query(text, word_share, self._fusion)
        if focused is None:
            return await self.embed_query(text)
        vectors = await self._embedder.embed([text, focused])
        return self._check_dim(mean_direction(vectors), "query embedding")

    async def _stamp(self, conn: AsyncConnection) -> tuple[int, int]:
        """Changes since the owners' vectors were read: this store's writes and other connections'."""
        version = (await conn.exec_driver_sql("PRAGMA data_version")).scalar_one()
        return self._generation, int(version)

    async def _owner_vectors(self, conn: AsyncConnection, owners: Sequence[OwnerRef]) -> OwnerVectors:
        """The owners' active memories' unit embeddings, read once and kept until a write."""
        key = tuple(owners)
        stamp = await self._stamp(conn)
        cached = self._vectors.get(key)
        if cached is not None and cached.stamp == stamp:
            self._vectors.move_to_end(key)
            return cached
        m = self._schema.memories
        statement = select(m.c.id, m.c.key, type_coerce(m.c.embedding, String)).where(
            m.c.status == "active", self._owner_clause(owners)
        )
        rows = [(str(r[0]), str(r[1]), r[2]) for r in (await conn.execute(statement)).all()]
        vectors = await asyncio.to_thread(owner_vectors, stamp, rows, self._schema.embedding_dim)
        self._vectors[key] = vectors
        self._vectors.move_to_end(key)
        while len(self._vectors) > self._vector_cache_owners:
            self._vectors.popitem(last=False)
        return vectors

    async def _text_scores(
        self, conn: AsyncConnection, owners: Sequence[OwnerRef], match: str, k: int
    ) -> dict[uuid.UUID, float]:
        """FTS5 BM25 (higher is better) of the owners' active memories matching any query word."""
        m = self._schema.memories
        fts: Any = literal_column("memories_fts")
        bm25 = func.bm25(fts, 0.0, 1.0, 1.0)
        statement = (
            select(m.c.id, (-bm25).label("relevance"))
            .select_from(m.join(_FTS, m.c.id == _FTS.c.memory_id))
            .where(text("memories_fts MATCH :match"), m.c.status == "active", self._owner_clause(owners))
            .order_by(bm25, m.c.id)
            .limit(k)
        )
        rows = (await conn.execute(statement, {"match": match})).all()
        return {uuid.UUID(str(row[0])): float(row[1]) for row in rows}

    async def _word_share(
        self, conn: AsyncConnection, owners: Sequence[OwnerRef], query: str
    ) -> dict[str, float]:
        """Fraction of the owners' active memories containing each informative query word (stemmed)."""
        words = keyword_terms(query)
        if not words:
            return {}
        m = self._schema.memories
        visible = (m.c.status == "active", self._owner_clause(owners))
        documents = (await conn.execute(select(func.count()).select_from(m).where(*visible))).scalar_one()
        if not documents:
            return {}
        share: dict[str, float] = {}
        for word in words:
            statement = (
                select(func.count())
                .select_from(m.join(_FTS, m.c.id == _FTS.c.memory_id))
                .where(text("memories_fts MATCH :match"), *visible)
            )
            containing = (await conn.execute(statement, {"match": f'"{word}"'})).scalar_one()
            share[word] = int(containing) / int(documents)
        return share

    async def _memories(self, ids: set[uuid.UUID]) -> builtins.list[Memory]:
        """The memories with these ids (active ones; the caller's owners chose the ids)."""
        if not ids:
            return []
        m = self._schema.memories
        async with self._reading() as conn:
            rows = (
                await conn.execute(
                    select(*self._memory_columns).where(m.c.id.in_(list(ids)), m.c.status == "active")
                )
            ).all()
        return [self._memory(row) for row in rows]
