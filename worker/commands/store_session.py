"""Open the configured store (and its embedder) for one command, and close both after."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from store.factory import open_store
from store.postgres import PostgresMemoryStore
from store.sqlite import SqliteMemoryStore
from worker.settings import Settings

Store = PostgresMemoryStore | SqliteMemoryStore


@asynccontextmanager
async def opened_store(settings: Settings) -> AsyncIterator[Store]:
    """The store at PMEM_DATABASE_URL with the configured embedder and settings defaults."""
    from extraction.embeddings import build_embedder, close_embedder

    embedder = build_embedder(settings)
    try:
        store = await open_store(
            settings.database_url, embedder, settings_defaults=settings.memory_defaults()
        )
        try:
            yield store
        finally:
            await store.close()
    finally:
        await close_embedder(embedder)
