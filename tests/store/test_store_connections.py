"""`PgConnections` on a real Postgres: a use of a driver connection cut short while a statement is
still running (a cancelled task, a SIGTERM unwinding the process) leaves with its own exception, not
a failed reset of the busy connection, and the pool stays usable; a read carries the team scope
exactly when row-level security applies to the connection's role."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from sqlalchemy import text

from store.postgres.connections import PgConnections, role_sql
from store.team_scope import team_scope, teams_scope

APP_ROLE = "pmem_app"  # created by the migrations, owns no table


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


# what a read sees of its team scope
SCOPE_SEEN = "SELECT coalesce(current_setting('pmem.teams', true), '') AS teams"


@pytest.mark.parametrize(("role", "scoped"), [(None, False), (APP_ROLE, True)])
async def test_a_read_carries_the_team_scope_only_where_row_level_security_applies(
    pg_url: str, role: str | None, scoped: bool
) -> None:
    team = uuid.uuid4()
    connections = PgConnections(pg_url, session_sql=role_sql(role), pool_size=2, max_overflow=0)
    try:
        with team_scope(teams_scope([team])):
            async with connections.driver() as driver:
                assert connections.bypasses_row_security(driver) is not scoped
            # a failed read leaves its connection clean for the next one
            with pytest.raises(psycopg.errors.DivisionByZero):
                await connections.fetch("SELECT 1 / 0 AS never")
            # more uses than psycopg's threshold for preparing a statement server-side
            fetched = [await connections.fetch(SCOPE_SEEN) for _ in range(7)]
            async with connections.reading() as conn:
                read = (await conn.execute(text(SCOPE_SEEN))).scalar_one()
        expected = str(team) if scoped else ""
        assert fetched == [[{"teams": expected}]] * 7
        assert read == expected
    finally:
        await connections.close()


PLAN_SEEN = "SELECT current_setting('plan_cache_mode') AS mode"


@pytest.mark.parametrize("role", [None, APP_ROLE])
async def test_a_read_planned_once_keeps_its_plan_setting_to_itself(pg_url: str, role: str | None) -> None:
    session = [*role_sql(role), "SET plan_cache_mode = force_custom_plan"]
    connections = PgConnections(pg_url, session_sql=session, pool_size=1, max_overflow=0)
    try:
        with team_scope(teams_scope([uuid.uuid4()])):
            # more uses than psycopg's threshold for preparing a statement server-side
            planned_once = [await connections.fetch(PLAN_SEEN, one_plan=True) for _ in range(7)]
            after = await connections.fetch(PLAN_SEEN)
        assert planned_once == [[{"mode": "force_generic_plan"}]] * 7
        assert after == [{"mode": "force_custom_plan"}]
    finally:
        await connections.close()
