"""Stopping never hangs on a helper task that ignores its cancellation (Python 3.11's
`asyncio.wait_for`, inside nats-py's requests, can swallow a cancel that lands as the reply
arrives): seen as a test hanging for ever in `Worker.close` on a loaded machine."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import time
from pathlib import Path

import pytest

from cli.embedded import EmbeddedNats
from tests.worker.worker_harness import Harness
from worker.app import Worker
from worker.lifecycle import cancel_and_wait

pytestmark = pytest.mark.asyncio


async def _stubborn(entered: asyncio.Event, released: asyncio.Event) -> None:
    """Swallows every cancellation until `released` is set."""
    entered.set()
    while not released.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await released.wait()


async def test_cancel_and_wait_leaves_a_task_that_ignores_cancellation_behind_after_its_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entered, released = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(_stubborn(entered, released))
    await entered.wait()
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="pmem.worker"):
            await cancel_and_wait(task, what="the stubborn task", timeout_s=0.3)
        assert 0.25 <= time.monotonic() - started < 5
        assert any("the stubborn task did not stop" in r.getMessage() for r in caplog.records)
        assert not task.done()
    finally:
        released.set()  # not left running past the test (the session's loop would wait for it)
        await asyncio.wait_for(task, timeout=5)


async def test_cancel_and_wait_ends_a_task_that_swallows_its_first_cancellation_promptly() -> None:
    # nats-py's connect loop: a refused connection landing with the cancel swallows it, then the
    # loop sleeps and retries for ever (seen as a 5 s stop in a SIGINT-during-start-up test)
    swallowed = 0

    async def retrying() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed += 1

    task = asyncio.create_task(retrying())
    await asyncio.sleep(0)
    started = time.monotonic()
    await cancel_and_wait(task, what="a retrying task", timeout_s=10)
    assert task.cancelled() and swallowed == 1
    assert time.monotonic() - started < 1


async def test_cancel_and_wait_returns_when_the_task_ends() -> None:
    task = asyncio.create_task(asyncio.sleep(60))
    started = time.monotonic()
    await cancel_and_wait(task, what="a sleeping task", timeout_s=10)
    assert task.cancelled() and time.monotonic() - started < 1


async def test_worker_close_is_bounded_when_the_consumer_watch_swallows_its_cancellation(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered = asyncio.Event()

    async def stubborn_readiness(self: Worker) -> str | None:
        # the watch's readiness probe, cancelled while it waits, carries on as if nothing happened
        entered.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(60)
        return None

    monkeypatch.setattr(Worker, "readiness", stubborn_readiness)

    async def run_and_stop() -> None:
        async with harness.worker():
            await asyncio.wait_for(entered.wait(), timeout=20)

    # Before the fix the watch went back to sleep and round again, and close() waited for ever,
    # swallowing wait_for's own cancellation too: only a process-level watchdog turns that hang
    # into a failure (the whole test run then exits with status 1 after 120 s).
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        await asyncio.wait_for(run_and_stop(), timeout=30)
    finally:
        faulthandler.cancel_dump_traceback_later()


async def test_worker_close_ends_cleanly_when_nats_is_gone_first(
    harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a Ctrl-C in the demo's terminal reaches its nats-server too, which exits first: the drain then
    # raises ConnectionReconnectingError, and close() must still close the store
    nats = EmbeddedNats(store_dir=tmp_path / "nats").start()
    try:
        async with harness.worker(nats_url=nats.url) as worker:
            nats.stop()
            with caplog.at_level(logging.WARNING, logger="pmem.worker"):
                started = time.monotonic()
                await asyncio.wait_for(worker.close(), timeout=20)
            assert time.monotonic() - started < 10
            assert any("NATS connection lost during shutdown" in r.getMessage() for r in caplog.records)
            assert worker.health is None
    finally:
        nats.stop()
