"""The Postgres connection budget: what every process's pool can open together must fit in the
server's `max_connections` (docs/operations.md, "Connection budget"):

    worker replicas × PMEM_DB_POOL_SIZE + API replicas × 20 + 20 per one-off command ≤ max_connections

A process knows only its own side of it. At start-up `pmem worker` and `pmem serve` read
`max_connections` once (`SHOW max_connections`) and log one WARNING when their pool times
PMEM_EXPECTED_REPLICAS (the most processes of their kind running at once) exceeds it, or when
their pool alone takes more than half of it (no room left for a second replica, a rolling
update's extra pod or the other process). Nothing stops: Postgres refuses the connections past
its limit, and the warning says where that comes from. The check never fails a start-up."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.pool import QueuePool

from store.postgres.store import PostgresMemoryStore

log = logging.getLogger("pmem.connections")

# more than this share of max_connections for one process's pool is worth a warning on its own
MAX_SHARE_OF_ONE_PROCESS = 0.5


@dataclass(frozen=True, kw_only=True)
class PoolClaim:
    """What one process may open, and how many such processes run at once."""

    process: str  # "pmem worker", "pmem serve"
    pool: int  # connections this process opens at most
    pool_source: str  # where the pool's size comes from, for the message
    replicas: int  # PMEM_EXPECTED_REPLICAS


def budget_warning(claim: PoolClaim, max_connections: int) -> str | None:
    """The one-line warning when `claim` does not fit in `max_connections`, else None."""
    fix = (
        "keep pmem worker replicas × PMEM_DB_POOL_SIZE + pmem serve replicas × 20 ≤ max_connections: "
        "raise max_connections, or lower the pool or the replicas (docs/operations.md: Connection budget)"
    )
    total = claim.pool * claim.replicas
    if total > max_connections:
        return (
            f"{claim.process}: connection budget exceeded: {claim.replicas} replicas "
            f"(PMEM_EXPECTED_REPLICAS) × {claim.pool} connections ({claim.pool_source}) = {total}, "
            f"more than Postgres's max_connections of {max_connections}; {fix}"
        )
    if claim.pool > max_connections * MAX_SHARE_OF_ONE_PROCESS:
        return (
            f"{claim.process}: connection budget: this process alone may open {claim.pool} connections "
            f"({claim.pool_source}), more than half of Postgres's max_connections of {max_connections}, "
            f"leaving too few for another replica, a rolling update's new pod or the other process; {fix}"
        )
    return None


def pool_capacity(store: PostgresMemoryStore) -> tuple[int, str]:
    """The most connections `store` opens (its pool plus the overflow), and how that reads."""
    pool = store.connections.engine.pool
    if not isinstance(pool, QueuePool):
        return 1, "one at a time"
    size, overflow = pool.size(), max(0, pool._max_overflow)
    return size + overflow, (f"a pool of {size}" + (f" + {overflow} overflow" if overflow else ""))


async def read_max_connections(store: PostgresMemoryStore) -> int:
    """The server's `max_connections`."""
    async with store.connections.reading() as conn:
        return int((await conn.execute(text("SHOW max_connections"))).scalar_one())


async def warn_if_over_budget(
    store: object, *, process: str, replicas: int, pool_source: str | None = None, processes: int = 1
) -> str | None:
    """Read `max_connections` once and log the warning (returned too) when this process's pool
    × `replicas` does not fit. Postgres only (SQLite has one file and no server); any failure to
    read is logged at INFO and ignored. `processes`: processes of one replica each opening such a
    pool (`pmem serve --workers`)."""
    if not isinstance(store, PostgresMemoryStore):
        return None
    try:
        max_connections = await read_max_connections(store)
    except Exception as exc:
        log.info("could not read Postgres's max_connections (%s): budget not checked", type(exc).__name__)
        return None
    pool, described = pool_capacity(store)
    if processes > 1:
        pool, described = pool * processes, f"{processes} processes (PMEM_API_WORKERS) × {described}"
    claim = PoolClaim(process=process, pool=pool, pool_source=pool_source or described, replicas=replicas)
    warning = budget_warning(claim, max_connections)
    if warning is not None:
        log.warning("%s", warning)
    return warning
