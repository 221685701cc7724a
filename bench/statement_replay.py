"""One statement of the recall path alone, replayed: `capture` runs N recalls of random questions
through a code's product path and keeps each statement of one kind with its parameters — `turns`:
the turn recall's (`turn_recall_cpu.py`'s cases: the light users of a data directory
`recall_latency.py --turns` or `api_load.py` loaded), `term-stats`: the memory recall's term
statistics (hybrid recalls of `recall_latency.py`'s users, `--persona`: with their persona, three
scopes), `hint-memory`: every memory statement of hints (`hint_in_context`, 1,500 tokens) for the
users of `api_load.py --owners N` (`--owners`); `replay` runs two or more captures on one
connection, alternately for R rounds (the order swapped each round), and prints the backend's CPU
per statement (/proc) and whether each capture's rows equal the first's (in order).

    PYTHONPATH=BASE python bench/statement_replay.py capture --data-dir D --out base.pkl [--kind K]
    python bench/statement_replay.py capture --data-dir D --out new.pkl --kind hint-memory  # api_load.py's D
    python bench/statement_replay.py capture --data-dir D --out new.pkl [--kind K] [--persona]
    python bench/statement_replay.py replay --data-dir D base.pkl new.pkl --rounds 8

Each capture is of its own code (another source tree with `PYTHONPATH=DIR`); the replay is plain
psycopg, so the statements run as `PgConnections.fetch(one_plan=True)` sends them (one generic
plan per connection, prepared after five uses). Not part of the test suite. Results:
bench/README.md ("Conversation turns").
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import pickle
import random
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

# the code measured: PYTHONPATH's source tree if set, else this checkout
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import config  # noqa: F401  (the packages first: the question generator's module adds this checkout)
import store.postgres.connections as connections
from cli.embedded import EmbeddedPostgres
from extraction.embeddings import HashingEmbedder
from store.postgres.params import register_vector_dumper
from store.postgres.store import PostgresMemoryStore

Captured = list[tuple[str, dict[str, Any]]]


def backend_cpu_s(pid: int) -> float:
    """User + system CPU seconds so far of the process `pid` (a Postgres backend)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# how each kind of statement begins (`hint-memory`: every statement but the turn recall's)
KINDS = {
    "turns": "WITH recent AS MATERIALIZED",
    "term-stats": "WITH owned AS MATERIALIZED (SELECT m.search_tsv",
    "hint-memory": "",
}


def of_kind(kind: str, sql: str) -> bool:
    """Whether `sql` is a statement of `kind`."""
    if kind == "hint-memory":
        return not sql.startswith(KINDS["turns"])
    return sql.startswith(KINDS[kind])


async def capture(url: str, args: argparse.Namespace) -> Captured:
    """The statements of `args.kind` (with parameters) of `args.recalls` product-path recalls."""
    latency = importlib.import_module("recall_latency")
    rng = random.Random(args.seed)
    kept: Captured = []
    fetch = connections.PgConnections.fetch

    async def recording(self: Any, sql: str, params: Any = None, *, one_plan: bool = False) -> Any:
        if of_kind(args.kind, sql):
            kept.append((sql, dict(params)))
        return await fetch(self, sql, params, one_plan=one_plan)

    connections.PgConnections.fetch = recording  # type: ignore[method-assign]
    store = PostgresMemoryStore(url, HashingEmbedder(dim=384), pool_size=1)
    try:
        if args.kind == "turns":
            users = importlib.import_module("turn_recall_cpu").context_users(url, False)
            for _ in range(args.recalls):
                user = users[rng.randrange(len(users))]
                await store.turns.recall_turns(user, None, latency.question(rng), 10)
        elif args.kind == "hint-memory":
            await hints(store, args)
        else:
            # recall_latency.py's owners (--owners 1000, its default, with --personas 10 --seed 7)
            ids = random.Random(7)
            owners = [uuid.UUID(int=ids.getrandbits(128)) for _ in range(1000)]
            personas = [uuid.UUID(int=ids.getrandbits(128)) for _ in range(10)]
            for _ in range(args.recalls):
                index = rng.randrange(len(owners))
                persona = personas[index % len(personas)] if args.persona else None
                text = latency.question(rng)
                await store.recall(owners[index], persona, text, limit=10, retriever="hybrid")
    finally:
        await store.close()
        connections.PgConnections.fetch = fetch  # type: ignore[method-assign]
    return kept


