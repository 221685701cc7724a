"""One statement of the recall path alone, replayed: `capture` runs N recalls of random questions
through a code's product path and keeps each statement of one kind with its parameters — `turns`:
the turn recall's (`turn_recall_cpu.py`'s cases: the light users of a data directory
`recall_latency.py --turns` or `api_load.py` loaded), `term-stats`: the memory recall's term
statistics (hybrid recalls of `recall_latency.py`'s users, `--persona`: with their persona, three
scopes), `hint`: every statement of hints (`hint_in_context`, 1,500 tokens) for the users of
`api_load.py --owners N` (`--owners`), `hint-memory`: those but the turn recall's; `replay` runs two
or more captures on one connection, alternately for R rounds (the order swapped each round), and
prints the backend's CPU per statement (/proc) and whether each capture's rows equal the first's
(in order). Given two data directories or more (copies of one, each server configured its own way,
e.g. `shared_buffers`), it replays each capture on each server, alternately; `--prewarm` first
reads what a hint reads into each server's shared buffers (`api_load.buffers_of`).

    PYTHONPATH=BASE python bench/statement_replay.py capture --data-dir D --out base.pkl [--kind K]
    python bench/statement_replay.py capture --data-dir D --out new.pkl --kind hint-memory  # api_load.py's D
    python bench/statement_replay.py capture --data-dir D --out new.pkl [--kind K] [--persona]
    python bench/statement_replay.py replay --data-dir D base.pkl new.pkl --rounds 8
    python bench/statement_replay.py replay --data-dir D --data-dir D4G hints.pkl --prewarm  # D4G: a copy

Each capture is of its own code (another source tree with `PYTHONPATH=DIR`); the replay is plain
psycopg, so the statements run as `PgConnections.fetch(one_plan=True)` sends them (one generic
plan per connection, prepared after five uses). Not part of the test suite. Results:
bench/README.md ("Conversation turns").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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


# how each kind of statement begins; `hint` is every statement of a hint, `hint-memory` all but the
# turn recall's
PREFIXES = {
    "turns": "WITH recent AS MATERIALIZED",
    "term-stats": "WITH owned AS MATERIALIZED (SELECT m.search_tsv",
}
KINDS = (*PREFIXES, "hint", "hint-memory")


def of_kind(kind: str, sql: str) -> bool:
    """Whether `sql` is a statement of `kind`."""
    if kind == "hint":
        return True
    if kind == "hint-memory":
        return not sql.startswith(PREFIXES["turns"])
    return sql.startswith(PREFIXES[kind])


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
        elif args.kind in ("hint", "hint-memory"):
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


def replay(
    urls: dict[str, str], captures: dict[str, Captured], rounds: int, *, prewarm: bool
) -> dict[str, list[float]]:
    """Backend CPU ms per statement of each capture on each server (`urls`: a name each), per
    round, the pairs alternating; prints rows' equality first."""
    from bench.api_load import buffers_of

    with contextlib.ExitStack() as stack:
        backends: dict[str, tuple[psycopg.Connection[dict[str, Any]], int]] = {}
        for server, url in urls.items():
            buffers = buffers_of(url, prewarm)
            print(f"{server}: {buffers}", file=sys.stderr)
            conn = stack.enter_context(psycopg.connect(url, autocommit=True, row_factory=dict_row))
            register_vector_dumper(conn)
            conn.execute("SET plan_cache_mode = force_custom_plan")
            row = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()
            assert row is not None
            backends[server] = (conn, int(row["pid"]))

        def run(target: tuple[str, str]) -> tuple[float, list[list[dict[str, Any]]]]:
            conn, pid = backends[target[1]]
            statements = captures[target[0]]
            rows = []
            started = backend_cpu_s(pid)
            for sql, params in statements:
                with conn.pipeline():
                    conn.execute(connections.GENERIC_PLAN_SQL)
                    cursor = conn.execute(sql, params)
                rows.append(cursor.fetchall())
            return (backend_cpu_s(pid) - started) * 1000 / len(statements), rows

        targets = [(capture, server) for capture in captures for server in urls]
        names = {target: target[0] if len(urls) == 1 else f"{target[0]}@{target[1]}" for target in targets}
        first = run(targets[0])[1]
        for target in targets:
            rows = run(target)[1]
            same = sum(a == b for a, b in zip(first, rows, strict=True))
            print(
                f"{names[target]}: rows equal to {names[targets[0]]}'s in {same} of {len(rows)}",
                file=sys.stderr,
            )
        times: dict[str, list[float]] = {names[target]: [] for target in targets}
        for round_ in range(rounds):
            for target in targets if round_ % 2 == 0 else targets[::-1]:
                times[names[target]].append(run(target)[0])
    return times


def main() -> int:
    """Capture or replay (module docstring)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=("capture", "replay"))
    parser.add_argument("captures", nargs="*", type=Path, help="replay: captures, the first the reference")
    parser.add_argument(
        "--data-dir",
        type=Path,
        action="append",
        required=True,
        help="holds the server's pg/ directory; replay: give two or more to replay on each, alternately",
    )
    parser.add_argument(
        "--prewarm", action="store_true", help="replay: read what a hint reads into shared buffers"
    )
    parser.add_argument("--out", type=Path, help="capture: the file to write")
    parser.add_argument("--kind", choices=sorted(KINDS), default="turns", help="capture: which statements")
    parser.add_argument("--persona", action="store_true", help="capture term-stats: recall with the persona")
    parser.add_argument("--recalls", type=int, default=200)
    parser.add_argument(
        "--owners", type=int, default=100, help="capture hint, hint-memory: api_load.py's --owners"
    )
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_intermixed_args()
    if args.mode == "capture":
        if args.out is None:
            parser.error("capture writes to --out FILE")
        if len(args.data_dir) != 1:
            parser.error("capture reads one --data-dir")
        primary = EmbeddedPostgres(data_dir=args.data_dir[0] / "pg").start()
        try:
            kept = asyncio.run(capture(primary.url_for("bench"), args))
        finally:
            primary.stop()
        args.out.write_bytes(pickle.dumps(kept))
        print(f"{len(kept)} statements → {args.out}", file=sys.stderr)
        return 0
    if len(args.captures) * len(args.data_dir) < 2:
        parser.error("replay compares two captures or more, or one on two servers or more")
    captures = {path.stem: pickle.loads(path.read_bytes()) for path in args.captures}
    servers = [EmbeddedPostgres(data_dir=data_dir / "pg") for data_dir in args.data_dir]
    try:
        urls = {
            str(data_dir): server.start().url_for("bench")
            for data_dir, server in zip(args.data_dir, servers, strict=True)
        }
        times = replay(urls, captures, args.rounds, prewarm=args.prewarm)
    finally:
        for server in servers:
            server.stop()
    for name, values in times.items():
        median = sorted(values)[len(values) // 2]
        print(f"{name}: " + " ".join(f"{v:.2f}" for v in values) + f"  median {median:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
