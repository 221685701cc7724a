"""PendingPubAcks, the background check of publishes that did not wait for their PubAck: every
failure reaches `on_failure` once, a PubAck that never comes fails at its deadline, and `wait`
collects the outstanding ones."""

from __future__ import annotations

import asyncio

import pytest

from worker.pubacks import PendingPubAcks

pytestmark = pytest.mark.asyncio


def tracker(timeout_s: float = 5.0) -> tuple[PendingPubAcks, list[BaseException]]:
    failures: list[BaseException] = []
    return PendingPubAcks(timeout_s=timeout_s, on_failure=failures.append), failures


async def test_a_puback_that_arrives_is_no_failure_and_leaves_nothing_pending() -> None:
    pubacks, failures = tracker()
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    pubacks.track(future)
    assert len(pubacks) == 1
    future.set_result("ack")
    assert await pubacks.wait(1.0) == 0
    assert failures == [] and len(pubacks) == 0


async def test_a_rejected_publish_reaches_on_failure_once() -> None:
    pubacks, failures = tracker()
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    pubacks.track(future)
    future.set_exception(RuntimeError("no stream captures the subject"))
    await pubacks.wait(1.0)
    assert [str(f) for f in failures] == ["no stream captures the subject"]


async def test_a_puback_that_never_comes_fails_at_its_deadline() -> None:
    pubacks, failures = tracker(timeout_s=0.05)
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    pubacks.track(future)
    assert await pubacks.wait(2.0) == 0
    assert future.done() and len(failures) == 1 and isinstance(failures[0], TimeoutError)


async def test_wait_returns_the_outstanding_count_when_its_own_bound_passes_first() -> None:
    pubacks, failures = tracker(timeout_s=10.0)
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[str]] = [loop.create_future() for _ in range(3)]
    for future in futures:
        pubacks.track(future)
    futures[0].set_result("ack")
    assert await pubacks.wait(0.05) == 2
    for future in futures[1:]:
        future.cancel()
    assert await pubacks.wait(1.0) == 0
    assert len(failures) == 2  # a cancelled publish is a failure too, not a silent loss


async def test_an_already_completed_future_is_checked_at_once() -> None:
    pubacks, failures = tracker()
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    future.set_exception(ConnectionError("gone"))
    pubacks.track(future)
    assert len(pubacks) == 0 and len(failures) == 1
