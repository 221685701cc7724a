"""Choose the hint's fact relevance floor (`store.rules.hint.FACT_RELEVANCE_FLOOR`) on LoCoMo dev.

A fact the recall found at least this near the message (cosine) may take the turns' share of the
hint's budget too; a less near fact only fills the facts' own share. Each dev conversation goes
through the product once (as `pmem eval locomo --unit hint`: the pipeline with the chosen extractor,
a reviewer approving everything, MiniLM), then every question's hint is asked at every budget for
every candidate floor, and once with turns alone; each is scored as the hint unit scores it
(`evaluation.hint_scoring.hint_result`: R@1 evidence recall, A@1 answer containment).

    .venv/bin/python bench/tune_hint_balance.py locomo10.json --extractor rules --store sqlite \\
        --floors 0.3,0.4,0.5,0.6,1.1 --budget 500,1000,2000 --max-conversations 2

Prints one line per floor and budget (and turns alone) over the conversations run; `--json FILE`
keeps the table. Only the `dev` split is read: the floor is chosen there, reported on `test`."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import store.rules.hint as hint_rules
from evaluation.hint_run import HINT_RECALL_LIMIT
from evaluation.hint_scoring import hint_result
from evaluation.locomo import QuestionResult, load_locomo, select_split, summarise
from evaluation.product import session_index
from evaluation.product_run import ingest
from store.services.context_recall import ContextRecall, hint_in_context


def _numbers(text: str, kind: type) -> list[Any]:
    return [kind(part) for part in text.replace(" ", "").split(",") if part]


async def _hints(store: Any, owner: uuid.UUID, question: str, budget: int, *, turns_only: bool) -> str:
    include: tuple[Any, ...] = ("turns",) if turns_only else ("memories", "turns")
    asked = ContextRecall(
        user_id=owner, persona_id=None, team_id=None, query=question, limit=HINT_RECALL_LIMIT, include=include
    )
    return await hint_in_context(store, asked, max_tokens=budget)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Ingest each dev conversation once, then score every floor × budget and turns alone."""
    from config import load_settings
    from evaluation.cache import CachingEmbedder
    from evaluation.runner import extraction_pipeline
    from evaluation.stores import fresh_store
    from extraction.embeddings import build_embedder, close_embedder

    everything = load_locomo(args.file)
    conversations = select_split(everything, "dev")[: args.max_conversations]
    settings = load_settings(embedding_provider="local")
    embedder = CachingEmbedder(build_embedder(settings), batch_size=settings.embedding_batch_size)
    cache = args.embedding_cache / "local-all-MiniLM-L6-v2-384.npz" if args.embedding_cache else None
    if cache is not None and cache.exists():
        embedder.load(cache)
    floors: list[float] = _numbers(args.floors, float)
    budgets: list[int] = _numbers(args.budget, int)
    results: dict[str, list[QuestionResult]] = {}
    async with AsyncExitStack() as stack:
        stack.push_async_callback(close_embedder, embedder.inner)
        await embedder.inner.embed(["warm-up"])
        store = await fresh_store(embedder, stack, kind=args.store)
        pipeline = extraction_pipeline(
            settings, store, embedder, reference=everything if args.extractor == "reference" else None
        )
        stack.push_async_callback(pipeline.deps.extractor.close)
        for conversation in conversations:
            owner = uuid.uuid4()
            await ingest(store, pipeline.deps, conversation, owner)
            index = session_index(conversation, owner)
            turn_texts = {dia: text for turns in index.by_channel.values() for dia, text in turns}
            for budget in budgets:
                for question in conversation.questions:
                    alone = await _hints(store, owner, question.question, budget, turns_only=True)
                    results.setdefault(f"turns alone@{budget}", []).append(
                        hint_result(question, alone, turn_texts)
                    )
                    for floor in floors:
                        hint_rules.FACT_RELEVANCE_FLOOR = floor
                        hint = await _hints(store, owner, question.question, budget, turns_only=False)
                        results.setdefault(f"floor {floor}@{budget}", []).append(
                            hint_result(question, hint, turn_texts)
                        )
            print(f"{conversation.sample_id}: done", file=sys.stderr, flush=True)
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            embedder.save(cache)
    return {
        "extractor": args.extractor,
        "store": args.store,
        "conversations": [c.sample_id for c in conversations],
        "rows": {row: summarise(scored, (1,)) for row, scored in results.items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sweep and print R@1 / A@1 per row."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--extractor", choices=("rules", "reference"), default="rules")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--floors", default="0.3,0.4,0.5,0.6,1.1", help="candidate floors (1.1: never)")
    parser.add_argument("--budget", default="500,1000,2000")
    parser.add_argument("--max-conversations", type=int, default=None)
    parser.add_argument("--embedding-cache", type=Path, default=Path(".pmem") / "eval-cache")
    parser.add_argument("--json", type=Path, default=None, help="write the table here")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    for row, summary in sorted(report["rows"].items(), key=lambda kv: (int(kv[0].split("@")[1]), kv[0])):
        print(f"{row:>20}  R@1 {summary['recall@1']:.3f}  A@1 {summary.get('answer_recall@1', 0.0):.3f}")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