async def hints(store: PostgresMemoryStore, args: argparse.Namespace) -> None:
    """`args.recalls` hints for `api_load.py`'s users, as `hint_parts_cpu.py hints` asks them."""
    from bench.api_load import bodies, population_of
    from store.services.context_recall import ContextRecall, hint_in_context

    for index, body in enumerate(bodies(population_of(args.owners, 7), args.recalls, args.seed)):
        asked = ContextRecall(
            user_id=uuid.UUID(str(body["user_id"])),
            persona_id=None,
            team_id=None,
            query=f"{body['query']} ({index})",
            limit=10,
        )
        await hint_in_context(store, asked, max_tokens=1500)


def replay(url: str, captures: dict[str, Captured], rounds: int) -> dict[str, list[float]]:
    """Backend CPU ms per statement of each capture, per round; prints rows' equality first."""
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        register_vector_dumper(conn)
        conn.execute("SET plan_cache_mode = force_custom_plan")
        row = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()
        assert row is not None
        pid = int(row["pid"])

        def run(statements: Captured) -> tuple[float, list[list[dict[str, Any]]]]:
            rows = []
            started = backend_cpu_s(pid)
            for sql, params in statements:
                with conn.pipeline():
                    conn.execute(connections.GENERIC_PLAN_SQL)
                    cursor = conn.execute(sql, params)
                rows.append(cursor.fetchall())
            return (backend_cpu_s(pid) - started) * 1000 / len(statements), rows

        names = list(captures)
        first = run(captures[names[0]])[1]
        for name in names:
            rows = run(captures[name])[1]
            same = sum(a == b for a, b in zip(first, rows, strict=True))
            print(f"{name}: rows equal to {names[0]}'s in {same} of {len(rows)}", file=sys.stderr)
        times: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(rounds):
            for name in names if round_ % 2 == 0 else names[::-1]:
                times[name].append(run(captures[name])[0])
    return times


def main() -> int:
    """Capture or replay (module docstring)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=("capture", "replay"))
    parser.add_argument("captures", nargs="*", type=Path, help="replay: captures, the first the reference")
    parser.add_argument("--data-dir", type=Path, required=True, help="holds the server's pg/ directory")
    parser.add_argument("--out", type=Path, help="capture: the file to write")
    parser.add_argument("--kind", choices=sorted(KINDS), default="turns", help="capture: which statements")
    parser.add_argument("--persona", action="store_true", help="capture term-stats: recall with the persona")
    parser.add_argument("--recalls", type=int, default=200)
    parser.add_argument("--owners", type=int, default=100, help="capture hint-memory: api_load.py's --owners")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_intermixed_args()
    primary = EmbeddedPostgres(data_dir=args.data_dir / "pg").start()
    try:
        url = primary.url_for("bench")
        if args.mode == "capture":
            if args.out is None:
                parser.error("capture writes to --out FILE")
            kept = asyncio.run(capture(url, args))
            args.out.write_bytes(pickle.dumps(kept))
            print(f"{len(kept)} statements → {args.out}", file=sys.stderr)
            return 0
        if len(args.captures) < 2:
            parser.error("replay compares two captures or more")
        captures = {path.stem: pickle.loads(path.read_bytes()) for path in args.captures}
        times = replay(url, captures, args.rounds)
    finally:
        primary.stop()
    for name, values in times.items():
        median = sorted(values)[len(values) // 2]
        print(f"{name}: " + " ".join(f"{v:.2f}" for v in values) + f"  median {median:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
