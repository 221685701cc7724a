"""What each recall-quality change buys on LoCoMo (observations, local MiniLM): runs the real
`pmem eval locomo` pipeline once per fusion setting, switching the query cues off one at a time.

    python bench/recall_ablation.py /path/to/locomo10.json [--unit observation] [--json-out FILE]

The data set is CC BY-NC 4.0: pass its path, never copy it here."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.locomo_dev import hybrid_options, locomo_parser, write_results
from evaluation.runner import run_locomo
from store.rules.recall import ScoreFusion

_NO_FLOOR = ScoreFusion(vector_floor_rank=None)  # the cosine min-max over all candidates (before 2026-12-01)
VARIANTS: dict[str, ScoreFusion] = {
    "score fusion + BM25 only": replace(_NO_FLOOR, time_boost=0.0, conversation_boost=0.0, focus_share=None),
    "+ informative query words": replace(_NO_FLOOR, time_boost=0.0, conversation_boost=0.0),
    "+ time cues": replace(_NO_FLOOR, conversation_boost=0.0),
    "+ conversation boost": _NO_FLOOR,
    "+ vector floor rank 60 (default)": ScoreFusion(),
}


async def main(argv: list[str] | None = None) -> int:
    """Run every variant and print (and optionally write) recall@k per variant."""
    parser = locomo_parser(__doc__)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    for name, fusion in VARIANTS.items():
        print(f"== {name}", file=sys.stderr)
        report = await run_locomo(hybrid_options(args, fusion=fusion), progress_stream=sys.stderr)
        hybrid = report["retrievers"]["hybrid"]
        results[name] = {k: v for k, v in hybrid.items() if k.startswith("recall@")}
        print(name, json.dumps(results[name]), flush=True)
    write_results(results, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
