"""The platform's hot path through real `pmem serve` processes at scale: CPU per request, and
latency at fixed request rates (open loop).

Data: N memories over M users and T conversation turns round-robin over the same users (loaded
like bench/api_latency.py and bench/recall_latency.py --turns), kept in `--data-dir` between runs.

1. CPU per request (`--cpu N`): N `POST /v1/hint` then N `POST /v1/recall`, one at a time, for
   random users with natural-language questions (`limit` 10). CPU is read from /proc (psutil):
   the API processes (the `pmem serve` parent and its workers) and every process of the Postgres
   server(s) (the postmaster and its children: the backends, and the replica's when there is
   one), exited children included (`children_user`), before and after; divided by N.
2. Open loop (`--rates 50,100,200`): for each rate, requests are started on a fixed schedule
   (request i at t0 + i / rate, whatever the answers), alternating hint and recall, for
   `--seconds`; each request's latency is counted from its scheduled start, so a server that
   falls behind shows it (no coordinated omission). Reported per rate: achieved rate (answered OK
   per second), p50 / p99, errors (status ≠ 200, timeouts, refused). The generator is aiohttp in
   this process (a fifth of httpx's client CPU per request: bench/README.md, "HTTP client CPU"),
   on the same cores as the server and Postgres.

    python bench/api_load.py --data-dir /tmp/pmem-scale/data --turns 500000 --cpu 300   # load, measure
    python bench/api_load.py --data-dir D --skip-load --workers 2 --replica --rates 50,100,200,300

Not part of the test suite. Results: bench/README.md, "Platform load".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import psutil
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.api_latency import SECRET, prepare
from bench.pipeline_throughput import setting_pair
from bench.recall_latency import Population, emit_report, load_turns, percentile, question
from cli.embedded import EmbeddedPostgres, free_port
from testkit.pg_replica import StreamingReplica

ENDPOINTS = ("/v1/hint", "/v1/recall")


def population_of(owners: int, seed: int) -> Population:
    """The users the data was loaded for (the same seed gives the same users)."""
    rng = random.Random(seed)
    return Population(users=tuple(uuid.UUID(int=rng.getrandbits(128)) for _ in range(owners)), personas=())


def tree_cpu_s(roots: Sequence[psutil.Process]) -> float:
    """User + system CPU seconds of each root and all its descendants so far: the live ones', and
    the exited children's the root has reaped (a pool's connection closed, a worker replaced)."""
    total = 0.0
    for root in roots:
        try:
            times = root.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
            children = root.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for child in children:
            try:
                times = child.cpu_times()
            except psutil.NoSuchProcess:
                continue  # exited meanwhile: counted in its parent's children_* from now on
            total += times.user + times.system
    return total


def postmasters(data_dirs: Sequence[Path]) -> list[psutil.Process]:
    """The postmaster of each Postgres server in `data_dirs` (its children: backends, workers)."""
    return [
        psutil.Process(int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0]))
        for data_dir in data_dirs
    ]


def stored_vectors(url: str) -> str:
    """Which embedder made the data's vectors: the one `pmem_embedding` records (`pmem migrate`,
    bench/reembed.py), else the loader's hashing."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT provider, model FROM pmem_embedding WHERE id = 1").fetchone()
    return "hashing (loaded)" if row is None else f"{row[0]} {row[1]}"


# what a hint and a recall read: the turns' context index (a context's window), the turns' primary
# key (the ranked turns' rows) and the memories, with all their indexes
PREWARMED = ("ix_conversation_turns_context", "conversation_turns_pkey", "memories")


def buffers_of(url: str, prewarm: bool) -> dict[str, Any]:
    """The server's shared_buffers and the sizes of `PREWARMED`'s relations; with `prewarm`, those
    read into shared buffers first (pg_prewarm), as a server that has served a while holds them
    when they fit."""
    with psycopg.connect(url, autocommit=True) as conn:
        if prewarm:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        rows = conn.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c WHERE c.relname = ANY(%s) "
            "UNION ALL SELECT i.relname, pg_relation_size(i.oid) FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
            "WHERE t.relname = 'memories'",
            (list(PREWARMED),),
        ).fetchall()
        for relname, _ in rows if prewarm else ():
            conn.execute("SELECT pg_prewarm(%s)", (relname,))
        row = conn.execute("SHOW shared_buffers").fetchone()
    sizes = {relname: round(size / 2**20, 1) for relname, size in rows}
    return {"shared_buffers": row[0] if row else None, "prewarmed": prewarm, "relations_mb": sizes}


def serve(env: dict[str, str], port: int, workers: int, code: Path | None) -> subprocess.Popen[bytes]:
    """Start `pmem serve` (`workers` processes; from the source tree `code`, default this one) and
    wait until every process answers."""
    if code is not None:
        env = {**env, "PYTHONPATH": str(code)}
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve"], env=env, cwd=code)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            ready = False
        spawned = workers == 1 or len(psutil.Process(proc.pid).children()) >= workers
        if ready and spawned:
            time.sleep(2 if workers > 1 else 0)  # the last process's start-up
            return proc
        if proc.poll() is not None:
            raise SystemExit("pmem serve exited")
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("pmem serve did not become ready within 120 s")


