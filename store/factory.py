"""The one way to open a store: `open_store(url, embedder, StoreOptions(...))`. The database URL's
scheme picks the backend here, and nowhere else."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from store.model import MemorySettings
from store.protocols import Embedder
from store.rules.urls import backend_of
from store.services.query_embeddings import SharedQueryEmbeddings

if TYPE_CHECKING:
    from store.postgres.recall_sql import RecallTuning
    from store.postgres.store import PostgresMemoryStore
    from store.rules.recall import ScoreFusion
    from store.sqlite.store import SqliteMemoryStore

    Store = PostgresMemoryStore | SqliteMemoryStore


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreOptions:
    """How to open a store. Both backends take `settings_defaults` and `fusion`; the rest is the
    Postgres connection pool's (a SQLite store has one connection to one file, and no replicas)."""

    # the memory settings a team or persona without its own row gets (PMEM_MIN_CONFIDENCE, …)
    settings_defaults: MemorySettings | None = None
    # how recall's branches are fused (None: the store's default)
    fusion: ScoreFusion | None = None
    # opening a connection gives up after this long (an unreachable host fails, not hangs); None or 0: none
    connect_timeout_s: float | None = 10.0
    # the sessions' statement_timeout; None or 0: none
    statement_timeout_s: float | None = 60.0
    # connections kept open, and how many more may open under load
    pool_size: int = 10
    max_overflow: int = 10
    # test a pooled connection before each use (a restarted database then costs no failed call)
    pool_pre_ping: bool = True
    # let Postgres run recall's scans with parallel workers
    parallel_query: bool = True
    # the vector branch's knobs and the sessions' plan cache mode (None: the store's defaults)
    tuning: RecallTuning | None = None
    # read replicas (postgresql:// URLs) and the replay lag past which one is skipped
    read_urls: Sequence[str] = ()
    read_max_lag_s: float = 5.0
    # the role every session takes (`SET ROLE`; the migration's `pmem_app`): one that owns no
    # table, so row-level security applies. None: the URL's user as it is
    database_role: str | None = None


async def open_store(
    database_url: str,
    embedder: Embedder,
    options: StoreOptions | None = None,
    *,
    check_schema: bool = True,
) -> Store:
    """A Postgres store for postgresql:// URLs, a SQLite store for sqlite:/// URLs, opened with
    `options`. Read replicas with a SQLite URL, or a replica that is not postgresql://, raise
    ValueError.

    With `check_schema` (default) the database is reached once: a missing or outdated schema, or an
    embedding column of another dimension than the embedder's, raises `store.migrate.SchemaError`;
    an unreachable one fails within `connect_timeout_s`. Recall's query vectors are embedded once
    per text (`SharedQueryEmbeddings`)."""
    options = options or StoreOptions()
    store: Store
    embedder = SharedQueryEmbeddings(embedder)
    for url in options.read_urls:
        if backend_of(url) != "postgresql":
            raise ValueError("read replicas (PMEM_DATABASE_READ_URL) must be postgresql:// URLs")
    if backend_of(database_url) == "sqlite":
        if options.read_urls:
            raise ValueError(
                "read replicas (PMEM_DATABASE_READ_URL) need the Postgres store; SQLite has none"
            )
        from store.sqlite.store import SqliteMemoryStore

        store = SqliteMemoryStore(
            database_url, embedder, fusion=options.fusion, settings_defaults=options.settings_defaults
        )
    else:
        from store.postgres.store import PostgresMemoryStore

        store = PostgresMemoryStore(
            database_url,
            embedder,
            pool_size=options.pool_size,
            max_overflow=options.max_overflow,
            pool_pre_ping=options.pool_pre_ping,
            tuning=options.tuning,
            fusion=options.fusion,
            settings_defaults=options.settings_defaults,
            connect_timeout_s=options.connect_timeout_s,
            statement_timeout_s=options.statement_timeout_s,
            parallel_query=options.parallel_query,
            read_urls=options.read_urls,
            read_max_lag_s=options.read_max_lag_s,
            database_role=options.database_role,
        )
    if check_schema:
        try:
            await store.check_schema()
        except BaseException:
            await store.close()
            raise
    return store
