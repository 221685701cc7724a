"""`SqliteMemoryStore`: the same MemoryStore and HistoryStore contract on SQLite (aiosqlite), for a
single process without Postgres. Seed §4: text search falls back to LIKE (any query term, as a
substring); vector similarity is computed in Python over the caller's own active rows, which the
SQL WHERE clause selects — owner isolation never depends on Python filtering.

The tables are created on first use (`store.migrate` does the same), so `sqlite:///:memory:` works.
Writers are serialised by one pooled connection and `BEGIN IMMEDIATE`.

Differences from Postgres, by design of the fallback: no stemming (LIKE matches substrings, so
"prefer" finds "prefers" but "preferences" does not find "prefers"), SQLite's lower() folds ASCII
only, and vector recall reads every active row of the caller's owners (fine for thousands of
memories per user, not for a persona with hundreds of thousands).
"""

from __future__ import annotations

import asyncio
import builtins
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool

from store.core import CoreStore
from store.errors import translating_errors
from store.migrate import create_sqlite_schema
from store.recall import (
    DEFAULT_WEIGHTS,
    RETRIEVERS,
    candidate_count,
    fuse,
    is_empty_query,
    keyword_ranking,
    keyword_terms,
    resolve_scopes,
    top_order,
    vector_ranking,
)
from store.schema import build_schema
from store.types import MemorySettings, RecallHit, Retriever
from store.typing import Embedder
from store.urls import to_sqlalchemy_url


def _like_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class SqliteMemoryStore(CoreStore):
    """MemoryStore + HistoryStore on SQLite; `database_url` is `sqlite:///path.db` (or `:memory:`)."""

    def __init__(
        self,
        database_url: str,
        embedder: Embedder,
        *,
        weights: Mapping[str, float] = DEFAULT_WEIGHTS,
        busy_timeout_ms: int = 30_000,
        settings_defaults: MemorySettings | None = None,
    ) -> None:
        # one connection: SQLite has one writer anyway, and `:memory:` must stay one database
        engine = create_async_engine(
            to_sqlalchemy_url(database_url),
            poolclass=AsyncAdaptedQueuePool,
            pool_size=1,
            max_overflow=0,
            pool_timeout=busy_timeout_ms / 1000,
            hide_parameters=True,  # errors never carry SQL parameters (memory values)
        )
        self._busy_timeout_ms = busy_timeout_ms
        event.listen(engine.sync_engine, "connect", self._configure_connection)
        event.listen(engine.sync_engine, "begin", self._begin_immediate)
        super().__init__(
            engine=engine,
            schema=build_schema(embedder.dim, "sqlite"),
            embedder=embedder,
            settings_defaults=settings_defaults,
        )
        self._weights = dict(weights)
        self._schema_ready = False
        self._schema_lock = asyncio.Lock()

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
                    await conn.run_sync(create_sqlite_schema, self._schema)
                self._schema_ready = True

    async def check_schema(self) -> None:
        """Create the tables if missing (SQLite needs no separate migration step); refuse another
        embedding model than the recorded one."""
        await self._ensure_schema()
        await self.check_embedding_identity()

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[AsyncConnection]:
        await self._ensure_schema()
        async with translating_errors(), self._engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        await self._ensure_schema()
        async with translating_errors(), self._engine.connect() as conn:
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
        team_id: uuid.UUID | None = None,
    ) -> builtins.list[RecallHit]:
        """Active memories of the user (and persona) in the team context (`team_id`: rows of no team
        and of that team), hybrid-ranked; empty query → top by confidence."""
        if retriever not in RETRIEVERS:
            raise ValueError(f"retriever must be one of {', '.join(RETRIEVERS)}, got {retriever!r}")
        if limit <= 0:
            return []
        owners = resolve_scopes(user_id, persona_id)
        m = self._schema.memories
        k = candidate_count(limit)
        visible = (m.c.status == "active", self._owner_clause(owners), self._team_clause(team_id))
        async with self._reading() as conn:
            rows = (await conn.execute(select(*self._memory_columns, m.c.embedding).where(*visible))).all()
            memories = [self._memory(row) for row in rows]
            rankings: dict[str, builtins.list[uuid.UUID]] = {}
            if is_empty_query(query):
                rankings["top"] = [mm.id for mm in top_order(memories)[:k]]
            else:
                terms = keyword_terms(query)
                if retriever in ("hybrid", "keyword") and terms:
                    haystack = func.lower(m.c.key + " " + m.c.value)
                    like = or_(*(haystack.like(_like_pattern(term), escape="\\") for term in terms))
                    matched = (await conn.execute(select(*self._memory_columns).where(*visible, like))).all()
                    rankings["text"] = keyword_ranking(terms, [self._memory(r) for r in matched], limit=k)
        if retriever in ("hybrid", "vector") and not is_empty_query(query):
            vector = (
                self._check_dim(query_embedding, "query embedding")
                if query_embedding is not None
                else await self.embed_query(query)
            )
            rankings["vector"] = vector_ranking(vector, ((row.id, row.embedding) for row in rows), limit=k)
        return fuse(memories, rankings, limit=limit, weights=self._weights)
