"""`SqliteMemoryStore`: the same MemoryStore contract on SQLite (aiosqlite), for a single process
without Postgres: the shared store (`store.core.store.CoreStore`) holding a `SqliteBackend`
(`store.sqlite.backend`: the engine, the tables created on first use, recall with FTS5 and numpy).
"""

from __future__ import annotations

from collections.abc import Mapping

from store.core.store import CoreStore
from store.model import MemorySettings
from store.protocols import Embedder
from store.rules.recall import DEFAULT_WEIGHTS, ScoreFusion
from store.sqlite.backend import SqliteBackend


class SqliteMemoryStore(CoreStore):
    """MemoryStore on SQLite; `database_url` is `sqlite:///path.db` (or `:memory:`)."""

    def __init__(
        self,
        database_url: str,
        embedder: Embedder,
        *,
        weights: Mapping[str, float] = DEFAULT_WEIGHTS,
        fusion: ScoreFusion | None = None,
        busy_timeout_ms: int = 30_000,
        index_cache_owners: int = 64,
        settings_defaults: MemorySettings | None = None,
    ) -> None:
        """`busy_timeout_ms`: how long a writer waits for another process's write lock;
        `index_cache_owners`: how many owners' (and contexts') rows are held for ranking."""
        backend = SqliteBackend(
            database_url,
            embedder,
            weights=weights,
            fusion=fusion,
            busy_timeout_ms=busy_timeout_ms,
            index_cache_owners=index_cache_owners,
        )
        super().__init__(
            engine=backend.engine,
            schema=backend.schema,
            backend=backend,
            embedder=embedder,
            settings_defaults=settings_defaults,
        )
