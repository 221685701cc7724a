"""Recall-fusion variants on the LoCoMo `dev` split only (constants are chosen here, reported on
`test`): runs the real `pmem eval locomo` pipeline once per `ScoreFusion` setting, hybrid retriever.

    python bench/tune_fusion.py /path/to/locomo10.json [--unit observation] [--store sqlite]
        [--json-out bench/results/tune_fusion.json]

Embeddings are cached in .pmem/eval-cache, so a variant costs the recalls only."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fusion_knobs import FusionKnobs, knobs_applied
from bench.locomo_dev import STORES, hybrid_options, locomo_parser, write_results
from evaluation.options import DEFAULT_EMBEDDING_CACHE
from evaluation.runner import run_locomo
from store.rules.recall import ScoreFusion

LEARNED_SQLITE_DEV = (
    ("vector", 0.831), ("text", 0.7852), ("cosine", 1.0), ("vector_rank", 0.0463), ("text_rank", 0.6075),
    ("both", -0.3935), ("time", 0.3417), ("entity", 0.2375), ("conversation", 0.9005),
)  # fmt: skip
# the defaults before this tuning; the variants below are what was tried on dev, in order
BASE = ScoreFusion(
    vector_weight=0.5, time_boost=0.3, conversation_boost=0.2, focus_share=0.15, vector_floor_rank=None
)
# today's fusion weights without the vector floor (bench/tune_recall.py chose the floor)
NOV30 = ScoreFusion(vector_floor_rank=None)
V6 = replace(BASE, vector_weight=0.6)
# a variant: the product's fusion settings and the experimental knobs (bench/fusion_knobs.py)
VARIANTS: dict[str, tuple[ScoreFusion, FusionKnobs]] = {
    "before": (BASE, FusionKnobs()),
    "rewrite questions": (BASE, FusionKnobs(rewrite_questions=True)),
    "entity boost 0.1": (BASE, FusionKnobs(entity_boost=0.1)),
    "entity boost 0.2": (BASE, FusionKnobs(entity_boost=0.2)),
    "vector weight 0.6": (V6, FusionKnobs()),
    "vector weight 0.4": (replace(BASE, vector_weight=0.4), FusionKnobs()),
    "vw .6, vector weight 0.7": (replace(V6, vector_weight=0.7), FusionKnobs()),
    "vw .6, conversation boost 0.3": (replace(V6, conversation_boost=0.3), FusionKnobs()),
    "vw .6, conversation boost 0.1": (replace(V6, conversation_boost=0.1), FusionKnobs()),
    "vw .6, conversation top 5": (replace(V6, conversation_top=5), FusionKnobs()),
    "vw .6, conversation top 20": (replace(V6, conversation_top=20), FusionKnobs()),
    "vw .6, time boost 0.5": (replace(V6, time_boost=0.5), FusionKnobs()),
    "vw .6, focus share 0.1": (replace(V6, focus_share=0.1), FusionKnobs()),
    "vw .6, entity boost 0.05": (V6, FusionKnobs(entity_boost=0.05)),
    "A: vw .6, conv .3, time .5, focus .1": (replace(NOV30, vector_weight=0.6), FusionKnobs()),
    "B: vw .6, conv .3, time .5": (replace(V6, conversation_boost=0.3, time_boost=0.5), FusionKnobs()),
    "C: vw .6, conv .3, focus .1": (replace(V6, conversation_boost=0.3, focus_share=0.1), FusionKnobs()),
    "D: A + conv .4": (replace(NOV30, vector_weight=0.6, conversation_boost=0.4), FusionKnobs()),
    "E: A with vector weight .5 (the 11-30 defaults)": (NOV30, FusionKnobs()),
    # fit by `python bench/fit_fusion.py locomo10.json --store sqlite` on dev (observations)
    "L: learned": (NOV30, FusionKnobs(learned=LEARNED_SQLITE_DEV)),
}


async def main(argv: list[str] | None = None) -> int:
    """Run the chosen variants on dev and print recall@k for each."""
    parser = locomo_parser(__doc__)
    parser.add_argument("--store", default="sqlite", choices=STORES)
    parser.add_argument("--variant", action="append", help="only these variants (repeatable)")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    for name, (fusion, knobs) in VARIANTS.items():
        if args.variant and name not in args.variant:
            continue
        options = hybrid_options(
            args, fusion=fusion, split="dev", store=args.store, embedding_cache=DEFAULT_EMBEDDING_CACHE
        )
        with knobs_applied(knobs):
            report = await run_locomo(options, progress_stream=io.StringIO())
        hybrid = report["retrievers"]["hybrid"]
        results[name] = {
            **{k: round(v, 4) for k, v in hybrid.items() if k.startswith("recall@")},
            "by_category@10": {c: round(e["recall@10"], 3) for c, e in hybrid["by_category"].items()},
        }
        print(f"{name:<28}", json.dumps(results[name]), flush=True)
    write_results(results, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
