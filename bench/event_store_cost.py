"""The store's part of one worker event, for an empty owner and for a populated one.

    python bench/event_store_cost.py --data-dir /tmp/evcost [--rows 20000] [--events 300] [--json F]

What the worker asks of the store for each `conversation.ended` event once the LLM has answered
nothing else: the existing keys for the prompt (`prompt_memories`, 40 most relevant) and the
deduplicated write (`write_event` with `decide_against_neighbours`, 8 neighbours: near-duplicate
read, owner lock, inserts or proposals, audit, COMMIT), called as `worker.pipeline` calls them, on
a store opened as `pmem worker` opens it, one event at a time (no LLM, no NATS, no contention).

Two arms on one database, interleaved in blocks of `--block` events (so the machine's load falls
on both alike): **empty**, a user who owns no memory before the run (only what the run writes),
and **populated**, a user who owns `--rows` memories (random unit vectors, text from the
pipeline benchmark's vocabulary, all active). Each event writes 2 facts: one new key and, every
other event, a key the owner already has (a restatement: its pending row updated, or a revision
proposed for an active one). The events' vectors are random, so dedup writes them (the costliest
outcome).

Printed per arm: wall ms per event (p50 / mean / p99, client side), and per event the CPU of
this process and of every Postgres process (psutil), from the blocks' sums. The data dir is kept:
the first run migrates and seeds (~1 min for 20,000 rows); later runs migrate to head and measure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pipeline_throughput import WORDS as ALL_WORDS  # noqa: E402
from bench.pipeline_throughput import populate, postgres_cpu_s, print_statements  # noqa: E402
from cli.embedded import EmbeddedPostgres  # noqa: E402
from extraction.dedup import decide_against_neighbours  # noqa: E402
from extraction.embeddings import HashingEmbedder  # noqa: E402
from store.factory import StoreOptions, open_store  # noqa: E402
from store.migrate import migrate_async  # noqa: E402
from store.model import NewMemory, OwnerRef  # noqa: E402
from store.postgres.recall_sql import RecallTuning  # noqa: E402
from store.team_scope import team_scope, teams_scope  # noqa: E402

DIM = 384
DATABASE = "eventcost"
# the populated user (fixed, so a kept data dir is found again) and the run's empty one (fresh)
POPULATED_USER = uuid.UUID("00000000-0000-4000-8000-000000020000")
PERSONA = uuid.UUID("00000000-0000-4000-8000-0000000000aa")
# the vocabulary without the words admission refuses in a key ("password")
WORDS = [word for word in ALL_WORDS if word != "password"]
PROMPT_KEYS = 40  # worker.planning.PROMPT_KEYS
DEDUP_NEIGHBOURS = 8  # worker.planning.DEDUP_NEIGHBOURS


async def seed(postgres: EmbeddedPostgres, rows: int) -> str:
    """The database's URL, created, migrated and seeded with the populated user on the first run."""
    url = postgres.url_for(DATABASE)
    with contextlib.suppress(Exception):  # exists already
        postgres.create_database(DATABASE)
    report = await migrate_async(url, DIM)
    print(report.describe(), flush=True)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        found = await (
            await conn.execute("SELECT count(*) FROM memories WHERE owner_id = %s", (POPULATED_USER,))
        ).fetchone()
    if not found or not found[0]:
        took = await populate(url, persona=PERSONA, users=[POPULATED_USER], persona_rows=0, per_user=rows)
        print(f"seeded {rows} memories in {took:.0f}s", flush=True)
    return url


def unit(rng: np.random.Generator) -> list[float]:
    """A random unit vector."""
    v = rng.standard_normal(DIM).astype(np.float32)
    return [float(x) for x in v / np.linalg.norm(v)]


@dataclasses.dataclass(kw_only=True)
class Arm:
    """One side of the comparison: the store it writes through, its user and team, the stored
    keys its events restate, and what it measured."""

    store: Any
    user: uuid.UUID
    team: uuid.UUID | None = None
    keys: list[str] = dataclasses.field(default_factory=list)
    walls: list[float] = dataclasses.field(default_factory=list)
    own_cpu_s: float = 0.0
    postgres_cpu_s: float = 0.0


def event_memories(arm: Arm, n: int, restated: str | None, rng: np.random.Generator) -> list[NewMemory]:
    """An event's two extracted facts: a new key, and `restated` (a stored key) or another new one."""
    keys = [f"topic {n} {WORDS[n % len(WORDS)]}", restated or f"other {n} {WORDS[(n * 7) % len(WORDS)]}"]
    return [
        NewMemory(
            scope="user",
            owner_id=arm.user,
            user_id=None,
            key=key,
            value=f"Talked about {WORDS[(n + j) % len(WORDS)]} and {WORDS[(n * 3 + j) % len(WORDS)]} {n}",
            confidence=0.9,
            status="pending_review",
            embedding=unit(rng),
            team_id=arm.team,
        )
        for j, key in enumerate(keys)
    ]


async def one_event(arm: Arm, n: int, restated: str | None, rng: np.random.Generator) -> float:
    """The store's part of one event (prompt keys, then the deduplicated write) in the event's
    team scope, as `worker.pipeline` runs it: wall seconds."""
    memories = event_memories(arm, n, restated, rng)
    words = [WORDS[(n + j) % len(WORDS)] for j in range(8)]
    owners = [OwnerRef(scope="user", owner_id=arm.user)]
    with team_scope(teams_scope([arm.team])):
        started = time.perf_counter()
        await arm.store.listing.prompt_memories(owners, team_id=arm.team, words=words, limit=PROMPT_KEYS)
        await arm.store.writes.write_event(
            event_id=uuid.uuid4(),
            memories=memories,
            dedup=decide_against_neighbours,
            neighbours=DEDUP_NEIGHBOURS,
            body_sha256=f"{n:064x}",
        )
        return time.perf_counter() - started


