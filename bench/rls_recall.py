"""Recall latency with Postgres row-level security on, against the code without it, on one data dir.

`load` fills a database once (recall_latency.py's generated memories, each owner's rows given one of
`--teams` teams) and migrates it to this checkout's head. `measure` runs `--queries` recalls (hybrid,
limit 20) in each owner's team and prints one JSON line of p50/p90/p99 in ms. Which code it
measures is the checkout's: with `store.team_scope` present the store connects as `pmem_app` and
every recall runs in its team's scope (row-level security applies); without it (an older
checkout, the tables' owner) nothing changes. `bench/rls_ab.sh` alternates the two.

    python bench/rls_recall.py load --data-dir /var/tmp/pmem-rls --memories 50000 --owners 500
    python bench/rls_recall.py measure --data-dir /var/tmp/pmem-rls --queries 500

Not part of the test suite. Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recall_latency import Population, load, question

from cli.embedded import EmbeddedPostgres
from extraction.embeddings import HashingEmbedder
from store.migrate import migrate
from store.postgres.store import PostgresMemoryStore

DATABASE = "pmem_rls_bench"
WARM_UP = 50


@contextlib.contextmanager
def database(data_dir: Path) -> Iterator[str]:
    """The bench database's URL on an embedded Postgres in `data_dir` (created on first use)."""
    server = EmbeddedPostgres(data_dir=data_dir / "data").start()
    try:
        with psycopg.connect(server.url_for("postgres"), autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
                conn.execute(f"CREATE DATABASE {DATABASE}")
            with psycopg.connect(server.url_for(DATABASE), autocommit=True) as db:
                db.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield server.url_for(DATABASE)
    finally:
        server.stop()


def fill(url: str, memories: int, owners: int, teams: int, seed: int) -> None:
    """Migrate, COPY the memories, and give each owner's rows one team."""
    rng = random.Random(seed)
    population = Population(
        users=tuple(uuid.UUID(int=rng.getrandbits(128)) for _ in range(owners)), personas=()
    )
    migrate(url, 384)
    load(url, population, memories, 0, seed)
    team_ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(teams)]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE memories SET status = 'active', "
            "team_id = (%(teams)s::uuid[])[1 + abs(hashtext(owner_id::text)) %% %(n)s]",
            {"teams": team_ids, "n": teams},
        )
        conn.execute("VACUUM ANALYZE memories")


async def measure(url: str, queries: int, seed: int) -> dict[str, Any]:
    """p50/p90/p99 (ms) of sequential recalls, each in its owner's team."""
    with psycopg.connect(url, autocommit=True) as conn:
        contexts = conn.execute(
            "SELECT DISTINCT owner_id, team_id FROM memories WHERE team_id IS NOT NULL ORDER BY owner_id"
        ).fetchall()
    try:
        from store.team_scope import team_scope, teams_scope
    except ImportError:  # a checkout without row-level security
        arm = "without"
        store = PostgresMemoryStore(url, HashingEmbedder(dim=384))

        def scoped(team: uuid.UUID) -> contextlib.AbstractContextManager[Any]:
            return contextlib.nullcontext()
    else:
        arm = "rls"
        store = PostgresMemoryStore(url, HashingEmbedder(dim=384), database_role="pmem_app")

        def scoped(team: uuid.UUID) -> contextlib.AbstractContextManager[Any]:
            return team_scope(teams_scope([team]))

    rng = random.Random(seed)
    latencies: list[float] = []
    found: list[int] = []
    try:
        for i in range(queries + WARM_UP):
            owner, team = rng.choice(contexts)
            text = question(rng)
            started = time.perf_counter()
            with scoped(team):
                hits = await store.recall(owner, None, text, 20, team_id=team)
            elapsed = (time.perf_counter() - started) * 1000
            if i >= WARM_UP:
                latencies.append(elapsed)
                found.append(len(hits))
    finally:
        await store.close()
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "arm": arm,
        "queries": queries,
        "p50_ms": round(statistics.median(latencies), 3),
        "p90_ms": round(cuts[89], 3),
        "p99_ms": round(cuts[98], 3),
        "mean_hits": round(statistics.fmean(found), 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """`load` or `measure` (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("load", "measure"))
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--memories", type=int, default=50_000)
    parser.add_argument("--owners", type=int, default=500)
    parser.add_argument("--teams", type=int, default=10)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    with database(args.data_dir) as url:
        if args.action == "load":
            fill(url, args.memories, args.owners, args.teams, args.seed)
        else:
            print(json.dumps(asyncio.run(measure(url, args.queries, args.seed))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
