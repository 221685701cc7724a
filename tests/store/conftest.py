"""Store fixtures: every contract test runs against Postgres (one migrated database per session,
truncated before each test) and SQLite (a file in the test's tmp_path)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psycopg
import pytest

from extraction.embeddings import HashingEmbedder
from store.migrate import migrate
from store.model import MemorySettings
from store.protocols import Embedder
from store.rules.recall import ScoreFusion
from store.sqlite.store import SqliteMemoryStore
from tests.store.store_testkit import MakeStore, Store, postgres_store

DIM = 384
CONCEPT_DIM = 8
TABLES = (
    "memories, memory_revisions, memory_audit, processed_events, memory_settings, api_keys, ui_sessions, "
    "conversation_turns, directory"
)


def truncate(url: str) -> None:
    """Empty every store table of a Postgres database."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")


@pytest.fixture(scope="session")
def pg_url(new_database: Callable[[], str]) -> str:
    """One Postgres database migrated for 384-dimension embeddings."""
    url = new_database()
    migrate(url, DIM)
    return url


@pytest.fixture(scope="session")
def pg_concept_url(new_database: Callable[[], str]) -> str:
    """One Postgres database migrated for the 8-dimension concept embedder."""
    url = new_database()
    migrate(url, CONCEPT_DIM)
    return url


@pytest.fixture(params=["postgres", "sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    """Which store implementation a contract test runs against."""
    return str(request.param)


@pytest.fixture
async def make_store(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[MakeStore]:
    """Factory: an empty store of the current backend for an embedder (hashing, 384-d by default)
    and recall fusion settings (`ScoreFusion`, the defaults when None)."""
    opened: list[Store] = []

    async def make(
        embedder: Embedder | None = None,
        settings_defaults: MemorySettings | None = None,
        fusion: ScoreFusion | None = None,
    ) -> Store:
        embedder = embedder or HashingEmbedder(dim=DIM)
        store: Store
        if backend == "postgres":
            fixture = "pg_url" if embedder.dim == DIM else "pg_concept_url"
            url = request.getfixturevalue(fixture)
            truncate(url)
            store = postgres_store(url, embedder, settings_defaults=settings_defaults, fusion=fusion)
        else:
            store = SqliteMemoryStore(
                f"sqlite:///{tmp_path}/store-{len(opened)}.db",
                embedder,
                settings_defaults=settings_defaults,
                fusion=fusion,
            )
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


@pytest.fixture
async def store(make_store: MakeStore) -> Store:
    """An empty store (hashing embedder) of the current backend."""
    return await make_store()
