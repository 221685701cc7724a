"""Open the configured store (and its embedder) for one command, and close both after."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from config import Settings, load_settings
from store.factory import open_store

if TYPE_CHECKING:
    from store.factory import Store


def command_settings(database_url: str | None) -> Settings:
    """The settings from the environment, the database at `database_url` when a command's
    `--database-url` gives one."""
    overrides: dict[str, object] = {"database_url": database_url} if database_url else {}
    return load_settings(**overrides)


@asynccontextmanager
async def opened_store(
    settings: Settings,
    *,
    read_replicas: bool = False,
    steady_pool: bool = False,
    check_schema: bool = True,
) -> AsyncIterator[Store]:
    """The store at PMEM_DATABASE_URL with the configured embedder, settings defaults and database
    timeouts (PMEM_DB_CONNECT_TIMEOUT_S, PMEM_DB_STATEMENT_TIMEOUT_S); with `read_replicas`, the
    read replicas of PMEM_DATABASE_READ_URL too (`pmem serve` only: the other commands read what
    they write). Its pool: 10 connections and up to 10 more under load; with `steady_pool`, the
    same 20 kept open (`pmem serve`: opening and closing overflow connections under a burst costs
    Postgres a backend start and cold caches each, which turned an overload into a collapse).
    Without `check_schema`, the embedding model is not compared with the stored one (`pmem reembed`)."""
    from extraction.embeddings import build_embedder, close_embedder

    embedder = build_embedder(settings)
    options = replace(
        settings.store_options(),
        read_urls=settings.database_read_urls if read_replicas else (),
        read_max_lag_s=settings.read_max_lag_s,
        pool_size=20 if steady_pool else 10,
        max_overflow=0 if steady_pool else 10,
    )
    try:
        store = await open_store(settings.database_url, embedder, options, check_schema=check_schema)
        try:
            yield store
        finally:
            await store.close()
    finally:
        await close_embedder(embedder)
