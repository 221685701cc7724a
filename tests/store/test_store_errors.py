"""How the store reads driver errors (pure), and that it raises only its own exceptions."""

from __future__ import annotations

import psycopg
import psycopg.errors
import pytest
import sqlalchemy.exc

from store.errors import db_failure


def wrapped(orig: Exception) -> sqlalchemy.exc.DBAPIError:
    return sqlalchemy.exc.DBAPIError.instance("SELECT 1", {}, orig, psycopg.Error)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (wrapped(psycopg.errors.DeadlockDetected("deadlock detected")), "conflict"),
        (wrapped(psycopg.errors.SerializationFailure("could not serialize")), "conflict"),
        (wrapped(psycopg.errors.QueryCanceled("statement timeout")), "timeout"),
        (wrapped(psycopg.errors.UniqueViolation("duplicate key")), "integrity"),
        (wrapped(psycopg.errors.CheckViolation("check")), "integrity"),
        (wrapped(psycopg.errors.AdminShutdown("terminating connection")), "unavailable"),
        (wrapped(psycopg.errors.TooManyConnections("too many clients")), "unavailable"),
        (wrapped(psycopg.OperationalError("connection refused")), "unavailable"),
        (psycopg.OperationalError("connection failed"), "unavailable"),
        (sqlalchemy.exc.TimeoutError("QueuePool limit reached"), "unavailable"),
        (ConnectionResetError(), "unavailable"),
        (psycopg.errors.DeadlockDetected("raw driver error"), "conflict"),
        (wrapped(psycopg.errors.UndefinedTable("no such table")), "other"),
        (
            wrapped(
                psycopg.errors.InsufficientPrivilege(
                    'new row violates row-level security policy for table "memories"'
                )
            ),
            "team_boundary",
        ),
        (psycopg.errors.InsufficientPrivilege("new row violates row-level security policy"), "team_boundary"),
        (wrapped(psycopg.errors.InsufficientPrivilege("permission denied for table memories")), "other"),
        (ValueError("not a database error"), "other"),
    ],
)
def test_db_failure_reads_the_sqlstate_through_the_wrapper(exc: BaseException, kind: str) -> None:
    assert db_failure(exc) == kind


# -- on a real Postgres ---------------------------------------------------------------------------

import asyncio  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

from extraction.embeddings import HashingEmbedder  # noqa: E402
from store.errors import StoreIntegrityError, StoreTimeout, StoreUnavailable  # noqa: E402
from store.migrate import migrate_async  # noqa: E402
from store.model import NewMemory  # noqa: E402
from store.postgres.store import PostgresMemoryStore  # noqa: E402
from tests.factories import user_fact  # noqa: E402


def memory(owner: uuid.UUID, key: str, value: str) -> NewMemory:
    return user_fact(owner, key, value, confidence=0.9, embedding=[0.5] * 8)


async def test_an_unreachable_database_is_store_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = PostgresMemoryStore(f"postgresql://postgres@127.0.0.1:{port}/x", HashingEmbedder(dim=8))
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await store.ping()
    finally:
        await store.close()
    assert "\n" not in str(caught.value)


async def test_statement_timeout_and_constraint_errors_are_not_outages(database_url: str) -> None:
    await migrate_async(database_url, 8)
    store = PostgresMemoryStore(database_url, HashingEmbedder(dim=8), statement_timeout_s=0.2)
    try:
        with pytest.raises(StoreTimeout):
            async with store.backend.reading() as conn:
                await conn.execute(sqlalchemy.text("SELECT pg_sleep(2)"))
        insert = sqlalchemy.text(
            "INSERT INTO processed_events (event_id, processed_at, memory_count, actor)"
            " VALUES (:e, now(), 0, 'test')"
        )
        event_id = uuid.uuid4()
        async with store.backend.transaction() as conn:
            await conn.execute(insert, {"e": event_id})
        with pytest.raises(StoreIntegrityError) as caught:
            async with store.backend.transaction() as conn:
                await conn.execute(insert, {"e": event_id})
        assert "INSERT" not in str(caught.value)
    finally:
        await store.close()


async def test_a_deadlock_is_retried_at_once_and_the_event_is_written(database_url: str) -> None:
    await migrate_async(database_url, 8)
    # Postgres checks a waiting session for deadlock once, deadlock_timeout after it starts to
    # wait, and aborts the session that finds the cycle. The write's check must come after the
    # other session waits (a slow machine may take a while to notice the write waiting), and
    # before the other session's own check.
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        database = admin.info.dbname
        await admin.execute(f"ALTER DATABASE \"{database}\" SET deadlock_timeout = '3s'")
    store = PostgresMemoryStore(database_url, HashingEmbedder(dim=8))
    owner, event_id = uuid.uuid4(), uuid.uuid4()
    try:
        first = await store.writes.write_event(
            event_id=uuid.uuid4(), memories=[memory(owner, "diet", "vegan")]
        )
        existing = first.results[0].memory_id
        async with await psycopg.AsyncConnection.connect(database_url) as other:
            # the other transaction holds the memory the event's write will lock …
            await other.execute("SELECT 1 FROM memories WHERE id = %s FOR UPDATE", (existing,))
            write = asyncio.create_task(
                store.writes.write_event(event_id=event_id, memories=[memory(owner, "diet", "vegetarian")])
            )
            # … wait until the write claimed the event and waits for that memory …
            deadline = time.monotonic() + 20
            async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as probe:
                while True:
                    cursor = await probe.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock'"
                        " AND query LIKE 'SELECT%%memories%%FOR UPDATE%%'"
                    )
                    row = await cursor.fetchone()
                    if row and row[0] >= 1:
                        break
                    assert time.monotonic() < deadline, "the write never waited for the lock"
                    await asyncio.sleep(0.02)
            # … then waits for the event's processed row: a deadlock, which Postgres breaks by
            # aborting the write (its check comes first); the store retries it at once
            await other.execute("SET deadlock_timeout = '60s'")
            await other.execute(
                "INSERT INTO processed_events (event_id, processed_at, memory_count, actor)"
                " VALUES (%s, now(), 0, 'other')",
                (event_id,),
            )
            await other.rollback()
            result = await asyncio.wait_for(write, timeout=20)
    finally:
        await store.close()
    assert not result.duplicate
    assert result.results[0].memory_id == existing
    # once, or twice when the immediate retry claims the event before the other session's
    # waiting INSERT does (the same deadlock again, which the second retry then avoids)
    assert 1 <= store.writes.conflict_retries <= 2
