"""The fresh store an evaluation run writes into: SQLite in a new file, or Postgres (given, or an
embedded one started for the run), opened like every other store (`store.factory.open_store`)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from evaluation.options import EvalOptions
from store.factory import StoreOptions, open_store
from store.migrate import migrate_async
from store.protocols import Embedder

if TYPE_CHECKING:
    from store.factory import Store
    from store.rules.recall import ScoreFusion


async def fresh_store(
    embedder: Embedder,
    stack: AsyncExitStack,
    *,
    kind: str,
    data_dir: Path | None = None,
    database_url: str | None = None,
    fusion: ScoreFusion | None = None,
) -> Store:
    """A fresh, migrated store; closed (and a temporary database removed) by `stack`. `kind`
    "sqlite": a new file in `data_dir` (a temporary directory when None); "postgres": the database
    at `database_url`, or a new one in an embedded Postgres in `data_dir`."""
    if kind == "sqlite":
        directory = data_dir
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pmem-eval-")))
        directory.mkdir(parents=True, exist_ok=True)
        database_url = f"sqlite:///{directory / f'pmem_eval_{uuid.uuid4().hex[:8]}.db'}"
    elif database_url is None:
        database_url = stack.enter_context(embedded_database(data_dir))
    await migrate_async(database_url, embedder.dim)
    store = await open_store(database_url, embedder, StoreOptions(fusion=fusion))
    stack.push_async_callback(store.close)
    return store


async def evaluation_store(options: EvalOptions, embedder: Embedder, stack: AsyncExitStack) -> Store:
    """The fresh store of an evaluation run (--store, --data-dir, --database-url, its fusion)."""
    return await fresh_store(
        embedder,
        stack,
        kind=options.store,
        data_dir=options.data_dir,
        database_url=options.database_url,
        fusion=options.fusion,
    )


@contextmanager
def embedded_database(data_dir: Path | None) -> Iterator[str]:
    """Start an EmbeddedPostgres in `data_dir` (a temporary directory when None) and yield a fresh
    database's URL; stop it (and remove the temporary directory) afterwards."""
    from cli.embedded import EmbeddedPostgres

    with ExitStack() as stack:
        base = data_dir
        if base is None:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pmem-eval-")))
        server = EmbeddedPostgres(data_dir=base / "pg").start()
        stack.callback(server.stop)
        yield server.create_database(f"pmem_eval_{uuid.uuid4().hex[:8]}")
