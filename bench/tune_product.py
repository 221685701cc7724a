"""The product's memory-vs-turn fusion, chosen on the LoCoMo `dev` split only and reported on `test`
and `all`, from ONE ingestion: every session of every conversation through the real per-event
pipeline (rules extractor unless PMEM_EXTRACTOR says otherwise) into a fresh store, as
`pmem eval locomo --unit product` does; then per question the product's two rankings, memories
and turns (`store.context_recall.items_in_context` with one include each, at depth 50).

The merged list recall returns is `store.turns.merge_recall` of exactly these two rankings (the
product's own function, pure), so every fusion variant is scored by merging them again with its
constants, without a store:

    python bench/tune_product.py /path/to/locomo10.json [--store postgres|sqlite] [--no-evidence]
        [--fusion K:MEMORY:TURN ...] [--json-out bench/results/tune_product_postgres.json]
        [--embedding-cache DIR]

The variant with the best dev R@10 + A@10 is chosen (ties: the best R@25 + A@25); its dev, test
and all figures are printed beside turns alone and memories alone. Embeddings are cached in
--embedding-cache (default .pmem/eval-cache, as `pmem eval`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import sys
import time
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from store.core.turns import ITEM_RRF_K, MEMORY_ITEM_WEIGHT, TURN_ITEM_WEIGHT, merge_recall
from store.model import RecallHit, RecallItem, TurnHit
from store.services.context_recall import ContextRecall, items_in_context
from worker.evaluation import product_run
from worker.evaluation.cache import CachingEmbedder, cache_file
from worker.evaluation.locomo import Conversation, QuestionResult, Split, load_locomo, split_of, summarise
from worker.evaluation.options import (
    DEFAULT_EMBEDDING_CACHE,
    EvalOptions,
    local_embedder_available,
    resolve_embedding_provider,
)
from worker.evaluation.product import question_result, session_index
from worker.evaluation.runner import extraction_pipeline
from worker.evaluation.stores import open_store

KS = (5, 10, 25, 50)
DEPTH = max(KS)


@dataclass(frozen=True, kw_only=True)
class Fusion:
    """The memory-vs-turn merge: each item scores `weight / (k + its rank in its own list)`."""

    k: int
    memory_weight: float
    turn_weight: float

    @property
    def label(self) -> str:
        """`k=10 memory=1.5 turn=1`."""
        return f"k={self.k} memory={self.memory_weight:g} turn={self.turn_weight:g}"


def parse_fusion(text: str) -> Fusion:
    """`K:MEMORY:TURN` → Fusion."""
    k, memory, turn = text.split(":")
    return Fusion(k=int(k), memory_weight=float(memory), turn_weight=float(turn))


@dataclass(frozen=True, kw_only=True)
class Asked:
    """One question's two rankings, as the product computed them."""

    conversation: Conversation
    owner: uuid.UUID
    index: int
    memories: tuple[RecallHit, ...]
    turns: tuple[TurnHit, ...]


def merged(asked: Asked, fusion: Fusion | None, include: str) -> list[RecallItem]:
    """The list recall returns for `include` (both: merged with `fusion`); the turn ranking holds
    each message once already (`store.turns.distinct_turns`)."""
    turns = asked.turns
    if include == "memories":
        return merge_recall(asked.memories, (), DEPTH)
    if include == "turns":
        return merge_recall((), turns, DEPTH)
    assert fusion is not None
    return merge_recall(
        asked.memories,
        turns,
        DEPTH,
        memory_weight=fusion.memory_weight,
        turn_weight=fusion.turn_weight,
        k=fusion.k,
    )


def scores(asked: Sequence[Asked], fusion: Fusion | None, include: str) -> dict[str, Any]:
    """Evidence R@k and answer recall@k (the official scoring) over `asked`, and per category."""
    results: list[QuestionResult] = []
    indexes = {}
    for item in asked:
        key = item.conversation.sample_id
        if key not in indexes:
            indexes[key] = session_index(item.conversation, item.owner)
        recalled = [product_run.recalled_of(entry) for entry in merged(item, fusion, include)]
        results.append(question_result(item.conversation.questions[item.index], recalled, indexes[key]))
    return summarise(results, KS)


def line(label: str, summary: dict[str, Any]) -> str:
    """One printed row."""
    cells = (
        "  ".join(f"R@{k} {summary[f'recall@{k}']:.3f}" for k in (10, 25))
        + "  "
        + "  ".join(f"A@{k} {summary[f'answer_recall@{k}']:.3f}" for k in (10, 25))
    )
    return f"{label:<44} {cells}"


