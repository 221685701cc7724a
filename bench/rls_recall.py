"""Recall latency with Postgres row-level security on and off, side by side on one data dir.

`load` fills a database once (recall_latency.py's generated memories, each owner's rows given one of
`--teams` teams) and migrates it to this checkout's head. `compare` then runs `--rounds` rounds of
two arms on one server, alternating which goes first: each arm `--queries` sequential recalls
(hybrid, limit 20), each in its owner's team scope (`store.team_scope`), through the same code:

- `rls`: the store connects as `pmem_app` (`PMEM_DATABASE_ROLE`), which owns no table, so the
  policies of migration 0014 filter every row;
- `owner`: the store connects as the tables' owner (the role unset), which bypasses them.

After one unrecorded round (caches warm), it prints one JSON line per arm and round (p50/p90/p99
in ms, mean hits), then each arm's median over the rounds and the median of the rounds' rls/owner
ratios.

    python bench/rls_recall.py load --data-dir /var/tmp/pmem-rls --memories 20000 --owners 200
    python bench/rls_recall.py compare --data-dir /var/tmp/pmem-rls --queries 300 --rounds 3

Not part of the test suite. Results: bench/README.md ("Row-level security").
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
from store.team_scope import team_scope, teams_scope

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


ARMS = ("rls", "owner")
APP_ROLE = "pmem_app"


async def measure(url: str, arm: str, queries: int, seed: int) -> dict[str, Any]:
    """p50/p90/p99 (ms) of sequential recalls, each in its owner's team scope; `arm` `rls` connects
    as `pmem_app`, `owner` as the tables' owner (row-level security bypassed)."""
    with psycopg.connect(url, autocommit=True) as conn:
        contexts = conn.execute(
            "SELECT DISTINCT owner_id, team_id FROM memories WHERE team_id IS NOT NULL ORDER BY owner_id"
        ).fetchall()
    role = APP_ROLE if arm == "rls" else None
    store = PostgresMemoryStore(url, HashingEmbedder(dim=384), database_role=role)
    rng = random.Random(seed)
    latencies: list[float] = []
    found: list[int] = []
    try:
        for i in range(queries + WARM_UP):
            owner, team = rng.choice(contexts)
            text = question(rng)
            started = time.perf_counter()
            with team_scope(teams_scope([team])):
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


async def compare(url: str, queries: int, rounds: int, seed: int) -> dict[str, Any]:
    """One unrecorded round to warm the caches, then `rounds` rounds of both arms, alternating which
    goes first (the same queries in both arms of a round). Each arm's median figures over the
    rounds, and the median of the rounds' rls/owner ratios (a pair runs back to back, so a machine
    whose load drifts between rounds still compares like with like)."""
    for arm in ARMS:
        await measure(url, arm, queries, seed - 1)
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for n in range(rounds):
        for arm in ARMS if n % 2 == 0 else tuple(reversed(ARMS)):
            figures = await measure(url, arm, queries, seed + n)
            print(json.dumps({"round": n + 1, **figures}), flush=True)
            runs[arm].append(figures)
    keys = ("p50_ms", "p99_ms")
    medians = {
        arm: {key: round(statistics.median(run[key] for run in runs[arm]), 3) for key in keys} for arm in ARMS
    }
    ratios = {
        key: round(
            statistics.median(r[key] / o[key] for r, o in zip(runs["rls"], runs["owner"], strict=True)), 3
        )
        for key in keys
    }
    return {"rounds": rounds, "queries": queries, "median": medians, "rls_over_owner": ratios}


def main(argv: Sequence[str] | None = None) -> int:
    """`load` or `measure` (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("load", "compare"))
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--owners", type=int, default=200)
    parser.add_argument("--teams", type=int, default=10)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    with database(args.data_dir) as url:
        if args.action == "load":
            fill(url, args.memories, args.owners, args.teams, args.seed)
        else:
            print(json.dumps(asyncio.run(compare(url, args.queries, args.rounds, args.seed))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
