"""The connection budget (worker/connection_budget.py): the rule itself, the numbers read from a
real Postgres and from the stores' real pools, and the one WARNING line `pmem serve` and
`pmem worker` log at start-up when PMEM_EXPECTED_REPLICAS × their pool exceeds max_connections."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest
from sqlalchemy import text

from extraction.embeddings import HashingEmbedder
from store.migrate import migrate
from store.postgres.store import PostgresMemoryStore
from tests.api.serve_harness import logged_at_start_up, serve_environment
from tests.database_role import clean_environment
from worker.connection_budget import (
    PoolClaim,
    budget_warning,
    pool_capacity,
    read_max_connections,
    warn_if_over_budget,
)

DIM = 384


def claim(pool: int, replicas: int) -> PoolClaim:
    return PoolClaim(process="pmem worker", pool=pool, pool_source="PMEM_DB_POOL_SIZE", replicas=replicas)


@pytest.mark.parametrize(
    ("pool", "replicas", "max_connections", "expected"),
    [
        (32, 10, 100, "10 replicas (PMEM_EXPECTED_REPLICAS) × 32 connections (PMEM_DB_POOL_SIZE) = 320"),
        (10, 1, 100, None),  # the defaults: one worker's pool of 10
        (20, 4, 100, None),  # fits
        (10, 10, 100, None),  # exactly max_connections still fits
        (60, 1, 100, "this process alone may open 60 connections"),  # more than half, one replica
        (50, 1, 100, None),  # half exactly
    ],
)
def test_the_budget_rule(pool: int, replicas: int, max_connections: int, expected: str | None) -> None:
    warning = budget_warning(claim(pool, replicas), max_connections)
    if expected is None:
        assert warning is None
    else:
        assert warning is not None and expected in warning
        assert warning.startswith("pmem worker: connection budget")
        assert f"max_connections of {max_connections}" in warning
        assert "docs/operations.md: Connection budget" in warning and "\n" not in warning


async def test_the_numbers_come_from_the_server_and_the_pools(new_database: Callable[[], str]) -> None:
    url = new_database()
    migrate(url, DIM)
    api_like = PostgresMemoryStore(url, HashingEmbedder(dim=DIM))
    worker_like = PostgresMemoryStore(url, HashingEmbedder(dim=DIM), pool_size=32, max_overflow=0)
    try:
        async with api_like.connections.reading() as conn:
            setting = (await conn.execute(text("SELECT current_setting('max_connections')"))).scalar_one()
        assert await read_max_connections(api_like) == int(setting) > 0
        # pmem serve's store (store.factory's defaults): a pool of 10 plus 10 overflow, as documented
        assert pool_capacity(api_like) == (20, "a pool of 10 + 10 overflow")
        assert pool_capacity(worker_like) == (32, "a pool of 32")
        replicas = int(setting)  # × 20 connections: far more than the server allows
        warning = await warn_if_over_budget(api_like, process="pmem serve", replicas=replicas)
        assert warning is not None and f"= {replicas * 20}," in warning
        assert await warn_if_over_budget(api_like, process="pmem serve", replicas=1) is None
    finally:
        await api_like.close()
        await worker_like.close()


async def test_no_check_without_a_postgres_server() -> None:
    assert await warn_if_over_budget(object(), process="pmem serve", replicas=1000) is None


def budget_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "connection budget" in line]


def test_pmem_serve_warns_once_at_start_up(new_database: Callable[[], str]) -> None:
    url = new_database()
    migrate(url, DIM)
    for replicas, expected in (("1000", 1), ("1", 0)):
        env = {**serve_environment(url), "PMEM_EXPECTED_REPLICAS": replicas}
        lines = logged_at_start_up(env, "connection budget")
        assert len(lines) == expected, lines
        if expected:
            assert lines[0].startswith("pmem serve: connection budget exceeded: 1000 replicas")
            assert "(a pool of 20) = 20000" in lines[0]


def test_pmem_worker_warns_once_at_start_up(new_database: Callable[[], str]) -> None:
    url = new_database()
    migrate(url, DIM)
    env = clean_environment("PMEM_")
    env.update(
        PMEM_DATABASE_URL=url,
        PMEM_EXTRACTOR="rules",
        PMEM_DB_POOL_SIZE="32",
        PMEM_EXPECTED_REPLICAS="1000",
        PMEM_HTTP_PORT="0",
        # nothing listens there: start-up stops after the database, with exit code 3
        PMEM_NATS_URL="nats://127.0.0.1:1",
        PMEM_STARTUP_TIMEOUT_S="5",
    )
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3, result.stderr
    [line] = budget_lines(result.stderr)
    record = json.loads(line)
    assert record["level"] == "WARNING"
    assert record["message"].startswith(
        "pmem worker: connection budget exceeded: 1000 replicas (PMEM_EXPECTED_REPLICAS) × 32 connections "
        "(PMEM_DB_POOL_SIZE=32) = 32000"
    )
