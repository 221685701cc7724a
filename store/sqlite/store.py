"""`SqliteMemoryStore`: the same MemoryStore contract on SQLite (aiosqlite), for a single process
without Postgres: the shared store (`store.core.store.CoreStore`) holding a `SqliteBackend`
(`store.sqlite.backend`: the engine, the tables created on first use, recall with FTS5 and numpy).
"""

from __future__ import annotations

from typing import Unpack

from store.core.store import CoreStore
from store.model import MemorySettings
from store.protocols import Embedder
from store.sqlite.backend import SqliteBackend, SqliteOptions


class SqliteMemoryStore(CoreStore):
    """The store on SQLite; `database_url` is `sqlite:///path.db` (or `:memory:`)."""

    def __init__(
        self,
        database_url: str,
        embedder: Embedder,
        *,
        settings_defaults: MemorySettings | None = None,
        **options: Unpack[SqliteOptions],
    ) -> None:
        """`options`: the backend's (`SqliteBackend`: weights, fusion, busy_timeout_ms,
        index_cache_owners)."""
        backend = SqliteBackend(database_url, embedder, **options)
        super().__init__(
            engine=backend.engine,
            schema=backend.schema,
            backend=backend,
            embedder=embedder,
            settings_defaults=settings_defaults,
        )
