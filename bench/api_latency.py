"""Control-plane latency through a real `pmem serve` process over HTTP, on an embedded Postgres.

1. `POST /v1/recall` with a service key: N memories over M owners (default 100,000 over 1,000,
   loaded like bench/recall_latency.py), C concurrent clients (default 20) sending natural-language
   questions for random users, latency measured at the client.
2. `GET /v1/review` pages (newest first, cursor pagination, and with a team filter) with an admin's
   JWT while P memories are pending (default 10,000), one request at a time.

    python bench/api_latency.py                    # 100k memories, 20 clients, 10k pending
    python bench/api_latency.py --json bench/results/api_latency_100k_YYYYMMDD.json

The client runs in this process, the server in another, Postgres in a third, all on this machine.
Not part of the test suite. Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from api.auth import mint_jwt
from bench.recall_latency import Population, emit_report, load, percentile, question
from cli.embedded import EmbeddedPostgres, free_port
from store.core.api_keys import KEY_PREFIX, hash_key
from store.migrate import migrate

SECRET = "bench-secret-bench-secret-bench-secret"
TEAM = uuid.UUID(int=0xBE)


def summary(latencies_s: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/mean in milliseconds."""
    ordered = sorted(x * 1000 for x in latencies_s)
    return {
        "p50_ms": round(percentile(ordered, 50), 2),
        "p90_ms": round(percentile(ordered, 90), 2),
        "p99_ms": round(percentile(ordered, 99), 2),
        "mean_ms": round(sum(ordered) / len(ordered), 2),
        "requests": len(ordered),
    }


def prepare(
    url: str, population: Population, *, memories: int, pending: int, seed: int
) -> tuple[str, dict[str, float]]:
    """Load memories, make exactly `pending` of them pending review (half in one team), add a key."""
    migrate(url, 384)
    timings = load(url, population, memories, 0, seed)
    key = KEY_PREFIX + "bench" + uuid.uuid4().hex
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE memories SET status = 'active' WHERE status = 'pending_review'")
        conn.execute(
            "UPDATE memories SET status = 'pending_review', team_id = CASE WHEN random() < 0.5 THEN %s END "
            "WHERE id IN (SELECT id FROM memories WHERE status = 'active' ORDER BY id LIMIT %s)",
            (TEAM, pending),
        )
        conn.execute(
            "INSERT INTO api_keys (id, name, key_hash, prefix) VALUES (%s, 'bench', %s, %s)",
            (uuid.uuid4(), hash_key(key), key[:14]),
        )
        conn.execute("VACUUM ANALYZE memories")
    return key, timings


async def recall_load(
    base: str, key: str, population: Population, *, clients: int, requests: int, seed: int
) -> dict[str, float]:
    """`requests` recalls spread over `clients` concurrent connections."""
    rng = random.Random(seed)
    bodies = [
        {"user_id": str(rng.choice(population.users)), "query": question(rng), "limit": 10}
        for _ in range(requests)
    ]
    latencies: list[float] = []
    queue: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    headers = {"Authorization": f"Bearer {key}"}

    async def client() -> None:
        async with httpx.AsyncClient(base_url=base, timeout=30, headers=headers) as http:
            while True:
                try:
                    body = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                start = time.perf_counter()
                response = await http.post("/v1/recall", json=body)
                latencies.append(time.perf_counter() - start)
                response.raise_for_status()

    # warm up: connections, prepared statements
    async with httpx.AsyncClient(base_url=base, timeout=30, headers=headers) as http:
        for body in bodies[:50]:
            (await http.post("/v1/recall", json=body)).raise_for_status()
    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    return {**summary(latencies), "clients": clients, "throughput_rps": round(len(latencies) / elapsed, 1)}


async def review_pages(base: str, *, pages: int) -> dict[str, dict[str, float]]:
    """Walk the queue page by page (50 items), then the same with a team filter."""
    token = mint_jwt(secret=SECRET, subject=uuid.uuid4(), role="admin")
    results: dict[str, dict[str, float]] = {}
    async with httpx.AsyncClient(
        base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
    ) as http:
        for label, params in (("all teams", {}), ("team filter", {"team_id": str(TEAM)})):
            latencies: list[float] = []
            cursor: str | None = None
            for _ in range(pages):
                query = {**params, "limit": "50", **({"cursor": cursor} if cursor else {})}
                start = time.perf_counter()
                response = await http.get("/v1/review", params=query)
                latencies.append(time.perf_counter() - start)
                response.raise_for_status()
                cursor = response.json()["next_cursor"]  # None at the end: start over
            results[label] = summary(latencies)
    return results


