"""Recall latency on SQLite through the real `SqliteMemoryStore.recall` (FTS5 + numpy vectors).

Loads N memories of ONE owner (default 10,000; the same generated text and hashing embeddings, D=384,
as `recall_latency.py`) into a fresh SQLite file, then measures p50/p90/p99 of recall for the
vector-only, full-text-only and hybrid retrievers, one query at a time, after 50 warm-up recalls
(the first recall reads the owner's embeddings into the store's numpy cache; the report gives that
cold recall separately).

    python bench/recall_latency_sqlite.py                   # 10,000 memories, one owner
    python bench/recall_latency_sqlite.py --memories 2000 --owners 10

Not part of the test suite. Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import insert

from bench.recall_latency import Population, emit_report, measure_retrievers, rows
from extraction.embeddings import HashingEmbedder
from store.sqlite.store import SqliteMemoryStore

COLUMNS = (
    "id", "scope", "owner_id", "user_id", "key", "value", "confidence", "status", "embedding",
    "created_at", "updated_at",
)  # fmt: skip


async def run(args: argparse.Namespace, path: Path) -> dict[str, object]:
    """Load and measure every retriever."""
    rng = random.Random(args.seed)
    population = Population(
        users=tuple(uuid.UUID(int=rng.getrandbits(128)) for _ in range(args.owners)), personas=()
    )
    store = SqliteMemoryStore(f"sqlite:///{path}", HashingEmbedder(dim=384))
    report: dict[str, object] = {
        "memories": args.memories,
        "owners": args.owners,
        "dim": 384,
        "limit": args.limit,
        "queries_per_retriever": args.queries,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_at_start": os.getloadavg(),
    }
    try:
        await store.check_schema()
        started = time.perf_counter()
        batch: list[dict[str, object]] = []
        table = store._schema.memories
        async with store.engine.begin() as conn:
            for record in rows(population, args.memories, 0, args.seed):
                item = dict(zip(COLUMNS, record, strict=True))
                item["embedding"] = json.loads(str(item["embedding"]))
                batch.append(item)
                if len(batch) == 1000:
                    await conn.execute(insert(table), batch)
                    batch = []
            if batch:
                await conn.execute(insert(table), batch)
        report["load_s"] = time.perf_counter() - started
        owner = population.users[0]
        started = time.perf_counter()
        await store.recall(owner, None, "which ramen does she prefer on fridays", args.limit)
        report["cold_recall_ms"] = (time.perf_counter() - started) * 1000
        report["results"] = await measure_retrievers(
            store,  # type: ignore[arg-type]
            population,
            args,
            with_persona=False,
        )
    finally:
        await store.close()
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run in a temporary directory, print the JSON report."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=10_000, help="memories (default 10,000)")
    parser.add_argument("--owners", type=int, default=1, help="owners sharing them (default 1)")
    parser.add_argument("--queries", type=int, default=1_000, help="measured recalls per retriever")
    parser.add_argument("--limit", type=int, default=20, help="recall limit (default 20)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pmem-bench-sqlite-") as directory:
        report = asyncio.run(run(args, Path(directory) / "bench.db"))
    emit_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
