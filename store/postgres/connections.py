"""`PgConnections`: the Postgres store's connections, owned in one place.

It holds the SQLAlchemy engine (for the statements SQLAlchemy builds), the same engine in
autocommit (a read runs without BEGIN/ROLLBACK; a raw write sends its own), and the psycopg driver
connections kept checked out between uses. Every connection it opens runs the session settings it
is given once and can send the store's one vector parameter (`store.postgres.params`).

The raw SQL of the hot paths (recall, the event write) goes to the driver in its own `%(name)s`
parameter style: `fetch` for one statement, `driver` and `round_trip` for a pipeline of them.

Every transaction (and every read, which runs in one for this) first sets the transaction-local
`pmem.teams` from the running task's `store.team_scope` in the same round trip as its first
statement: row-level security (migration 0014) keys on it. A connection whose role row-level
security does not apply to (the tables' owner, a superuser: `bypasses_row_security`, asked once
when it opens) reads without that transaction: one statement, as before row-level security.

Reads can be sent elsewhere: inside `reads_on(replica)` (a read replica's own `PgConnections`),
`reading` and `fetch` use the replica's connections instead of these. Writes (`engine.begin()`,
`driver`) never move.
"""

from __future__ import annotations

import contextlib
import math
import re
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any

from psycopg import AsyncConnection as DriverConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from store.errors import translating_errors
from store.postgres.params import register_vector_dumper
from store.rules.urls import to_sqlalchemy_url
from store.team_scope import current_setting

# the team scope of one transaction (`store.team_scope`); `true`: it ends with the transaction
SCOPE_SQL = "SELECT set_config('pmem.teams', %(pmem_teams)s, true)"
# a statement whose plan no parameter changes keeps one plan (the connections' own setting plans
# each execution anew: `RecallTuning.plan_cache_mode`); for one transaction
GENERIC_PLAN_SQL = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"
# each execution planned for its values (for one transaction)
CUSTOM_PLAN_SQL = "SELECT set_config('plan_cache_mode', 'force_custom_plan', true)"
# Postgres's own choice between the two (for one transaction): a custom plan for a statement whose
# generic plan it judges costlier, such as one that joins a few keys given as arrays
AUTO_PLAN_SQL = "SELECT set_config('plan_cache_mode', 'auto', true)"


# whether no table of the database has row-level security in force for the session's role: then
# the team scope changes nothing it reads (a role that later falls under a policy without
# reconnecting sees only rows of no team, never more)
BYPASSES_ROW_SECURITY_SQL = (
    "SELECT NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.relrowsecurity AND row_security_active(c.oid))"
)


def scope_params() -> dict[str, str]:
    """`SCOPE_SQL`'s parameters for the running task's scope."""
    return {"pmem_teams": current_setting()}


def postgres_connect_args(
    connect_timeout_s: float | None, statement_timeout_s: float | None, *, parallel_query: bool = True
) -> dict[str, Any]:
    """psycopg connect arguments: `connect_timeout` (whole seconds, at least 1), and as startup
    options (no extra round trip, they survive the pool's resets) the session's
    `statement_timeout` and, without `parallel_query`, no parallel workers (short OLTP statements:
    launching workers costs more than it saves)."""
    args: dict[str, Any] = {}
    if connect_timeout_s:
        args["connect_timeout"] = max(1, math.ceil(connect_timeout_s))
    options = []
    if statement_timeout_s:
        options.append(f"-c statement_timeout={max(1, round(statement_timeout_s * 1000))}")
    if not parallel_query:
        options.append("-c max_parallel_workers_per_gather=0")
    if options:
        args["options"] = " ".join(options)
    return args


# a role name as `SET ROLE` takes it unquoted (a configuration value, still never pasted as is)
_ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def role_sql(role: str | None) -> list[str]:
    """The session statement that takes `role` (none for None or empty); ValueError for a name
    that is not a plain lower-case identifier."""
    if not role:
        return []
    if _ROLE_NAME.fullmatch(role) is None:
        raise ValueError(f"database role {role!r}: use a plain lower-case identifier such as pmem_app")
    return [f"SET ROLE {role}"]


