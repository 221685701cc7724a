"""Paired A/B of recall latency for two `ScoreFusion.key_weight` values on the data
`bench/recall_latency.py` loaded (reuse its `--data-dir ... --keep`): every query runs on both
stores back to back, in alternating order, so machine noise (other benchmarks) hits both sides
alike. Prints p50 / p90 / p99 per side and the median of the paired differences.

    python bench/recall_latency.py --data-dir /tmp/rl100k --keep          # load once
    python bench/key_weight_ab.py --data-dir /tmp/rl100k --a 1.0 --b 0.75

Not part of the test suite. Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.recall_latency import emit_report, percentile, question
from cli.embedded import EmbeddedPostgres
from extraction.embeddings import HashingEmbedder
from store.postgres.store import PostgresMemoryStore
from store.rules.recall import ScoreFusion


async def run(url: str, args: argparse.Namespace) -> dict[str, object]:
    """The paired measurement on one loaded database."""
    rng = random.Random(args.seed)
    stores = {
        label: PostgresMemoryStore(
            url, HashingEmbedder(dim=384), pool_size=2, fusion=ScoreFusion(key_weight=kw)
        )
        for label, kw in (("a", args.a), ("b", args.b))
    }
    try:
        found = await stores["a"].connections.fetch("SELECT DISTINCT owner_id FROM memories LIMIT 1000")
        users = [row["owner_id"] for row in found]
        latencies: dict[str, list[float]] = {"a": [], "b": []}
        for i in range(args.queries + 50):
            user, text = rng.choice(users), question(rng)
            order = ("a", "b") if i % 2 == 0 else ("b", "a")
            for label in order:
                started = time.perf_counter()
                await stores[label].recall(user, None, text, args.limit, retriever=args.retriever)
                if i >= 50:  # the first 50 warm the pools, the plan cache and shared buffers
                    latencies[label].append((time.perf_counter() - started) * 1000)
    finally:
        for store in stores.values():
            await store.close()
    differences = sorted(b - a for a, b in zip(latencies["a"], latencies["b"], strict=True))
    report: dict[str, object] = {
        "retriever": args.retriever,
        "limit": args.limit,
        "queries": args.queries,
        "load_average_at_start": os.getloadavg(),
    }
    for label, kw in (("a", args.a), ("b", args.b)):
        values = sorted(latencies[label])
        report[f"key_weight {kw}"] = {
            "p50_ms": round(percentile(values, 50), 2),
            "p90_ms": round(percentile(values, 90), 2),
            "p99_ms": round(percentile(values, 99), 2),
            "mean_ms": round(statistics.fmean(values), 2),
        }
    report["median_paired_difference_ms (b - a)"] = round(statistics.median(differences), 3)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, required=True, help="a directory recall_latency.py kept")
    parser.add_argument("--a", type=float, default=1.0)
    parser.add_argument("--b", type=float, default=ScoreFusion().key_weight)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--retriever", default="hybrid", choices=["hybrid", "keyword"])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    server = EmbeddedPostgres(data_dir=args.data_dir / "pg").start()
    try:
        report = asyncio.run(run(server.url_for("bench"), args))
    finally:
        server.stop()
    emit_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
