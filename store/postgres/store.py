"""`PostgresMemoryStore`: the MemoryStore on Postgres + pgvector (SQLAlchemy 2 async engine,
psycopg 3), composed of parts that each own one job:

- `PgConnections` (`store.postgres.connections`): the engines and the reused driver connections;
- `PgEventWriter` (`store.postgres.event_write`): the worker's pipelined write of an event;
- `PgRecall` (`store.postgres.recall`): memory recall, in raw SQL (`store.postgres.recall_sql`);
- the shared core (`store.core.store.CoreStore`): writes, review, listing, erasure, settings, … in
  SQLAlchemy Core, on the same engine, with `PgBackend` (`store.postgres.backend`) where Postgres
  differs from SQLite.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import func
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from store.core.recall import DEFAULT_WEIGHTS, Bm25, ScoreFusion
from store.core.schema import build_schema
from store.core.store import CoreStore
from store.core.writes import EventBatch
from store.errors import translating_errors
from store.migrate import (
    EmbeddingDimensionMismatch,
    SchemaError,
    current_revision,
    existing_embedding_dim,
    head_revision,
)
from store.model import EventWrite, MemorySettings, RecallHit, RecallQuery
from store.postgres.backend import PgBackend
from store.postgres.connections import PgConnections, postgres_connect_args
from store.postgres.event_write import PgEventWriter
from store.postgres.neighbours_sql import EXACT_OWNER_ROWS, OwnerSizes
from store.postgres.recall import PgRecall
from store.postgres.recall_sql import RecallTuning, session_settings_sql
from store.postgres.schema import POSTGRES
from store.protocols import Embedder


class PostgresMemoryStore(CoreStore):
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
        connections: type[PgConnections] = PgConnections,
    ) -> None:
        """`connect_timeout_s`: opening a connection gives up after it (an unreachable host fails
        instead of hanging); `statement_timeout_s`: the sessions' `statement_timeout`. None or 0:
        none. `connections`: what opens and hands out the connections (a test passes a
        `PgConnections` that counts what is sent)."""
        self._connections = connections(
            database_url,
            session_sql=session_settings_sql(tuning or RecallTuning()),
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_pre_ping=pool_pre_ping,
            echo=echo,
            connect_args=postgres_connect_args(
                connect_timeout_s, statement_timeout_s, parallel_query=parallel_query
            ),
        )
        schema = build_schema(embedder.dim, POSTGRES)
        # the owners' sizes choose the near-duplicate read's shape, for the writer and the core alike
        owner_sizes = OwnerSizes(cap=EXACT_OWNER_ROWS + 1)
        super().__init__(
            engine=self._connections.engine,
            schema=schema,
            backend=PgBackend(self._connections, schema, owner_sizes),
            embedder=embedder,
            settings_defaults=settings_defaults,
        )
        self._event_writer = PgEventWriter(self._connections, schema, owner_sizes)
        self._recall = PgRecall(
            self._connections,
            embedder,
            embedding_dim=self._schema.embedding_dim,
            weights=weights,
            fusion=fusion or ScoreFusion(),
            bm25=bm25 or Bm25(),
        )

    @property
    def connections(self) -> PgConnections:
        """The store's connections (for tests and tools that send their own SQL)."""
        return self._connections

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

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        async with self._connections.reading() as conn:
            yield conn

    async def _write_event_once(self, batch: EventBatch) -> EventWrite:
        """The pipelined write (`PgEventWriter`) for the events it takes, the shared path for the
        rest."""
        dedup = batch.dedup
        if dedup is not None and self._event_writer.takes(batch.memories, dedup):
            return await self._event_writer.write(batch, dedup)
        return await super()._write_event_once(batch)

    async def _recall_memories(self, asked: RecallQuery) -> builtins.list[RecallHit]:
        """Ranked in one SQL statement (`PgRecall.recall`)."""
        return await self._recall.recall(asked)

    async def explain_recall(self, asked: RecallQuery) -> str:
        """EXPLAIN (ANALYZE, BUFFERS) of the recall statement (for tuning and the benchmark)."""
        return await self._recall.explain(asked)

    async def session_settings(self) -> dict[str, str]:
        """The recall settings a pooled connection actually runs with (see `RecallTuning`)."""
        return await self._recall.session_settings()

    async def close(self) -> None:
        """Close the kept connections, then the pool."""
        await self._connections.close()
