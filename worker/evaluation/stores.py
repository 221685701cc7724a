"""The fresh store an evaluation run writes into: SQLite in a file, or Postgres (given, or an
embedded one started for the run)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from pathlib import Path
from typing import Any

from store.migrate import migrate_async
from worker.evaluation.cache import CachingEmbedder
from worker.evaluation.options import EvalOptions


async def open_store(options: EvalOptions, embedder: CachingEmbedder, stack: AsyncExitStack) -> Any:
    """A fresh store of the chosen kind; closed (and a temporary database removed) by `stack`."""
    if options.store == "sqlite":
        from store.sqlite.store import SqliteMemoryStore

        directory = options.data_dir
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pmem-eval-")))
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"pmem_eval_{uuid.uuid4().hex[:8]}.db"
        sqlite_store = SqliteMemoryStore(f"sqlite:///{path}", embedder, fusion=options.fusion)
        stack.push_async_callback(sqlite_store.close)
        await sqlite_store.check_schema()
        return sqlite_store
    from store.postgres.store import PostgresMemoryStore

    database_url = options.database_url
    if database_url is None:
        database_url = stack.enter_context(embedded_database(options.data_dir))
    await migrate_async(database_url, embedder.dim)
    store = PostgresMemoryStore(database_url, embedder, fusion=options.fusion)
    stack.push_async_callback(store.close)
    return store


@contextmanager
def embedded_database(data_dir: Path | None) -> Iterator[str]:
    """Start an EmbeddedPostgres in `data_dir` (a temporary directory when None) and yield a fresh
    database's URL; stop it (and remove the temporary directory) afterwards."""
    from worker.embedded import EmbeddedPostgres

    with ExitStack() as stack:
        base = data_dir
        if base is None:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pmem-eval-")))
        server = EmbeddedPostgres(data_dir=base / "pg").start()
        stack.callback(server.stop)
        yield server.create_database(f"pmem_eval_{uuid.uuid4().hex[:8]}")
