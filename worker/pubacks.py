"""PubAcks checked in the background: a publish that must not hold its event's handler slot.

`memory.extracted` is published after the commit and before the ack. Waiting for its PubAck held
the handler slot 13–19 ms per event (a round trip through JetStream's storage) for nothing the
event needs: a publish that fails is logged, counted and acked anyway, and only a redelivery
publishes it again. So the worker sends the publish, acks at once (the ack follows the publish on
the same connection), and this tracker checks each PubAck when it arrives, or counts it as failed
once its deadline passes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any


class PendingPubAcks:
    """PubAck futures of publishes that did not wait for them.

    Each future is checked when it completes; one still open after `timeout_s` is failed with a
    TimeoutError. `on_failure` gets every failure (a rejected publish, a timeout, a lost
    connection). `wait` lets shutdown collect the outstanding ones before the connection drains.
    """

    def __init__(self, *, timeout_s: float, on_failure: Callable[[BaseException], None]) -> None:
        self.timeout_s = timeout_s
        self._on_failure = on_failure
        self._pending: set[asyncio.Future[Any]] = set()
        self._settled = asyncio.Event()
        self._settled.set()

    def __len__(self) -> int:
        return len(self._pending)

    def track(self, future: asyncio.Future[Any]) -> None:
        """Check `future` when it completes; fail it after `timeout_s` if it has not."""
        if future.done():
            self._check(future)
            return
        self._pending.add(future)
        self._settled.clear()
        timer = asyncio.get_running_loop().call_later(self.timeout_s, self._expire, future)

        def done(completed: asyncio.Future[Any]) -> None:
            timer.cancel()
            self._pending.discard(completed)
            if not self._pending:
                self._settled.set()
            self._check(completed)

        future.add_done_callback(done)

    def _expire(self, future: asyncio.Future[Any]) -> None:
        if not future.done():
            future.set_exception(TimeoutError(f"no PubAck within {self.timeout_s:g}s"))

    def _check(self, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            self._on_failure(asyncio.CancelledError("the publish was cancelled before its PubAck"))
            return
        exc = future.exception()
        if exc is not None:
            self._on_failure(exc)

    async def wait(self, timeout_s: float) -> int:
        """Wait until no PubAck is outstanding, at most `timeout_s`; return how many still are."""
        if self._pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), timeout=timeout_s)
        return len(self._pending)
