"""The Postgres backend's CPU per turn recall: `store.turns.recall_turns` through the product's
path on one pooled connection, its backend's user + system time (/proc) over N recalls of random
questions for random users of a data directory `recall_latency.py --turns … --keep` or
`api_load.py` loaded (`light`: the users with at most 50,000 turns, `heavy`: the others). The hits
can be written as JSON (`--hits`) to compare two codes' answers byte for byte; another source tree
runs with `PYTHONPATH=DIR`.

    python bench/turn_recall_cpu.py --data-dir D --users light --recalls 200 --repeat 3 [--hits F]
    PYTHONPATH=BASE python BASE/bench/turn_recall_cpu.py … (or this script with PYTHONPATH=BASE)

Not part of the test suite. Results: bench/README.md ("Conversation turns").
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import random
import sys
import time
import uuid
from pathlib import Path

import psycopg

# the code measured: PYTHONPATH's source tree if set, else this checkout
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import config  # noqa: F401  (the packages first: the question generator's module adds this checkout)
from cli.embedded import EmbeddedPostgres
from extraction.embeddings import HashingEmbedder
from store.postgres.store import PostgresMemoryStore

# the first recalls fill the plan cache and the connection's state: not counted
WARM_UP = 30
HEAVY_TURNS = 50_000


def backend_cpu_s(pid: int) -> float:
    """User + system CPU seconds so far of the process `pid` (a Postgres backend)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def context_users(url: str, heavy: bool) -> list[uuid.UUID]:
    """The users with turns, light (at most `HEAVY_TURNS`) or heavy, in id order."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT user_id, count(*) FROM conversation_turns GROUP BY 1").fetchall()
    return sorted(user for user, turns in rows if (turns > HEAVY_TURNS) == heavy)


async def measure(url: str, args: argparse.Namespace) -> dict[str, object]:
    """Backend CPU and wall time per recall, and each recall's hits (id, score, sources)."""
    question = importlib.import_module("recall_latency").question
    users = context_users(url, args.users == "heavy")
    rng = random.Random(args.seed)
    cases = [(users[rng.randrange(len(users))], question(rng)) for _ in range(args.recalls)]
    store = PostgresMemoryStore(url, HashingEmbedder(dim=384), pool_size=1)
    try:
        for user, text in cases[:WARM_UP]:
            await store.turns.recall_turns(user, None, text, args.limit)
        async with store._backend.reading() as conn:
            pid = int((await conn.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one())
        cpu, started = backend_cpu_s(pid), time.perf_counter()
        hits: list[list[tuple[str, float, list[str]]]] = []
        for _ in range(args.repeat):
            hits = [
                [
                    (str(h.turn.id), round(h.score, 9), list(h.sources))
                    for h in await store.turns.recall_turns(user, None, text, args.limit)
                ]
                for user, text in cases
            ]
        calls = len(cases) * args.repeat
        cpu_ms = (backend_cpu_s(pid) - cpu) * 1000 / calls
        wall_ms = (time.perf_counter() - started) * 1000 / calls
    finally:
        await store.close()
    return {"users": args.users, "recalls": calls, "backend_cpu_ms": cpu_ms, "wall_ms": wall_ms, "hits": hits}


def main() -> int:
    """Start the data directory's server, measure, print, write the hits if asked."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, required=True, help="holds the server's pg/ directory")
    parser.add_argument("--users", choices=("light", "heavy"), default="light")
    parser.add_argument("--recalls", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="passes over the same recalls")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--hits", type=Path, help="write each recall's hits here (JSON)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    server = EmbeddedPostgres(data_dir=args.data_dir / "pg").start()
    try:
        report = asyncio.run(measure(server.url_for("bench"), args))
    finally:
        server.stop()
    hits = report.pop("hits")
    print(json.dumps(report))
    if args.hits:
        args.hits.write_text(json.dumps(hits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
