"""The worker's start-up, bounded by PMEM_STARTUP_TIMEOUT_S: open the store, migrate when asked,
build and start the worker; a signal during start-up ends it cleanly."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from config import Settings
from store.rules.urls import redacted_url
from worker.app import Worker, build_worker
from worker.lifecycle import cancel_and_wait
from worker.planning import exception_line
from worker.streams import ConfigurationError

log = logging.getLogger("pmem.worker")


class StartupError(RuntimeError):
    """The worker could not start (a dependency unreachable, or start-up past its deadline); the
    message is one line naming what it was doing."""


async def start_bounded(
    settings: Settings,
    stop: asyncio.Event,
    *,
    migrate_first: bool = False,
    build: Callable[[Settings], Awaitable[Worker]] | None = None,
) -> Worker | None:
    """Open the store, build and start the worker within PMEM_STARTUP_TIMEOUT_S. Returns None when
    `stop` was set first (a signal during start-up); raises `StartupError` (one line: the step and
    why) when a step fails or the deadline passes. Whatever was opened is closed on the way out."""
    phase = f"opening the database {redacted_url(settings.database_url)}"
    worker: Worker | None = None
    log.info("start-up: %s", phase)

    async def steps() -> Worker:
        nonlocal phase, worker
        if migrate_first:
            from store.migrate import migrate_async

            phase = f"migrating the database {redacted_url(settings.database_url)}"
            from extraction.embeddings import embedding_identity

            report = await migrate_async(
                settings.database_url, settings.embedding_dim, embedding=embedding_identity(settings)
            )
            log.info("schema ready: %s", report)
            phase = f"opening the database {redacted_url(settings.database_url)}"
        worker = await (build or build_worker)(settings)
        await worker.start()
        return worker

    def doing() -> str:
        return worker.phase if worker is not None else phase

    task = asyncio.create_task(steps())
    stopped = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait(
            {task, stopped}, timeout=settings.startup_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stopped.cancel()
    if task in done:
        exc = task.exception()
        if exc is None:
            return task.result()
        if worker is not None:
            await worker.close()
        from store.migrate import SchemaError

        if isinstance(exc, ConfigurationError | StartupError | SchemaError):
            raise exc
        raise StartupError(f"start-up failed while {doing()}: {exception_line(exc)}") from exc
    what = doing()
    await cancel_and_wait(task, what=f"start-up ({what})")
    if worker is not None:
        await worker.close()
    if stop.is_set():
        log.info("signal received during start-up (%s): exiting", what)
        return None
    raise StartupError(
        f"start-up did not finish within PMEM_STARTUP_TIMEOUT_S={settings.startup_timeout_s:g}s while {what}"
    )
