"""The worker's two per-event reads on a populated store, measured in the database.

    python bench/populated_reads.py --data-dir /tmp/popdb [--explain] [--repeat 30] [--check]

Keeps an embedded Postgres in `--data-dir` across runs: the first run migrates a database and seeds
it exactly like `pipeline_throughput.py --populated` (a persona with 100,000 memories, 20 users
with 2,000 each, 384-dim unit vectors; ~200-250 s); later runs migrate it to head (so a new
migration is applied to the populated rows) and measure at once.

For each scenario it captures the SQL the store sends (the near-duplicate read whole,
`PgBackend.neighbours` inside a transaction: the statement the worker's event write sends in two
parts, before and under the owner locks; and `prompt_memories`, taken where `PgConnections.fetch`
hands it to the driver), runs it `--repeat` times under `EXPLAIN (ANALYZE, BUFFERS)` and prints
the median planning + execution time (server side: what Postgres CPU per event is made of);
`--explain` prints one plan per statement; `--check` compares the neighbours found with an exact
numpy ranking of the owner's rows (recall@k); `--old FILE` builds the near-duplicate statement with
the `neighbours_statement` of another `neighbours_sql.py` (A/B).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sqlalchemy import event  # noqa: E402

from bench.pipeline_throughput import ROWS, make_events, populate  # noqa: E402
from cli.embedded import EmbeddedPostgres  # noqa: E402
from extraction.embeddings import HashingEmbedder  # noqa: E402
from store.migrate import migrate_async  # noqa: E402
from store.model import NewMemory, OwnerRef  # noqa: E402
from store.postgres.store import PostgresMemoryStore  # noqa: E402

DIM = 384
DATABASE = "populated"
K = 8


def unit(rng: np.random.Generator) -> list[float]:
    v = rng.standard_normal(DIM).astype(np.float32)
    return [float(x) for x in v / np.linalg.norm(v)]


def candidate(owner: OwnerRef, key: str, vector: list[float]) -> NewMemory:
    return NewMemory(
        scope=owner.scope,
        owner_id=owner.owner_id,
        user_id=owner.user_id,
        key=key,
        value=f"Talked about {key}",
        confidence=0.9,
        status="active",
        embedding=vector,
        team_id=None,
    )


async def seed(postgres: EmbeddedPostgres) -> str:
    """The populated database's URL (created, migrated and seeded on the first run)."""
    url = postgres.url_for(DATABASE)
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            count = (await (await conn.execute("SELECT count(*) FROM memories")).fetchone() or [0])[0]
    except psycopg.Error:  # no database or no table yet
        count = -1
    if count == -1:
        with contextlib.suppress(Exception):  # exists, not migrated
            postgres.create_database(DATABASE)
    report = await migrate_async(url, DIM)
    print(report.describe(), flush=True)
    if count <= 0:
        persona, users = owners()
        took = await populate(
            url, persona=persona, users=users, persona_rows=ROWS["persona"], per_user=ROWS["user"]
        )
        print(f"populated in {took:.0f}s", flush=True)
    return url


def owners() -> tuple[uuid.UUID, list[uuid.UUID]]:
    events = make_events(1000, seed=7, users_count=20, personas_count=1)
    users = sorted({uuid.UUID(e["user_id"]) for e in events})
    persona = next(uuid.UUID(e["persona_id"]) for e in events if e["persona_id"])
    return persona, users


