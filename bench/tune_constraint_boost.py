"""Choose `ScoreFusion.constraint_boost` on the chat-scenario set's tuning half: load the set once
per store (as `chat_scenarios.py` does, MiniLM), then for each boost ask every probe's recall (40
items) and report, per half, how many probes have their needed fact in the first 10 and the needed
facts' mean rank (the worst of a probe's needed facts; 99 when absent).

    .venv/bin/python bench/tune_constraint_boost.py --store postgres --store sqlite [--boosts 0,0.1,0.25]

The rule: the largest boost whose tuning-half mean rank is no worse than without it on every store.
Writes `bench/results/tune_constraint_boost_<store>.json`."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import chat_scenarios

from store.rules.recall import ScoreFusion
from store.services.context_recall import ContextRecall, items_in_context

RANKED = 40
ABSENT = 99


async def ranks(store: Any, scenarios: Sequence[chat_scenarios.Scenario]) -> dict[str, tuple[str, int]]:
    """Each probe's split and the rank of its worst-placed needed fact in recall's first `RANKED`."""
    out: dict[str, tuple[str, int]] = {}
    for scenario in scenarios:
        user_id, persona_id = chat_scenarios.ids_of(scenario)
        for probe in scenario.probes:
            asked = ContextRecall(
                user_id=user_id, persona_id=persona_id, team_id=None, query=probe.message, limit=RANKED
            )
            values = [item.memory.value for item in await items_in_context(store, asked) if item.memory]
            needed = [scenario.fact(name).value for name in probe.needs]
            out[probe.id] = (
                scenario.split,
                max(values.index(v) + 1 if v in values else ABSENT for v in needed),
            )
    return out


async def run_store(kind: str, boosts: Sequence[float]) -> list[dict[str, Any]]:
    """Load the set into a fresh store of `kind`, then rank every probe at each boost."""
    from config import load_settings
    from evaluation.cache import CachingEmbedder
    from evaluation.stores import fresh_store
    from extraction.embeddings import build_embedder, close_embedder
    from worker.metrics import Metrics
    from worker.pipeline import PipelineDeps

    scenarios = chat_scenarios.load_scenarios(chat_scenarios.DATA)
    settings = load_settings(embedding_provider="local")
    embedder = CachingEmbedder(build_embedder(settings), batch_size=settings.embedding_batch_size)
    rows: list[dict[str, Any]] = []
    async with AsyncExitStack() as stack:
        stack.push_async_callback(close_embedder, embedder.inner)
        store = await fresh_store(embedder, stack, kind=kind)
        extractor = chat_scenarios.ScenarioExtractor(scenarios)
        deps = PipelineDeps(store=store, extractor=extractor, embedder=embedder, metrics=Metrics())
        for scenario in scenarios:
            await chat_scenarios.load(store, deps, scenario)
        # the store's recall holds its fusion settings: swap them between rounds on the same data
        holder = store.backend.recall if kind == "postgres" else store.backend
        base = holder._fusion or ScoreFusion()
        for boost in boosts:
            holder._fusion = replace(base, constraint_boost=boost)
            found = await ranks(store, scenarios)
            for split in chat_scenarios.SPLITS:
                placed = {probe: rank for probe, (s, rank) in found.items() if s == split}
                row = {
                    "store": kind,
                    "boost": boost,
                    "split": split,
                    "in_first_10": sum(rank <= 10 for rank in placed.values()),
                    "probes": len(placed),
                    "mean_rank": round(sum(placed.values()) / len(placed), 2),
                    "ranks": placed,
                }
                rows.append(row)
                print(
                    f"{kind} boost {boost}: {split} {row['in_first_10']}/{row['probes']} in the first 10, "
                    f"mean rank {row['mean_rank']}",
                    flush=True,
                )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", action="append", choices=("postgres", "sqlite"))
    parser.add_argument("--boosts", default="0,0.1,0.2,0.25,0.3,0.4,0.5,0.75")
    parser.add_argument("--out", type=Path, default=chat_scenarios.RESULTS)
    args = parser.parse_args(argv)
    boosts = [float(b) for b in args.boosts.split(",")]
    for kind in args.store or ["postgres"]:
        rows = asyncio.run(run_store(kind, boosts))
        path = args.out / f"tune_constraint_boost_{kind}.json"
        path.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"→ {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
