"""Pick the store implementation from the database URL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from store.model import MemorySettings
from store.postgres.store import PostgresMemoryStore
from store.protocols import Embedder
from store.rules.urls import backend_of
from store.services.query_embeddings import SharedQueryEmbeddings
from store.sqlite.store import SqliteMemoryStore

StoreT = TypeVar("StoreT", bound=PostgresMemoryStore | SqliteMemoryStore)


async def open_store(
    database_url: str,
    embedder: Embedder,
    *,
    check_schema: bool = True,
    settings_defaults: MemorySettings | None = None,
    connect_timeout_s: float | None = 10.0,
    statement_timeout_s: float | None = 60.0,
    read_urls: Sequence[str] = (),
    read_max_lag_s: float = 5.0,
    pool_size: int = 10,
    max_overflow: int = 10,
) -> PostgresMemoryStore | SqliteMemoryStore:
    """A Postgres store for postgresql:// URLs, a SQLite store for sqlite:/// URLs.

    With `check_schema` (default) the database is reached once: a missing or outdated schema, or an
    embedding column of another dimension than the embedder's, raises `store.migrate.SchemaError`.
    The timeouts apply to Postgres (`PostgresMemoryStore`; None or 0: none), and so do the read
    replicas (`read_urls`, `read_max_lag_s`): a SQLite store with them raises ValueError, and the
    pool's size (`pool_size` kept open, up to `max_overflow` more under load). Recall's
    query vectors are embedded once per text (`SharedQueryEmbeddings`)."""
    store: PostgresMemoryStore | SqliteMemoryStore
    embedder = SharedQueryEmbeddings(embedder)
    for url in read_urls:
        if backend_of(url) != "postgresql":
            raise ValueError("read replicas (PMEM_DATABASE_READ_URL) must be postgresql:// URLs")
    if backend_of(database_url) == "sqlite":
        if read_urls:
            raise ValueError(
                "read replicas (PMEM_DATABASE_READ_URL) need the Postgres store; SQLite has none"
            )
        store = SqliteMemoryStore(database_url, embedder, settings_defaults=settings_defaults)
    else:
        store = PostgresMemoryStore(
            database_url,
            embedder,
            settings_defaults=settings_defaults,
            connect_timeout_s=connect_timeout_s,
            statement_timeout_s=statement_timeout_s,
            read_urls=read_urls,
            read_max_lag_s=read_max_lag_s,
            pool_size=pool_size,
            max_overflow=max_overflow,
        )
    return await schema_checked(store) if check_schema else store


async def schema_checked(store: StoreT) -> StoreT:
    """`store` once `check_schema` passed; closed when it raises."""
    try:
        await store.check_schema()
    except BaseException:
        await store.close()
        raise
    return store