class Capture:
    def __init__(self, store: PostgresMemoryStore) -> None:
        self.statements: list[tuple[str, Any]] = []
        self.on = False
        event.listen(store.engine.sync_engine, "before_cursor_execute", self._record)

    def _record(
        self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        if self.on:
            self.statements.append((statement, parameters))


async def explain(
    store: PostgresMemoryStore, statement: str, params: Any, repeat: int, show: bool
) -> tuple[float, float]:
    """Median (planning, execution) ms of `statement` under EXPLAIN ANALYZE."""
    planning: list[float] = []
    execution: list[float] = []
    async with store.engine.connect() as conn:
        for i in range(repeat + 1):
            # the timed runs without per-node timing: its clock calls would dominate row-heavy plans
            options = "ANALYZE, BUFFERS" if i == 0 else "ANALYZE, TIMING OFF"
            result = await conn.exec_driver_sql(f"EXPLAIN ({options}) " + statement, params)
            lines = [row[0] for row in result.all()]
            if i == 0:  # warm-up
                if show:
                    print(re.sub(r"'\[[-0-9.e,]+\]'", "'[...]'", "\n".join(lines)))
                continue
            for line in lines:
                if line.startswith("Planning Time:"):
                    planning.append(float(line.split()[2]))
                elif line.startswith("Execution Time:"):
                    execution.append(float(line.split()[2]))
        await conn.rollback()
    return statistics.median(planning), statistics.median(execution)


async def measure(url: str, args: argparse.Namespace) -> None:
    persona, users = owners()
    store = PostgresMemoryStore(url, HashingEmbedder(dim=DIM), parallel_query=False)  # as the worker
    capture = Capture(store)
    rng = np.random.default_rng(11)
    user = OwnerRef(scope="user", owner_id=users[0])
    persona_owner = OwnerRef(scope="persona", owner_id=persona)
    persona_user = OwnerRef(scope="persona_user", owner_id=persona, user_id=users[0])
    # a stored vector of the user, slightly moved: its nearest neighbour must be that row
    async with store.engine.connect() as conn:
        stored = (
            await conn.exec_driver_sql(
                "SELECT embedding::text FROM memories WHERE scope = 'user' AND owner_id = %(o)s LIMIT 1",
                {"o": users[0]},
            )
        ).scalar_one()
    near = np.asarray([float(x) for x in stored.strip("[]").split(",")], dtype=np.float32)
    near = near + 0.01 * rng.standard_normal(DIM).astype(np.float32)
    near_vector = [float(x) for x in near / np.linalg.norm(near)]
    scenarios = {
        "3 candidates: user (2,000) + persona (100,000) + persona_user (empty)": [
            candidate(user, "city", near_vector),
            candidate(persona_owner, "cuisine", unit(rng)),
            candidate(persona_user, "job", unit(rng)),
        ],
        "2 candidates of one user (2,000 rows): a bench event without persona": [
            candidate(user, "city", unit(rng)),
            candidate(user, "job", unit(rng)),
        ],
        "2 candidates of one persona_user (empty): a bench event with persona": [
            candidate(persona_user, "city", unit(rng)),
            candidate(persona_user, "job", unit(rng)),
        ],
        "2 candidates of the persona (100,000 rows)": [
            candidate(persona_owner, "city", unit(rng)),
            candidate(persona_owner, "job", unit(rng)),
        ],
    }
    for title, memories in scenarios.items():
        embeddings = [list(m.embedding or []) for m in memories]
        capture.statements.clear()
        async with store.engine.begin() as conn:
            capture.on = True
            started = time.perf_counter()
            found = await store.backend.neighbours(conn, memories, embeddings, K)
            wall = 1000 * (time.perf_counter() - started)
            capture.on = False
            await conn.rollback()
        statement, params = capture.statements[-1]
        plan_ms, exec_ms = await explain(store, statement, params, args.repeat, args.explain)
        print(
            f"neighbours, {title}: planning {plan_ms:.2f} ms + execution {exec_ms:.2f} ms "
            f"(first call wall {wall:.1f} ms); found {[len(f) for f in found]}",
            flush=True,
        )
        if args.check:
            await check(store, memories, embeddings, found)
    words = ["lisbon", "teacher", "peanuts", "tea", "coffee", "weekend", "walk", "book"]
    for title, group in {
        "user + persona + persona_user": [user, persona_owner, persona_user],
        "user only": [user],
    }.items():
        # the prompt read goes through the psycopg driver, not SQLAlchemy: its statement is taken
        # where the store's connections hand it over
        connections = store.connections
        fetch = connections.fetch
        sent: list[tuple[str, Any]] = []

        async def recording(sql: str, params: Any = None, fetch: Any = fetch, sent: Any = sent) -> Any:
            sent.append((sql, params))
            return await fetch(sql, params)

        connections.fetch = recording  # type: ignore[method-assign]
        try:
            found_prompt = await store.listing.prompt_memories(group, team_id=None, words=words, limit=40)
        finally:
            del connections.fetch
        statement, params = sent[-1]
        plan_ms, exec_ms = await explain(store, statement, params, args.repeat, args.explain)
        print(
            f"prompt_memories, {title}: planning {plan_ms:.2f} ms + execution {exec_ms:.2f} ms; "
            f"{len(found_prompt)} memories",
            flush=True,
        )
    await store.close()


async def check(
    store: PostgresMemoryStore, memories: list[NewMemory], embeddings: list[list[float]], found: Any
) -> None:
    """recall@k of the neighbours found against an exact ranking of the owner's rows."""
    for memory, vector, near in zip(memories, embeddings, found, strict=True):
        async with store.engine.connect() as conn:
            rows = (
                await conn.exec_driver_sql(
                    "SELECT id, embedding::text FROM memories WHERE scope = %(s)s AND owner_id = %(o)s "
                    "AND user_id IS NOT DISTINCT FROM %(u)s AND status IN ('active', 'pending_review') "
                    "AND team_id IS NULL AND embedding IS NOT NULL",
                    {"s": memory.scope, "o": memory.owner_id, "u": memory.user_id},
                )
            ).all()
        if not rows:
            print(f"  {memory.scope}: owner empty, found {len(near)}")
            continue
        ids = [r[0] for r in rows]
        matrix = np.asarray([[float(x) for x in r[1].strip("[]").split(",")] for r in rows], dtype=np.float32)
        sims = matrix @ np.asarray(vector, dtype=np.float32)
        exact = {ids[j] for j in np.argsort(-sims)[:K]}
        got = {n.memory.id for n in near}
        print(f"  {memory.scope} ({len(rows)} rows): recall@{K} {len(exact & got) / K:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/popdb"))
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--explain", action="store_true", help="print one plan per statement")
    parser.add_argument("--check", action="store_true", help="recall@k against an exact ranking")
    parser.add_argument("--seed-only", action="store_true")
    parser.add_argument(
        "--old", type=Path, help="a neighbours_sql.py to take neighbours_statement from (A/B)"
    )
    parser.add_argument("--vacuum", action="store_true", help="VACUUM (ANALYZE) memories first")
    args = parser.parse_args()
    postgres = EmbeddedPostgres(data_dir=args.data_dir / "pg" / "data").start()
    url = asyncio.run(seed(postgres))
    if args.old:
        import importlib.util

        import store.postgres.backend

        spec = importlib.util.spec_from_file_location("old_neighbours_sql", args.old)
        assert spec is not None and spec.loader is not None
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        # `PgBackend.neighbours` builds its statement with the name its module imported
        store.postgres.backend.neighbours_statement = old.neighbours_statement
    if args.vacuum:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE) memories")
    if not args.seed_only:
        asyncio.run(measure(url, args))
    # stopped (the data directory stays for the next run) through the library's handle, so its own
    # cleanup at exit has nothing left to stop
    postgres.stop()


if __name__ == "__main__":
    main()
