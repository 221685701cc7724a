"""`PostgresMemoryStore`: the MemoryStore on Postgres + pgvector (SQLAlchemy 2 async engine,
psycopg 3), composed of parts that each own one job:

- `PgConnections` (`store.postgres.connections`): the engines and the reused driver connections;
- `PgEventWriter` (`store.postgres.event_write`): the worker's pipelined write of an event;
- `PgRecall` (`store.postgres.recall`): memory recall, in raw SQL (`store.postgres.recall_sql`);
- the shared core (`store.core.store.CoreStore`): writes, review, listing, erasure, settings, … in
  SQLAlchemy Core, on the same engine, with `PgBackend` (`store.postgres.backend`) where Postgres
  differs from SQLite;
- `ReadReplicas` (`store.postgres.replicas`), with `read_urls`: the reads a replica may serve.

Reads on replicas: recall (memories and turns), listing a person's memories and conversations,
the export and the review queue (`REPLICA_READS`) run on a healthy replica, unless the caller's
`store.read_scope.ReadScope` asks for the primary (it needs its own write) or no replica is fit
(then the primary; `ReadReplicas` counts why). A read that fails on a replica for want of a
connection (or a recovery conflict) runs again on the primary. Everything else, every write and
the schema and embedding-model checks, runs on the primary.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy import func
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from store.core.schema import build_schema
from store.core.store import CoreStore
from store.core.writes import EventBatch
from store.errors import StoreConflict, StoreUnavailable, translating_errors
from store.migrate import (
    EmbeddingDimensionMismatch,
    SchemaError,
    current_revision,
    existing_embedding_dim,
    head_revision,
)
from store.model import (
    ChannelConversation,
    Conversation,
    ConversationQuery,
    EventWrite,
    Memory,
    MemorySettings,
    Page,
    RecallHit,
    RecallQuery,
    Retriever,
    ReviewItem,
    ReviewQuery,
    Turn,
    TurnHit,
    UserExport,
    UserMemoryQuery,
)
from store.postgres.backend import PgBackend
from store.postgres.connections import PgConnections, postgres_connect_args, reads_on, reads_routed
from store.postgres.event_write import PgEventWriter
from store.postgres.neighbours_sql import EXACT_OWNER_ROWS, OwnerSizes
from store.postgres.recall import PgRecall
from store.postgres.recall_sql import RecallTuning, session_settings_sql
from store.postgres.replicas import ReadReplicas
from store.postgres.schema import POSTGRES
from store.protocols import Embedder
from store.read_scope import note_write, reads_need_primary
from store.rules.recall import DEFAULT_WEIGHTS, Bm25, ScoreFusion

T = TypeVar("T")

# the store's methods a read replica may serve (each overridden below to route its reads)
REPLICA_READS = (
    "recall",
    "recall_turns",
    "list_for_user",
    "export_user",
    "review_queue",
    "pending_counts",
    "list_conversations",
    "conversation",
    "list_channel_conversations",
)


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
        read_urls: Sequence[str] = (),
        read_max_lag_s: float = 5.0,
    ) -> None:
        """`connect_timeout_s`: opening a connection gives up after it (an unreachable host fails
        instead of hanging); `statement_timeout_s`: the sessions' `statement_timeout`. None or 0:
        none. `connections`: what opens and hands out the connections (a test passes a
        `PgConnections` that counts what is sent). `read_urls`: read replicas of the database
        (streaming, hot standby), each with a pool of the same size; one lagging more than
        `read_max_lag_s` seconds is skipped (module docstring)."""

        def open_connections(url: str) -> PgConnections:
            return connections(
                url,
                session_sql=session_settings_sql(tuning or RecallTuning()),
                pool_size=pool_size,
                max_overflow=max_overflow,
                pool_pre_ping=pool_pre_ping,
                echo=echo,
                connect_args=postgres_connect_args(
                    connect_timeout_s, statement_timeout_s, parallel_query=parallel_query
                ),
            )

        self._connections = open_connections(database_url)
        self._replicas = (
            ReadReplicas(read_urls, open_connections, max_lag_s=read_max_lag_s) if read_urls else None
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

    @property
    def replicas(self) -> ReadReplicas | None:
        """The read replicas (None: every read on the primary)."""
        return self._replicas

    async def _replica_read(self, read: Callable[[], Awaitable[T]]) -> T:
        """`read()` on a replica when one is fit and the caller's scope allows it, else on the
        primary; once more on the primary when the replica fails it (module docstring)."""
        replicas = self._replicas
        if replicas is None or reads_routed() or reads_need_primary():
            return await read()
        replica = await replicas.pick()
        if replica is None:
            return await read()
        try:
            with reads_on(replica.connections):
                return await read()
        except (StoreUnavailable, StoreConflict) as exc:
            replicas.failed(replica, exc, down=isinstance(exc, StoreUnavailable))
        return await read()

    # -- the reads a replica may serve (REPLICA_READS) ------------------------------------------

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
        """`CoreStore.recall`, on a replica when one is fit."""
        parent = super().recall
        return await self._replica_read(
            lambda: parent(
                user_id,
                persona_id,
                query,
                limit,
                retriever=retriever,
                query_embedding=query_embedding,
                team_id=team_id,
            )
        )

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
        """`CoreStore.recall_turns`, on a replica when one is fit."""
        parent = super().recall_turns
        return await self._replica_read(
            lambda: parent(
                user_id, persona_id, query, limit, team_id=team_id, query_embedding=query_embedding
            )
        )

    async def list_for_user(self, query: UserMemoryQuery) -> Page[Memory]:
        """`CoreStore.list_for_user`, on a replica when one is fit."""
        parent = super().list_for_user
        return await self._replica_read(lambda: parent(query))

    async def export_user(self, user_id: uuid.UUID) -> UserExport:
        """`CoreStore.export_user`, on a replica when one is fit."""
        parent = super().export_user
        return await self._replica_read(lambda: parent(user_id))

    async def review_queue(self, query: ReviewQuery) -> Page[ReviewItem]:
        """`CoreStore.review_queue`, on a replica when one is fit."""
        parent = super().review_queue
        return await self._replica_read(lambda: parent(query))

    async def pending_counts(self, teams: frozenset[uuid.UUID] | None = None) -> dict[str, int]:
        """`CoreStore.pending_counts`, on a replica when one is fit."""
        parent = super().pending_counts
        return await self._replica_read(lambda: parent(teams))

    async def list_conversations(self, query: ConversationQuery) -> Page[Conversation]:
        """`CoreStore.list_conversations`, on a replica when one is fit."""
        parent = super().list_conversations
        return await self._replica_read(lambda: parent(query))

    async def conversation(self, user_id: uuid.UUID, event_id: uuid.UUID) -> builtins.list[Turn]:
        """`CoreStore.conversation`, on a replica when one is fit."""
        parent = super().conversation
        return await self._replica_read(lambda: parent(user_id, event_id))

    async def list_channel_conversations(self, query: ConversationQuery) -> Page[ChannelConversation]:
        """`CoreStore.list_channel_conversations`, on a replica when one is fit."""
        parent = super().list_channel_conversations
        return await self._replica_read(lambda: parent(query))

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

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[AsyncConnection]:
        async with super()._transaction() as conn:
            yield conn
        note_write()  # committed: the caller's next reads need the primary (`store.read_scope`)

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
        """Close the kept connections, then the pool (the replicas' too)."""
        if self._replicas is not None:
            await self._replicas.close()
        await self._connections.close()
