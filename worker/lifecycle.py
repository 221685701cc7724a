"""The worker process's life: signals in every phase and stopping helper tasks without hanging on
one that swallows its cancellation (the bounded start-up is `worker.startup`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

log = logging.getLogger("pmem.worker")

T = TypeVar("T")


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