async def collect(args: argparse.Namespace) -> tuple[list[Asked], dict[str, Split], dict[str, Any]]:
    """Ingest every conversation, then ask every question for both rankings."""
    from extraction.embeddings import build_embedder, close_embedder, embedding_identity
    from worker.settings import load_settings

    provider = resolve_embedding_provider(None, os.environ, local_embedder_available())
    options = EvalOptions(
        file=args.file,
        unit="product",
        ks=KS,
        retrievers=("hybrid",),
        embedding_provider=provider,
        database_url=None,
        data_dir=args.data_dir,
        store=args.store,
        embedding_cache=args.embedding_cache,
    )
    everything = load_locomo(args.file)
    split_by_id = {c.sample_id: split_of(i, len(everything)) for i, c in enumerate(everything)}
    settings = load_settings(embedding_provider=provider)
    embedder = CachingEmbedder(build_embedder(settings), batch_size=settings.embedding_batch_size)
    identity = embedding_identity(settings)
    cached = cache_file(options, identity.provider, identity.model, embedder.dim)
    if cached is not None:
        embedder.load(cached)
    asked: list[Asked] = []
    usage: list[dict[str, int]] = []
    async with AsyncExitStack() as stack:
        stack.push_async_callback(close_embedder, embedder.inner)
        opened = await open_store(options, embedder, stack)
        pipeline = extraction_pipeline(settings, opened, embedder, evidence=args.evidence)
        semaphore = asyncio.Semaphore(args.concurrency)
        wanted = everything
        if args.conversations:
            by_id = {c.sample_id: c for c in everything}
            wanted = [by_id[sid] for sid in args.conversations.split(",")]
        for conversation in wanted:
            start = time.monotonic()
            owner = uuid.uuid4()
            usage.extend(await product_run.ingest(opened, pipeline.deps, conversation, owner))
            if cached is not None:
                embedder.save(cached)

            async def both(query: str, owner: uuid.UUID = owner) -> tuple[list[RecallItem], list[RecallItem]]:
                async with semaphore:
                    asked = ContextRecall(
                        user_id=owner, persona_id=None, team_id=None, query=query, limit=DEPTH
                    )
                    memories = await items_in_context(opened, replace(asked, include=("memories",)))
                    turns = await items_in_context(opened, replace(asked, include=("turns",)))
                return memories, turns

            answers = await asyncio.gather(*(both(q.question) for q in conversation.questions))
            for index, (memories, turns) in enumerate(answers):
                asked.append(
                    Asked(
                        conversation=conversation,
                        owner=owner,
                        index=index,
                        memories=tuple(
                            RecallHit(memory=m.memory, score=m.score, sources=m.sources)
                            for m in memories
                            if m.memory is not None
                        ),
                        turns=tuple(
                            TurnHit(turn=t.turn, score=t.score, sources=t.sources)
                            for t in turns
                            if t.turn is not None
                        ),
                    )
                )
            if args.rankings is not None:
                # after every conversation: an interrupted run keeps what it measured
                with args.rankings.open("wb") as handle:
                    pickle.dump((asked, split_by_id, {"partial": True}), handle)
            print(
                f"{conversation.sample_id}: {len(conversation.questions)} questions "
                f"({time.monotonic() - start:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    written = sum(item["written"] for item in usage)
    meta = {"store": args.store, "evidence": args.evidence, "embedder": provider}
    return asked, split_by_id, {**meta, "events": len(usage), "memories_written": written}


def main() -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", type=Path)
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument(
        "--embedding-cache",
        type=Path,
        default=DEFAULT_EMBEDDING_CACHE,
        help="directory of saved vectors, shared with `pmem eval` (default .pmem/eval-cache)",
    )
    parser.add_argument("--evidence", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--fusion",
        nargs="+",
        default=[
            f"{ITEM_RRF_K}:{MEMORY_ITEM_WEIGHT}:{TURN_ITEM_WEIGHT}",
            "10:1:1", "10:0.75:1", "10:0.5:1", "10:0.25:1",
            "60:1.5:1", "60:1:1", "60:0.75:1", "60:0.5:1",
            "30:1:1", "30:0.5:1", "1:1:1", "1:0.5:1",
        ],
        help="K:MEMORY_WEIGHT:TURN_WEIGHT variants of the memory-vs-turn merge (the first: today's)",
    )  # fmt: skip
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--concurrency", type=int, default=8, help="questions in flight (SQLite: 1)")
    parser.add_argument(
        "--conversations", default=None, help="sample ids to ingest, in this order (default: every one)"
    )
    parser.add_argument(
        "--rankings",
        type=Path,
        default=None,
        help="a pickle of every question's two rankings: written after the ingestion, read instead of "
        "it when it exists (the scoring alone, again)",
    )
    args = parser.parse_args()
    if args.rankings is not None and args.rankings.exists():
        with args.rankings.open("rb") as handle:
            asked, split_by_id, meta = pickle.load(handle)
    else:
        asked, split_by_id, meta = asyncio.run(collect(args))
        if args.rankings is not None:
            with args.rankings.open("wb") as handle:
                pickle.dump((asked, split_by_id, meta), handle)
    of_split = {
        name: [a for a in asked if name == "all" or split_by_id[a.conversation.sample_id] == name]
        for name in ("dev", "test", "all")
    }
    measured = {
        name: sorted({a.conversation.sample_id for a in members}) for name, members in of_split.items()
    }
    print("conversations measured:", measured)
    if len(measured["all"]) < len(split_by_id):
        del of_split["all"]  # "all" is every conversation or nothing
    fusions = [parse_fusion(text) for text in args.fusion]
    print(meta)
    document: dict[str, Any] = {**meta, "conversations": measured}
    tried = []
    best: tuple[tuple[float, float], Fusion] | None = None
    for fusion in fusions:
        summary = scores(of_split["dev"], fusion, "both")
        tried.append({"fusion": fusion.label, "dev": summary})
        print(line(f"  dev both {fusion.label}", summary))
        # ties at 10 go to the variant better at 25 (facts that cost no recall deeper down)
        total = (
            summary["recall@10"] + summary["answer_recall@10"],
            summary["recall@25"] + summary["answer_recall@25"],
        )
        if best is None or total > best[0]:
            best = (total, fusion)
    assert best is not None
    chosen = best[1]
    print(f"chosen on dev: {chosen.label}")
    figures: dict[str, dict[str, Any]] = {}
    for name, members in of_split.items():
        if not members:
            continue
        figures[name] = {
            "both (chosen)": scores(members, chosen, "both"),
            "both (before)": scores(members, fusions[0], "both"),
            "turns": scores(members, None, "turns"),
            "memories": scores(members, None, "memories"),
        }
        for label, summary in figures[name].items():
            print(line(f"{name}: {label}", summary), flush=True)
    document["as_stored"] = {"tried_on_dev": tried, "chosen": chosen.label, "figures": figures}
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