def bodies(population: Population, count: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    return [
        {"user_id": str(rng.choice(population.users)), "query": question(rng), "limit": 10}
        for _ in range(count)
    ]


async def warm_up(base: str, key: str, population: Population, count: int, seed: int) -> None:
    """Open every process's pools and prepare the statements (many connections: every process)."""
    headers = {"Authorization": f"Bearer {key}"}
    work = bodies(population, count, seed)

    async def one(i: int, body: dict[str, object]) -> None:
        async with (
            aiohttp.ClientSession(base) as http,
            http.post(ENDPOINTS[i % 2], json=body, headers=headers) as response,
        ):
            await response.read()

    for start in range(0, len(work), 8):
        await asyncio.gather(*(one(start + i, b) for i, b in enumerate(work[start : start + 8])))


async def cpu_per_request(
    base: str,
    key: str,
    population: Population,
    *,
    requests: int,
    seed: int,
    api: Sequence[psutil.Process],
    postgres: Sequence[psutil.Process],
) -> dict[str, dict[str, float]]:
    """Sequential requests per endpoint; API and Postgres CPU ms per request, client latency."""
    headers = {"Authorization": f"Bearer {key}"}
    report: dict[str, dict[str, float]] = {}
    async with aiohttp.ClientSession(base) as http:
        for endpoint in ENDPOINTS:
            work = bodies(population, requests, seed + len(endpoint))
            latencies = []
            api_before, pg_before = tree_cpu_s(api), tree_cpu_s(postgres)
            for body in work:
                started = time.perf_counter()
                async with http.post(endpoint, json=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise SystemExit(f"{endpoint}: {response.status}")
                latencies.append(time.perf_counter() - started)
            api_ms = (tree_cpu_s(api) - api_before) * 1000 / requests
            pg_ms = (tree_cpu_s(postgres) - pg_before) * 1000 / requests
            ordered = sorted(x * 1000 for x in latencies)
            report[endpoint] = {
                "api_cpu_ms": round(api_ms, 2),
                "postgres_cpu_ms": round(pg_ms, 2),
                "total_cpu_ms": round(api_ms + pg_ms, 2),
                "p50_ms": round(percentile(ordered, 50), 2),
                "p99_ms": round(percentile(ordered, 99), 2),
                "requests": requests,
            }
            print(f"  {endpoint}: {report[endpoint]}", file=sys.stderr)
    return report


async def open_loop(
    base: str, key: str, population: Population, *, rate: float, seconds: float, seed: int, timeout_s: float
) -> dict[str, float]:
    """Requests started at `rate` per second for `seconds`, whatever the answers (module docstring)."""
    count = max(1, round(rate * seconds))
    work = bodies(population, count, seed)
    headers = {"Authorization": f"Bearer {key}"}
    latencies: list[float] = []
    errors = 0
    finished_at = 0.0
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(base, connector=connector, timeout=timeout) as http:

        async def one(i: int, scheduled: float) -> None:
            nonlocal errors, finished_at
            try:
                async with http.post(ENDPOINTS[i % 2], json=work[i], headers=headers) as response:
                    await response.read()
                    ok = response.status == 200
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            done = loop.time()
            if ok:
                latencies.append(done - scheduled)
                finished_at = max(finished_at, done)
            else:
                errors += 1

        tasks = []
        start = loop.time() + 0.05
        for i in range(count):
            scheduled = start + i / rate
            delay = scheduled - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, scheduled)))
        sent_late = max(0.0, loop.time() - (start + (count - 1) / rate))
        await asyncio.gather(*tasks)
    ordered = sorted(x * 1000 for x in latencies)
    span = max(finished_at - start, 1e-9)
    return {
        "rate": rate,
        "sent": count,
        "achieved_rps": round(len(latencies) / span, 1),
        "p50_ms": round(percentile(ordered, 50), 2) if ordered else float("nan"),
        "p99_ms": round(percentile(ordered, 99), 2) if ordered else float("nan"),
        "errors": errors,
        "generator_late_s": round(sent_late, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:  # noqa: PLR0915 - a benchmark's script read top to bottom: arguments, load, serve, measure, report
    """Parse arguments, load (unless --skip-load), serve, measure, print the JSON report."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, required=True, help="Postgres data (kept)")
    parser.add_argument("--skip-load", action="store_true", help="reuse the data of an earlier run")
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--owners", type=int, default=1_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=1_000_000)
    parser.add_argument("--embedder", default="hashing", help="hashing, or a local model (all-MiniLM-L6-v2)")
    parser.add_argument("--workers", type=int, default=1, help="API processes (PMEM_API_WORKERS)")
    parser.add_argument("--replica", action="store_true", help="a streaming replica serves the reads")
    parser.add_argument("--cpu", type=int, default=0, help="sequential requests per endpoint (0: skip)")
    parser.add_argument("--rates", default="", help="open-loop rates, requests/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="open-loop run per rate")
    parser.add_argument("--stop-p99-ms", type=float, default=1000.0, help="no higher rate after this p99")
    parser.add_argument("--timeout-s", type=float, default=5.0, help="a request slower than this is an error")
    parser.add_argument("--warm-up", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--code", type=Path, help="run pmem serve from this source tree (`git archive REV | tar -x -C DIR`)"
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        type=setting_pair,
        metavar="NAME=VALUE",
        help="a setting for pmem serve (repeatable), e.g. PMEM_DATABASE_ROLE=pmem_app",
    )
    parser.add_argument(
        "--shared-buffers",
        help="set the server's shared_buffers (e.g. 4GB; ALTER SYSTEM, kept in the data dir; default 128MB)",
    )
    parser.add_argument(
        "--prewarm",
        action="store_true",
        help="read what hints read (the turns' context index, the memories) into shared buffers first",
    )
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    population = population_of(args.owners, args.seed)
    report: dict[str, Any] = {
        "embedder": args.embedder,
        "workers": args.workers,
        "replica": args.replica,
        "code": str(args.code) if args.code else "this checkout",
        "server_env": dict(args.server_env),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_at_start": os.getloadavg(),
    }
    data_dir: Path = args.data_dir
    primary = EmbeddedPostgres(data_dir=data_dir / "pg").start()
    if args.shared_buffers:
        primary.configure({"shared_buffers": args.shared_buffers})
    replica: StreamingReplica | None = None
    proc: subprocess.Popen[bytes] | None = None
    try:
        url = primary.url_for("bench")
        if not args.skip_load:
            url = primary.create_database("bench")
            key, timings = prepare(
                url, population, memories=args.memories, pending=args.pending, seed=args.seed
            )
            (data_dir / "key").write_text(key)
            report["load"] = {**timings, **load_turns(url, population, args.turns, 0, args.seed)}
        key = (data_dir / "key").read_text()
        report["stored_vectors"] = stored_vectors(url)
        report["buffers"] = buffers_of(url, args.prewarm)
        if args.embedder not in report["stored_vectors"]:
            print(
                f"queries embedded with {args.embedder}, stored vectors by {report['stored_vectors']}",
                file=sys.stderr,
            )
        env = {k: v for k, v in os.environ.items() if not k.startswith("PMEM_")}
        port = free_port()
        env.update(
            PMEM_DATABASE_URL=url,
            PMEM_AUTH_JWT_SECRET=SECRET,
            PMEM_API_PORT=str(port),
            PMEM_API_WORKERS=str(args.workers),
        )
        env.update(dict(args.server_env))
        if args.embedder != "hashing":
            env.update(PMEM_EMBEDDING_PROVIDER="local", PMEM_EMBEDDING_MODEL=args.embedder)
        data_dirs = [data_dir / "pg"]
        if args.replica:
            replica = StreamingReplica(primary, data_dir / "replica").start(timeout_s=600)
            replica.wait_caught_up("bench", timeout_s=600)
            env["PMEM_DATABASE_READ_URL"] = replica.url_for("bench")
            data_dirs.append(data_dir / "replica")
        proc = serve(env, port, args.workers, args.code)
        base = f"http://127.0.0.1:{port}"
        asyncio.run(warm_up(base, key, population, args.warm_up, args.seed + 1))
        api, postgres = [psutil.Process(proc.pid)], postmasters(data_dirs)
        if args.cpu:
            print("CPU per request:", file=sys.stderr)
            report["cpu_per_request"] = asyncio.run(
                cpu_per_request(
                    base, key, population, requests=args.cpu, seed=args.seed, api=api, postgres=postgres
                )
            )
        rows = []
        for rate in [float(r) for r in args.rates.split(",") if r.strip()]:
            api_before, pg_before = tree_cpu_s(api), tree_cpu_s(postgres)
            row = asyncio.run(
                open_loop(
                    base,
                    key,
                    population,
                    rate=rate,
                    seconds=args.seconds,
                    seed=args.seed + int(rate),
                    timeout_s=args.timeout_s,
                )
            )
            row["api_cpu_share"] = round((tree_cpu_s(api) - api_before) / args.seconds, 2)
            row["postgres_cpu_share"] = round((tree_cpu_s(postgres) - pg_before) / args.seconds, 2)
            row["load_average"] = round(os.getloadavg()[0], 1)
            rows.append(row)
            print(f"  open loop {rate:g}/s: {row}", file=sys.stderr)
            if row["errors"] or not row["p99_ms"] <= args.stop_p99_ms:
                break
        if rows:
            report["open_loop"] = rows
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
        if replica is not None:
            replica.stop()
        primary.stop_server()
    emit_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
