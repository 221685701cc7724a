"""Recall-fusion variants on the LoCoMo `dev` split only (constants are chosen here, reported on
`test`): runs the real `pmem eval locomo` pipeline once per `ScoreFusion` setting, hybrid retriever.

    python bench/tune_fusion.py /path/to/locomo10.json [--unit observation] [--store sqlite]
        [--json-out bench/results/tune_fusion.json]

Embeddings are cached in .pmem/eval-cache, so a variant costs the recalls only."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from store.recall import ScoreFusion
from worker.evaluation.options import (
    DEFAULT_EMBEDDING_CACHE,
    EvalOptions,
    local_embedder_available,
    resolve_embedding_provider,
)
from worker.evaluation.runner import run_locomo

LEARNED_SQLITE_DEV = (
    ("vector", 0.831), ("text", 0.7852), ("cosine", 1.0), ("vector_rank", 0.0463), ("text_rank", 0.6075),
    ("both", -0.3935), ("time", 0.3417), ("entity", 0.2375), ("conversation", 0.9005),
)  # fmt: skip
# the defaults before this tuning; the variants below are what was tried on dev, in order
BASE = ScoreFusion(
    vector_weight=0.5, time_boost=0.3, conversation_boost=0.2, focus_share=0.15, vector_floor_rank=None
)
# the 2026-11-30 defaults (before the vector floor of bench/tune_recall.py)
NOV30 = ScoreFusion(vector_floor_rank=None)
V6 = replace(BASE, vector_weight=0.6)
VARIANTS: dict[str, ScoreFusion] = {
    "before": BASE,
    "rewrite questions": replace(BASE, rewrite_questions=True),
    "entity boost 0.1": replace(BASE, entity_boost=0.1),
    "entity boost 0.2": replace(BASE, entity_boost=0.2),
    "vector weight 0.6": V6,
    "vector weight 0.4": replace(BASE, vector_weight=0.4),
    "vw .6, vector weight 0.7": replace(V6, vector_weight=0.7),
    "vw .6, conversation boost 0.3": replace(V6, conversation_boost=0.3),
    "vw .6, conversation boost 0.1": replace(V6, conversation_boost=0.1),
    "vw .6, conversation top 5": replace(V6, conversation_top=5),
    "vw .6, conversation top 20": replace(V6, conversation_top=20),
    "vw .6, time boost 0.5": replace(V6, time_boost=0.5),
    "vw .6, focus share 0.1": replace(V6, focus_share=0.1),
    "vw .6, entity boost 0.05": replace(V6, entity_boost=0.05),
    "A: vw .6, conv .3, time .5, focus .1": replace(NOV30, vector_weight=0.6),
    "B: vw .6, conv .3, time .5": replace(V6, conversation_boost=0.3, time_boost=0.5),
    "C: vw .6, conv .3, focus .1": replace(V6, conversation_boost=0.3, focus_share=0.1),
    "D: A + conv .4": replace(NOV30, vector_weight=0.6, conversation_boost=0.4),
    "E: A with vector weight .5 (the 11-30 defaults)": NOV30,
    # fit by `python bench/fit_fusion.py locomo10.json --store sqlite` on dev (observations)
    "L: learned": replace(NOV30, learned=LEARNED_SQLITE_DEV),
}


async def main(argv: list[str] | None = None) -> int:
    """Run the chosen variants on dev and print recall@k for each."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", type=Path)
    parser.add_argument("--unit", default="observation", choices=["observation", "dialog"])
    parser.add_argument("--store", default="sqlite", choices=["postgres", "sqlite"])
    parser.add_argument("--variant", action="append", help="only these variants (repeatable)")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    for name, fusion in VARIANTS.items():
        if args.variant and name not in args.variant:
            continue
        options = EvalOptions(
            file=args.file,
            unit=args.unit,
            ks=(5, 10, 25, 50),
            retrievers=("hybrid",),
            embedding_provider=resolve_embedding_provider(None, {}, local_embedder_available()),
            database_url=None,
            data_dir=None,
            fusion=fusion,
            split="dev",
            store=args.store,
            embedding_cache=DEFAULT_EMBEDDING_CACHE,
        )
        report = await run_locomo(options, progress_stream=io.StringIO())
        hybrid = report["retrievers"]["hybrid"]
        results[name] = {
            **{k: round(v, 4) for k, v in hybrid.items() if k.startswith("recall@")},
            "by_category@10": {c: round(e["recall@10"], 3) for c, e in hybrid["by_category"].items()},
        }
        print(f"{name:<28}", json.dumps(results[name]), flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
