"""`PostgresMemoryStore`: the MemoryStore on Postgres + pgvector (SQLAlchemy 2 async engine,
psycopg 3): the shared store (`store.core.store.CoreStore`: writes, review, listing, erasure,
settings, … in SQLAlchemy Core) holding a `PgBackend` (`store.postgres.backend`), which owns the
connections, the read replicas (`read_urls`), the pipelined event write and recall in SQL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from store.core.schema import build_schema
from store.core.store import CoreStore
from store.model import MemorySettings, RecallQuery
from store.postgres.backend import PgBackend
from store.postgres.connections import PgConnections, postgres_connect_args, role_sql
from store.postgres.neighbours_sql import EXACT_OWNER_ROWS, OwnerSizes
from store.postgres.recall import PgRecall
from store.postgres.recall_sql import RecallTuning, session_settings_sql
from store.postgres.replicas import ReadReplicas
from store.postgres.schema import POSTGRES
from store.protocols import Embedder
from store.rules.recall import DEFAULT_WEIGHTS, Bm25, ScoreFusion


class PostgresMemoryStore(CoreStore):
    """The store on Postgres with pgvector; migrate the database first (`store.migrate`)."""

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
        database_role: str | None = None,
    ) -> None:
        """`connect_timeout_s`: opening a connection gives up after it (an unreachable host fails
        instead of hanging); `statement_timeout_s`: the sessions' `statement_timeout`. None or 0:
        none. `connections`: what opens and hands out the connections (a test passes a
        `PgConnections` that counts what is sent). `read_urls`: read replicas of the database
        (streaming, hot standby), each with a pool of the same size; one lagging more than
        `read_max_lag_s` seconds is skipped (`store.postgres.backend`). `database_role`: the role
        every session sets (`SET ROLE`), one that owns no table so row-level security applies."""
        session_sql = [*role_sql(database_role), *session_settings_sql(tuning or RecallTuning())]

        def open_connections(url: str) -> PgConnections:
            return connections(
                url,
                session_sql=session_sql,
                pool_size=pool_size,
                max_overflow=max_overflow,
                pool_pre_ping=pool_pre_ping,
                echo=echo,
                connect_args=postgres_connect_args(
                    connect_timeout_s, statement_timeout_s, parallel_query=parallel_query
                ),
            )

        primary = open_connections(database_url)
        schema = build_schema(embedder.dim, POSTGRES)
        self._pg = PgBackend(
            primary,
            schema,
            owner_sizes=OwnerSizes(cap=EXACT_OWNER_ROWS + 1),
            recall=PgRecall(
                primary,
                embedder,
                embedding_dim=schema.embedding_dim,
                weights=weights,
                fusion=fusion or ScoreFusion(),
                bm25=bm25 or Bm25(),
            ),
            replicas=ReadReplicas(read_urls, open_connections, max_lag_s=read_max_lag_s)
            if read_urls
            else None,
        )
        super().__init__(
            engine=primary.engine,
            schema=schema,
            backend=self._pg,
            embedder=embedder,
            settings_defaults=settings_defaults,
        )

    @property
    def connections(self) -> PgConnections:
        """The store's connections (for tests and tools that send their own SQL)."""
        return self._pg.connections

    @property
    def replicas(self) -> ReadReplicas | None:
        """The read replicas (None: every read on the primary)."""
        return self._pg.replicas

    async def explain_recall(self, asked: RecallQuery) -> str:
        """EXPLAIN (ANALYZE, BUFFERS) of the recall statement (for tuning and the benchmark)."""
        return await self._pg.recall.explain(asked)

    async def session_settings(self) -> dict[str, str]:
        """The recall settings a pooled connection actually runs with (see `RecallTuning`)."""
        return await self._pg.recall.session_settings()