WRK_SCRIPT = """
local bodies = {%s}
local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %s"
request = function()
  i = i + 1
  return wrk.format(nil, "/v1/recall", nil, bodies[(i %% #bodies) + 1])
end
"""


def wrk_recall(
    base: str, key: str, population: Population, *, clients: int, seconds: int, seed: int, workdir: Path
) -> dict[str, float]:
    """The same load from `wrk` (C, one thread per core): closed loop, `clients` connections."""
    rng = random.Random(seed)
    bodies = [
        json.dumps({"user_id": str(rng.choice(population.users)), "query": question(rng), "limit": 10})
        for _ in range(2000)
    ]
    script = workdir / "recall.lua"
    script.write_text(WRK_SCRIPT % (",".join(json.dumps(b) for b in bodies), key))
    out = subprocess.run(
        [
            "wrk",
            f"-t{min(2, clients)}",
            f"-c{clients}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(script),
            base,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result: dict[str, float] = {"clients": clients, "seconds": seconds}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("50%", "90%", "99%"):
            result[f"p{parts[0][:-1]}_ms"] = _ms(parts[1])
        if line.startswith("Requests/sec:"):
            result["throughput_rps"] = float(parts[1])
        if "Non-2xx" in line:
            result["non_2xx"] = float(parts[-1])
    return result


def _ms(text: str) -> float:
    for unit, factor in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(unit):
            return round(float(text[: -len(unit)]) * factor, 2)
    return float(text)


def serve(url: str, port: int) -> subprocess.Popen[bytes]:
    """Start `pmem serve` and wait until it is ready."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PMEM_")}
    env.update(PMEM_DATABASE_URL=url, PMEM_AUTH_JWT_SECRET=SECRET, PMEM_API_PORT=str(port))
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve"], env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("pmem serve did not become ready within 60 s")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, load, serve, measure, print the JSON report."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--owners", type=int, default=1_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--requests", type=int, default=4_000)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--seconds", type=int, default=30, help="wrk run length per concurrency")
    parser.add_argument("--data-dir", type=Path, help="keep Postgres here (default: a temp dir)")
    parser.add_argument(
        "--skip-load", action="store_true", help="reuse the data of an earlier --data-dir run"
    )
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    population = Population(
        users=tuple(uuid.UUID(int=rng.getrandbits(128)) for _ in range(args.owners)), personas=()
    )
    report: dict[str, object] = {
        "memories": args.memories,
        "owners": args.owners,
        "pending": args.pending,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_at_start": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="pmem-api-bench-") as temp:
        data_dir = args.data_dir or Path(temp)
        server = EmbeddedPostgres(data_dir=data_dir / "pg").start()
        proc: subprocess.Popen[bytes] | None = None
        try:
            if args.skip_load:
                url = server.url_for("bench")
                key = (data_dir / "key").read_text()
            else:
                url = server.create_database("bench")
                key, timings = prepare(
                    url, population, memories=args.memories, pending=args.pending, seed=args.seed
                )
                (data_dir / "key").write_text(key)
                report["load"] = timings
            port = free_port()
            proc = serve(url, port)
            base = f"http://127.0.0.1:{port}"
            report["recall_python_client"] = asyncio.run(
                recall_load(
                    base, key, population, clients=args.clients, requests=args.requests, seed=args.seed
                )
            )
            print(f"POST /v1/recall (python client): {report['recall_python_client']}", file=sys.stderr)
            if shutil.which("wrk"):
                for clients in (1, args.clients):
                    row = wrk_recall(
                        base,
                        key,
                        population,
                        clients=clients,
                        seconds=args.seconds,
                        seed=args.seed,
                        workdir=Path(temp),
                    )
                    report[f"recall_wrk_c{clients}"] = row
                    print(f"POST /v1/recall (wrk, {clients} connections): {row}", file=sys.stderr)
            report["review_page"] = asyncio.run(review_pages(base, pages=args.pages))
            print(f"GET /v1/review: {report['review_page']}", file=sys.stderr)
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)
            server.stop()
    emit_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
