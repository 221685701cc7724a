"""`ReadReplicas`: the Postgres store's read replicas, which one a read may use, and when not.

Each replica has its own `PgConnections` (a pool like the primary's). A read asks `pick()` for
one: the next healthy replica in turn, or None (read on the primary) with the reason counted and
handed to the listener (`on_fallback`, the API's `pmem_read_fallbacks_total{reason}`):

- `down`: the last check could not reach it (or a read on it failed for want of a connection);
- `lag`: it replays the primary's changes more than `max_lag_s` late;
- `error`: a read on it failed and was run again on the primary (`failed`).

Health is checked in the background, at most every `check_every_s` per replica and only while reads
ask (no request, no check): one statement on the replica, its replay lag. That lag is
`now() - pg_last_xact_replay_timestamp()` unless the replica has replayed everything it received
and is still receiving (then 0: on an idle primary the last replayed transaction grows old without
the replica being behind). A server that is not in recovery (a promoted replica) has no lag. The
first `pick` waits for the first check (at most `first_check_timeout_s`); the others never wait.

State changes are logged once (healthy → skipped, skipped → healthy), so an outage writes two
lines, not one per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from store.postgres.connections import PgConnections, reads_on
from store.rules.urls import redacted_url

log = logging.getLogger("pmem.store.replicas")

FallbackReason = Literal["down", "lag", "error"]

LAG_SQL = """
SELECT CASE
    WHEN NOT pg_is_in_recovery() THEN 0.0
    WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()
         AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver) THEN 0.0
    ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8, 1e9)
END AS lag_s
"""


@dataclass(kw_only=True)
class Replica:
    """One read replica: its connections and what its last check found."""

    label: str  # its URL without the password, for logs
    connections: PgConnections
    lag_s: float | None = None  # None: not reachable at the last check (or never checked)
    checked_at: float = float("-inf")
    state: FallbackReason | Literal["ok", "unchecked"] = "unchecked"
    checking: asyncio.Task[None] | None = field(default=None, repr=False)


class ReadReplicas:
    """The replicas of one store, their health, and the choice of one per read (module docstring)."""

    def __init__(
        self,
        urls: Sequence[str],
        connections: Callable[[str], PgConnections],
        *,
        max_lag_s: float = 5.0,
        check_every_s: float = 1.0,
        first_check_timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`connections(url)`: the `PgConnections` of one replica (the store's session settings)."""
        if not urls:
            raise ValueError("ReadReplicas needs at least one URL")
        self.replicas = [Replica(label=redacted_url(url), connections=connections(url)) for url in urls]
        self.max_lag_s = max_lag_s
        self.check_every_s = check_every_s
        self.first_check_timeout_s = first_check_timeout_s
        self._clock = clock
        self._next = 0
        self._first_check: asyncio.Task[None] | None = None
        self.fallbacks: dict[str, int] = {"down": 0, "lag": 0, "error": 0}
        self.on_fallback: Callable[[str], None] | None = None

    # -- choosing ---------------------------------------------------------------------------------

    async def pick(self) -> Replica | None:
        """The replica the next read uses, or None: read on the primary (the reason counted)."""
        if self._first_check is None:
            self._first_check = asyncio.ensure_future(self._check_all())
        if not self._first_check.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._first_check), self.first_check_timeout_s)
        now = self._clock()
        for replica in self.replicas:
            if now - replica.checked_at >= self.check_every_s and replica.checking is None:
                self._start_check(replica)
        count = len(self.replicas)
        for offset in range(count):
            replica = self.replicas[(self._next + offset) % count]
            if replica.state == "ok":
                self._next = (self._next + offset + 1) % count
                return replica
        worst = "lag" if any(r.state == "lag" for r in self.replicas) else "down"
        self._count(worst)
        return None

    def failed(self, replica: Replica, error: BaseException, *, down: bool = True) -> None:
        """A read on `replica` failed and goes to the primary. `down` (it could not be reached):
        skip the replica until its next check, and drop its idle connections (likely dead)."""
        self._count("error")
        if not down:
            return
        self._set_state(replica, "down", f"a read failed ({type(error).__name__})")
        replica.checked_at = self._clock()
        task = asyncio.ensure_future(replica.connections.drop_idle())
        task.add_done_callback(_swallow)

    def _count(self, reason: str) -> None:
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1
        listener = self.on_fallback
        if listener is not None:
            listener(reason)

    # -- checking ---------------------------------------------------------------------------------

    async def _check_all(self) -> None:
        await asyncio.gather(*(self._check(replica) for replica in self.replicas))

    def _start_check(self, replica: Replica) -> None:
        replica.checking = asyncio.ensure_future(self._check(replica))

        def done(task: asyncio.Task[None]) -> None:
            replica.checking = None
            _swallow(task)

        replica.checking.add_done_callback(done)

    async def _check(self, replica: Replica) -> None:
        """Read the replica's lag (bounded by `check_every_s` + 1 s) and update its state."""
        replica.checked_at = self._clock()
        try:
            with reads_on(None):  # the check's own connections, whatever the caller's scope
                rows = await asyncio.wait_for(
                    replica.connections.fetch(LAG_SQL), timeout=max(1.0, self.check_every_s + 1.0)
                )
            lag = float(rows[0]["lag_s"])
        except Exception as exc:
            replica.lag_s = None
            self._set_state(replica, "down", f"unreachable ({type(exc).__name__})")
            await _quietly(replica.connections.drop_idle())
            return
        finally:
            replica.checked_at = self._clock()
        replica.lag_s = lag
        if lag > self.max_lag_s:
            self._set_state(replica, "lag", f"{lag:.1f} s behind (PMEM_READ_MAX_LAG_S {self.max_lag_s:g})")
        else:
            self._set_state(replica, "ok", f"{lag:.1f} s behind")

    def _set_state(self, replica: Replica, state: FallbackReason | Literal["ok"], why: str) -> None:
        previous = replica.state
        replica.state = state
        if state == previous:
            return
        if state == "ok":
            if previous != "unchecked":
                log.warning("read replica %s is used again: %s", replica.label, why)
        else:
            log.warning("read replica %s is skipped, its reads go to the primary: %s", replica.label, why)

    async def close(self) -> None:
        """Stop the checks, close every replica's connections."""
        tasks = [r.checking for r in self.replicas if r.checking is not None]
        if self._first_check is not None:
            tasks.append(self._first_check)
        for task in tasks:
            task.cancel()
        for task in tasks:
            await _quietly(task)
        for replica in self.replicas:
            await replica.connections.close()


async def _quietly(awaitable: Awaitable[object]) -> None:
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await awaitable


def _swallow(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()