_READS_ON: ContextVar[PgConnections | None] = ContextVar("pmem_reads_on", default=None)


@contextmanager
def reads_on(connections: PgConnections | None) -> Iterator[None]:
    """Inside the block (and the tasks it starts), `PgConnections.reading` and `.fetch` of any store
    connections run on `connections` (a read replica's); None: on their own."""
    token = _READS_ON.set(connections)
    try:
        yield
    finally:
        _READS_ON.reset(token)


def reads_routed() -> bool:
    """Whether reads are being sent to other connections (`reads_on`) right now."""
    return _READS_ON.get() is not None


class PgConnections:
    """The engines and the reused driver connections of one Postgres store (module docstring)."""

    def __init__(
        self,
        database_url: str,
        *,
        session_sql: Sequence[str] = (),
        pool_size: int = 10,
        max_overflow: int = 10,
        pool_pre_ping: bool = True,
        echo: bool = False,
        connect_args: Mapping[str, Any] | None = None,
    ) -> None:
        """`session_sql`: statements every new connection runs once (its SET statements)."""
        self.engine: AsyncEngine = create_async_engine(
            to_sqlalchemy_url(database_url),
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_pre_ping=pool_pre_ping,
            echo=echo,
            connect_args=dict(connect_args or {}),
            # errors (and so log lines and DLQ reasons) never carry SQL parameters: memory values
            hide_parameters=True,
        )
        self._session_sql = "; ".join(session_sql)
        event.listen(self.engine.sync_engine, "connect", self._configure)
        # recall is a single SELECT: autocommit saves the BEGIN/COMMIT round trips
        self.read_engine: AsyncEngine = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self._idle: list[tuple[AsyncConnection, DriverConnection[Any]]] = []
        self._idle_limit = pool_size // 2
        # the driver connections row-level security does not apply to (`bypasses_row_security`)
        self._unscoped: weakref.WeakSet[DriverConnection[Any]] = weakref.WeakSet()

    def _configure(self, dbapi_connection: Any, _record: Any) -> None:
        register_vector_dumper(dbapi_connection.driver_connection)
        cursor = dbapi_connection.cursor()
        if self._session_sql:
            cursor.execute(self._session_sql)
        # asked after the session's SET ROLE: the role it reads as
        cursor.execute(BYPASSES_ROW_SECURITY_SQL)
        (bypasses,) = cursor.fetchone()
        cursor.close()
        # a SET inside a transaction is undone by the pool's rollback-on-return: commit it
        dbapi_connection.commit()
        if bypasses:
            self._unscoped.add(dbapi_connection.driver_connection)

    def bypasses_row_security(self, driver: DriverConnection[Any]) -> bool:
        """Whether row-level security applies to no table for `driver`'s role (asked when it
        opened), so its reads need no team scope; False for a connection not opened here."""
        return driver in self._unscoped

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[AsyncConnection]:
        """A SQLAlchemy connection in autocommit, inside one transaction that `scoped` opens
        (the team scope is transaction-local) and ends; without it when the connection's role
        bypasses row-level security. On a replica's connections inside `reads_on`."""
        target = _READS_ON.get() or self
        async with translating_errors(), target.read_engine.connect() as conn:
            raw = (await conn.get_raw_connection()).driver_connection
            if raw is None:
                raise RuntimeError("the pooled connection has no psycopg driver connection")
            if target.bypasses_row_security(raw):
                yield conn
                return
            await self.scoped(raw)
            try:
                yield conn
            finally:
                if raw.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                    # the reads' transaction ends here (a failed one too: COMMIT rolls it back)
                    await raw.execute("COMMIT")

    async def scoped(self, driver: DriverConnection[Any]) -> None:
        """Open a transaction on `driver` (in autocommit) with the running task's team scope:
        BEGIN and the setting in one round trip."""
        async with driver.pipeline():
            await driver.execute("BEGIN")
            await driver.execute(SCOPE_SQL, scope_params())

    async def begin_scoped(self, conn: AsyncConnection) -> None:
        """The team scope of the transaction `conn` (not in autocommit) has begun."""
        await conn.exec_driver_sql(SCOPE_SQL, scope_params())

    @asynccontextmanager
    async def driver(self) -> AsyncIterator[DriverConnection[Any]]:
        """A pooled connection's psycopg driver connection, in autocommit; database errors leave
        as the store's own (`store.errors`).

        A connection that ends a use cleanly (no transaction open) is kept for the next use, up
        to half the pool: checking it out of SQLAlchemy's pool and back (its queue, the autocommit
        switch and the reset) costs three turns of the event loop, which under load are the
        larger part of a short read's time. The rest of the pool stays for the other paths."""
        idle = self._idle
        if idle:
            conn, driver = idle.pop()
        else:
            async with translating_errors():
                conn = await self.read_engine.connect()
                raw = (await conn.get_raw_connection()).driver_connection
                if raw is None:
                    await conn.close()
                    raise RuntimeError("the pooled connection has no psycopg driver connection")
                driver = raw
        kept = False
        try:
            async with translating_errors():
                yield driver
            if (
                len(idle) < self._idle_limit
                and not driver.closed
                and driver.info.transaction_status == TransactionStatus.IDLE
            ):
                if conn.in_transaction():  # SQLAlchemy's own bookkeeping (autocommit: no SQL)
                    await conn.rollback()
                idle.append((conn, driver))
                kept = True
        finally:
            if not kept:
                async with translating_errors():
                    if driver.closed or driver.info.transaction_status != TransactionStatus.IDLE:
                        # a use cut short (its task cancelled, a SIGTERM, an error mid-statement)
                        # leaves the connection busy: the pool cannot reset it, so it is dropped
                        # and the interruption, not a reset error, is what the caller sees
                        await conn.invalidate()
                    await conn.close()

    def round_trip(self, driver: DriverConnection[Any]) -> AbstractAsyncContextManager[Any]:
        """A pipeline on `driver`: the statements sent inside it travel together, and its
        results come back in one round trip (the first fetch, or the end of the block)."""
        return driver.pipeline()

    async def fetch(
        self, sql: str, params: Mapping[str, Any] | None = None, *, one_plan: bool = False
    ) -> list[dict[str, Any]]:
        """Run one statement (`%(name)s` parameters) on a driver connection, in autocommit, with
        the team scope where row-level security applies; its rows by column name. `one_plan`: a
        statement whose plan no parameter value changes is planned once per connection (a
        generic plan), not at each execution.

        This skips SQLAlchemy's statement and row processing (about a millisecond per call) and
        the BEGIN/COMMIT round trips; psycopg prepares the few statement shapes server-side
        after their fifth use. On a replica's connections inside `reads_on`."""
        target = _READS_ON.get() or self
        async with target.driver() as driver, driver.cursor(row_factory=dict_row) as cursor:
            scoped = not target.bypasses_row_security(driver)
            if not scoped and not one_plan:
                await cursor.execute(sql, params)
                return await cursor.fetchall()
            # one round trip: the team scope (or the plan setting) and the statement travel before
            # one Sync, which the server runs as one implicit transaction: the transaction-local
            # settings hold for the statement and end with it, without BEGIN and COMMIT (were they
            # ever split by a Sync, the statement would run unscoped: rows of no team only, never
            # more)
            async with driver.pipeline():
                if scoped:
                    await driver.execute(SCOPE_SQL, scope_params())
                if one_plan:
                    await driver.execute(GENERIC_PLAN_SQL)
                await cursor.execute(sql, params)
            return await cursor.fetchall()

    async def drop_idle(self) -> None:
        """Close the kept connections and the pool's idle ones (after the server went away: they
        are dead); connections in use are dropped when they come back."""
        idle = self._idle
        while idle:
            conn, _ = idle.pop()
            with contextlib.suppress(Exception):
                await conn.invalidate()
        await self.engine.dispose()

    async def close(self) -> None:
        """Close the kept connections, then the pool."""
        idle = self._idle
        while idle:
            conn, _ = idle.pop()
            await conn.close()
        await self.engine.dispose()
