"""The worker process's life: signals in every phase, a start-up bounded by PMEM_STARTUP_TIMEOUT_S,
and stopping helper tasks without hanging on one that swallows its cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from worker.pipeline import one_line
from worker.settings import Settings
from worker.streams import ConfigurationError

if TYPE_CHECKING:
    from worker.app import Worker

log = logging.getLogger("pmem.worker")

T = TypeVar("T")


class StartupError(RuntimeError):
    """The worker could not start (a dependency unreachable, or start-up past its deadline); the
    message is one line naming what it was doing."""


@contextlib.contextmanager
def signals_set(event: asyncio.Event) -> Iterator[None]:
    """SIGTERM/SIGINT set `event` while the block runs (in every phase: start-up included). A
    second signal during the graceful shutdown ends the process at once (nothing unacked is lost:
    JetStream redelivers it)."""
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if event.is_set():
            log.warning("second signal: exiting without waiting for in-flight events")
            logging.shutdown()
            os._exit(1)
        event.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        yield
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def safe_url(url: str) -> str:
    """`url` without user info (a password in a NATS or Postgres URL never reaches a log line)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    host = authority.rsplit("@", 1)[-1]
    return f"{scheme}://{host}{slash}{tail.split('?', 1)[0]}"


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
    phase = f"opening the database {safe_url(settings.database_url)}"
    worker: Worker | None = None
    log.info("start-up: %s", phase)

    async def steps() -> Worker:
        nonlocal phase, worker
        if migrate_first:
            from store.migrate import migrate_async

            phase = f"migrating the database {safe_url(settings.database_url)}"
            from extraction.embeddings import embedding_identity

            report = await migrate_async(
                settings.database_url, settings.embedding_dim, embedding=embedding_identity(settings)
            )
            log.info("schema ready: %s", report)
            phase = f"opening the database {safe_url(settings.database_url)}"
        if build is None:
            from worker.app import build_worker as build_default

            worker = await build_default(settings)
        else:
            worker = await build(settings)
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
        raise StartupError(f"start-up failed while {doing()}: {one_line(exc)}") from exc
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


# How long stopping waits for a cancelled helper task (the consumer watch, an event's in-progress
# acks, an interrupted start-up) before it leaves it behind
TASK_STOP_TIMEOUT_S = 5.0
# A swallowed cancel (nats-py's connect loop retries after a refused connection that lands with
# it) is repeated this often while `cancel_and_wait` waits
RECANCEL_EVERY_S = 0.1


async def unless_stopped(work: Awaitable[T], stop: asyncio.Event, *, what: str) -> T | None:
    """`work`'s result, or None when `stop` is set first: then `work` is cancelled and waited for
    (`cancel_and_wait`, which outlasts a swallowed cancellation)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        return task.result()
    await cancel_and_wait(task, what=what)
    return None


async def cancel_and_wait(
    task: asyncio.Task[Any], *, what: str, timeout_s: float = TASK_STOP_TIMEOUT_S
) -> None:
    """Cancel `task` and wait at most `timeout_s` for it to end. A task can swallow its
    cancellation (Python 3.11's `asyncio.wait_for`, used inside nats-py's requests and its connect,
    returns the result when the awaited call completes at the moment it is cancelled), so the
    cancel is repeated every `RECANCEL_EVERY_S`; a task still running at the deadline is left
    behind with a warning: stopping must not hang on it."""
    deadline = time.monotonic() + timeout_s
    done: set[asyncio.Task[Any]] = set()
    while not done and (left := deadline - time.monotonic()) > 0:
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=min(RECANCEL_EVERY_S, left))
    if not done:
        log.warning("%s did not stop within %.0fs of being cancelled; leaving it behind", what, timeout_s)
    elif not task.cancelled() and task.exception() is not None:
        log.debug("%s ended with %r", what, task.exception())
