"""Embedding cost per text of the offline embedders, through the product's own embedder classes.

For each model: stored texts in batches (`embed`, what the worker and `pmem reembed` do; ms per
text) and one query at a time (`embed_queries`, what recall waits for; p50 / p99 ms). The texts are
LoCoMo's dialog turns and questions, read from the given file at run time.

    python bench/embedder_cost.py locomo10.json --json bench/results/embedder_cost_locomo_YYYYMMDD.json

Not part of the test suite. Results: bench/README.md ("Embedders").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config import Settings
from evaluation.locomo import load_locomo
from extraction.embeddings import build_embedder, close_embedder

MODELS = ("all-MiniLM-L6-v2", "multilingual-e5-small-q4")


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile of sorted `values`."""
    index = max(0, min(len(values) - 1, round(p / 100 * len(values)) - 1))
    return values[index]


async def measure(model: str, stored: list[str], queries: list[str], batch: int) -> dict[str, Any]:
    """Batch and single-query cost of one local model."""
    embedder = build_embedder(Settings(embedding_provider="local", embedding_model=model))
    embed_queries = getattr(embedder, "embed_queries", None) or embedder.embed
    try:
        await embedder.embed(stored[:batch])  # loads the model
        started = time.perf_counter()
        for start in range(0, len(stored), batch):
            await embedder.embed(stored[start : start + batch])
        batch_ms = (time.perf_counter() - started) * 1000 / len(stored)
        latencies = []
        for text in queries:
            started = time.perf_counter()
            await embed_queries([text])
            latencies.append((time.perf_counter() - started) * 1000)
    finally:
        await close_embedder(embedder)
    latencies.sort()
    return {
        "model": model,
        "stored_texts": len(stored),
        "batch": batch,
        "batch_ms_per_text": batch_ms,
        "queries": len(queries),
        "query_p50_ms": percentile(latencies, 50),
        "query_p99_ms": percentile(latencies, 99),
        "query_mean_ms": statistics.fmean(latencies),
    }


def main() -> int:
    """Measure every model in `--model` (default both) and print the JSON report."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", type=Path, help="locomo10.json")
    parser.add_argument("--model", action="append", choices=MODELS, help="repeatable (default: both)")
    parser.add_argument("--texts", type=int, default=1024, help="stored texts embedded in batches")
    parser.add_argument("--queries", type=int, default=200, help="single queries")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    conversations = load_locomo(args.file)
    stored = [turn.text for c in conversations for turn in c.turns][: args.texts]
    queries = [q.question for c in conversations for q in c.questions][: args.queries]
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_at_start": os.getloadavg(),
        "results": [asyncio.run(measure(m, stored, queries, args.batch)) for m in args.model or MODELS],
        "load_average_at_end": os.getloadavg(),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