def summary(arm: Arm) -> dict[str, float]:
    """An arm's figures, in ms per event."""
    ordered = sorted(arm.walls)
    return {
        "events": len(ordered),
        "wall_p50_ms": round(1000 * statistics.median(ordered), 2),
        "wall_mean_ms": round(1000 * statistics.fmean(ordered), 2),
        "wall_p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
        "client_cpu_ms": round(1000 * arm.own_cpu_s / len(ordered), 2),
        "postgres_cpu_ms": round(1000 * arm.postgres_cpu_s / len(ordered), 2),
    }


async def make_arms(url: str, args: argparse.Namespace) -> dict[str, Arm]:
    """The two arms: empty and populated owner, or (`--rls`) the tables' owner and `pmem_app`
    (row-level security), each a user of its own in a team, both empty."""
    options = StoreOptions(
        pool_size=4,
        max_overflow=0,
        pool_pre_ping=False,
        parallel_query=False,
        tuning=RecallTuning(plan_cache_mode="auto"),
    )
    store = await open_store(url, HashingEmbedder(dim=DIM), options)
    if args.rls:
        app = await open_store(
            url, HashingEmbedder(dim=DIM), dataclasses.replace(options, database_role="pmem_app")
        )
        return {
            "owner": Arm(store=store, user=uuid.uuid4(), team=uuid.uuid4()),
            "pmem_app": Arm(store=app, user=uuid.uuid4(), team=uuid.uuid4()),
        }
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        stored = await (
            await conn.execute(
                "SELECT key FROM memories WHERE owner_id = %s ORDER BY updated_at DESC LIMIT 500",
                (POPULATED_USER,),
            )
        ).fetchall()
    # stored keys the writer accepts (admission refuses a key that names a secret)
    keys = [row[0] for row in stored if "password" not in row[0]]
    return {
        "empty": Arm(store=store, user=uuid.uuid4()),
        "populated": Arm(store=store, user=POPULATED_USER, keys=keys),
    }


async def measure(url: str, postgres: EmbeddedPostgres, args: argparse.Namespace) -> dict[str, Any]:
    """Both arms, interleaved in blocks; their summaries and the second ÷ first ratios."""
    arms = await make_arms(url, args)
    names = list(arms)
    rng = np.random.default_rng(11)
    me = psutil.Process(os.getpid())
    # warm-up: plans cached, pool open, pages read, on both owners
    for arm in arms.values():
        for n in range(10):
            await one_event(arm, 10_000_000 + n, None, rng)
    n = 0
    block = 0
    while len(arms[names[1]].walls) < args.events:
        for name in names if block % 2 == 0 else names[::-1]:
            arm = arms[name]
            cpu0, pg0 = sum(me.cpu_times()[:2]), postgres_cpu_s(postgres)
            for _ in range(args.block):
                restated = arm.keys[n % len(arm.keys)] if arm.keys and n % 2 else None
                arm.walls.append(await one_event(arm, n, restated, rng))
                if arm.user != POPULATED_USER:
                    arm.keys.append(f"topic {n} {WORDS[n % len(WORDS)]}")
                n += 1
            arm.own_cpu_s += sum(me.cpu_times()[:2]) - cpu0
            arm.postgres_cpu_s += postgres_cpu_s(postgres) - pg0
        block += 1
    if args.statements:
        # each arm alone, its statements by total time (the blocks above mix them)
        for name, arm in arms.items():
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute("SELECT pg_stat_statements_reset()")
            for _ in range(args.block):
                await one_event(arm, n, None, rng)
                n += 1
            print(f"{name}:", flush=True)
            await print_statements(url, args.block)
    for store in {id(arm.store): arm.store for arm in arms.values()}.values():
        await store.close()
    out = {name: summary(arm) for name, arm in arms.items()}
    figures = ("wall_p50_ms", "wall_mean_ms", "wall_p99_ms", "client_cpu_ms", "postgres_cpu_ms")
    ratios = {figure: round(out[names[1]][figure] / out[names[0]][figure], 2) for figure in figures}
    return {"rows": 0 if args.rls else args.rows, "arms": out, f"{names[1]}_over_{names[0]}": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/evcost"))
    parser.add_argument("--rows", type=int, default=20_000, help="the populated user's memories")
    parser.add_argument("--events", type=int, default=300, help="events per arm")
    parser.add_argument("--block", type=int, default=25, help="events per arm before switching")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument(
        "--rls",
        action="store_true",
        help="arms: the tables' owner against pmem_app (row-level security), empty users in a team",
    )
    parser.add_argument(
        "--statements", action="store_true", help="then `--block` events per arm alone: pg_stat_statements"
    )
    args = parser.parse_args()
    postgres = EmbeddedPostgres(data_dir=args.data_dir / "pg" / "data").start()
    if args.statements:
        postgres.configure(
            {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track_planning": "on"}
        )
    try:
        url = asyncio.run(seed(postgres, args.rows))
        result = asyncio.run(measure(url, postgres, args))
    finally:
        postgres.stop_server()
    result = {"load_average": [round(x, 2) for x in os.getloadavg()], **result}
    print(json.dumps(result, indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
