"""`PgConnections` on a real Postgres: a use of a driver connection cut short while a statement is
still running (a cancelled task, a SIGTERM unwinding the process) leaves with its own exception, not
a failed reset of the busy connection, and the pool stays usable."""

from __future__ import annotations

import asyncio

import pytest

from store.postgres.connections import PgConnections


class Interrupted(Exception):
    """Stands for whatever cuts a use short."""


async def test_a_use_cut_short_mid_statement_leaves_with_its_own_exception(pg_url: str) -> None:
    connections = PgConnections(pg_url, pool_size=2, max_overflow=0)
    try:
        for _ in range(3):  # more than the pool's size: a dropped connection is replaced
            with pytest.raises(Interrupted):
                async with connections.driver() as driver:
                    driver.pgconn.send_query(b"SELECT pg_sleep(0.5)")  # in flight, not awaited
                    raise Interrupted
        assert await asyncio.wait_for(connections.fetch("SELECT 1 AS one"), timeout=10) == [{"one": 1}]
    finally:
        await connections.close()


async def test_a_cancelled_read_leaves_as_the_cancellation(pg_url: str) -> None:
    connections = PgConnections(pg_url, pool_size=2, max_overflow=0)
    try:
        read = asyncio.create_task(connections.fetch("SELECT pg_sleep(5)"))
        await asyncio.sleep(0.3)
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(read, timeout=10)
        assert await asyncio.wait_for(connections.fetch("SELECT 1 AS one"), timeout=10) == [{"one": 1}]
    finally:
        await connections.close()
