"""How recall merges memories and turns (`store.rules.turn_recall.ItemMerge`), chosen on the LoCoMo `dev`
split only and reported on `test` and `all`, from ONE ingestion: every session of every
conversation through the real per-event pipeline into a fresh store, as `pmem eval locomo --unit
product` does, with the configured extractor (PMEM_EXTRACTOR; rules offline) or `--extractor
reference` (LoCoMo's own observations, facts as a capable model writes them); then per question the
product's two rankings, memories and turns (`store.context_recall.items_in_context` with one
include each, at depth 50).

The merged list recall returns is `store.rules.turn_recall.merge_recall` of exactly these two rankings
(the product's own function, pure), so every variant of the memories' lead is scored by merging
them again, without a store:

    python bench/tune_product.py /path/to/locomo10.json [--extractor reference] [--store sqlite]
        [--no-evidence] [--merge MARGIN:MAX ...] [--json-out FILE] [--embedding-cache DIR]
        [--rankings FILE.pkl]

The variant with the best dev R@10 + A@10 is chosen (ties: the best R@20 + A@20); dev, test and
all figures of the product's merge, the chosen one and no lead are printed beside turns alone and
memories alone, with how many facts and turns the default hint (limit 20) holds. Embeddings are
cached in --embedding-cache (default .pmem/eval-cache, as `pmem eval`)."""

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

from evaluation import product_run
from evaluation.cache import CachingEmbedder, cache_file
from evaluation.locomo import Conversation, QuestionResult, Split, load_locomo, split_of, summarise
from evaluation.options import (
    DEFAULT_EMBEDDING_CACHE,
    EvalOptions,
    local_embedder_available,
    resolve_embedding_provider,
)
from evaluation.product import question_result, session_index
from evaluation.runner import extraction_pipeline
from evaluation.stores import evaluation_store
from store.model import RecallHit, RecallItem, TurnHit
from store.rules.hint import EARLIER_HEADER, build_hint
from store.rules.turn_recall import ITEM_MERGE, ItemMerge, merge_recall
from store.services.context_recall import ContextRecall, items_in_context

KS = (10, 20)
DEPTH = 50  # each ranking as recalled: deeper than any list it is merged into


def parse_merge(text: str) -> ItemMerge:
    """`MARGIN:MAX` → the lead of `store.rules.turn_recall.ItemMerge` (`none`: no memory leads)."""
    if text == "none":
        return ItemMerge(lead_margin=None)
    margin, most = text.split(":")
    return ItemMerge(lead_margin=float(margin), lead_max=int(most))


def merge_label(merge: ItemMerge) -> str:
    """`lead margin=0.1 max=5`, or `no lead` (ranks only)."""
    if merge.lead_margin is None:
        return f"no lead (k={merge.k} memory={merge.memory_weight:g} turn={merge.turn_weight:g})"
    return f"lead margin={merge.lead_margin:g} max={merge.lead_max}"


@dataclass(frozen=True, kw_only=True)
class Asked:
    """One question's two rankings, as the product computed them."""

    conversation: Conversation
    owner: uuid.UUID
    index: int
    memories: tuple[RecallHit, ...]
    turns: tuple[TurnHit, ...]


def merged(asked: Asked, merge: ItemMerge | None, include: str, limit: int) -> list[RecallItem]:
    """The list recall returns at `limit` for `include` (both: merged by `merge`); the turn ranking
    holds each message once already (`store.turns.distinct_turns`)."""
    if include == "memories":
        return merge_recall(asked.memories, (), limit)
    if include == "turns":
        return merge_recall((), asked.turns, limit)
    assert merge is not None
    return merge_recall(asked.memories, asked.turns, limit, merge=merge)


def scores(asked: Sequence[Asked], merge: ItemMerge | None, include: str) -> dict[str, Any]:
    """Evidence R@k and answer recall@k (the official scoring) over `asked`, and per category, each
    k from the list recall returns at limit k."""
    indexes = {}
    summary: dict[str, Any] = {}
    for k in KS:
        results: list[QuestionResult] = []
        for item in asked:
            key = item.conversation.sample_id
            if key not in indexes:
                indexes[key] = session_index(item.conversation, item.owner)
            recalled = [product_run.recalled_of(entry) for entry in merged(item, merge, include, k)]
            results.append(question_result(item.conversation.questions[item.index], recalled, indexes[key]))
        at_k = summarise(results, (k,))
        summary.update({name: value for name, value in at_k.items() if name != "by_category"})
        summary.setdefault("by_category", {})
        for category, figures in at_k.get("by_category", {}).items():
            summary["by_category"].setdefault(category, {}).update(figures)
    return summary


def composition(asked: Sequence[Asked], merge: ItemMerge, limit: int) -> dict[str, float]:
    """Per question on average, how many facts and turns the hint of the list at `limit` holds
    (`store.rules.hint.build_hint`: every fact that fits, at most `HINT_TURNS` turns)."""
    facts = turns = 0
    for item in asked:
        hint = build_hint(merged(item, merge, "both", limit))
        known, _, earlier = hint.partition(EARLIER_HEADER)
        facts += sum(1 for line in known.splitlines() if line.startswith("- "))
        turns += sum(1 for line in earlier.splitlines() if line.startswith("- "))
    return {"facts": facts / max(1, len(asked)), "turns": turns / max(1, len(asked))}


def line(label: str, summary: dict[str, Any]) -> str:
    """One printed row."""
    cells = (
        "  ".join(f"R@{k} {summary[f'recall@{k}']:.3f}" for k in KS)
        + "  "
        + "  ".join(f"A@{k} {summary[f'answer_recall@{k}']:.3f}" for k in KS)
    )
    return f"{label:<44} {cells}"


async def collect(args: argparse.Namespace) -> tuple[list[Asked], dict[str, Split], dict[str, Any]]:
    """Ingest every conversation, then ask every question for both rankings."""
    from config import load_settings
    from extraction.embeddings import build_embedder, close_embedder, embedding_identity

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
        opened = await evaluation_store(options, embedder, stack)
        pipeline = extraction_pipeline(
            settings,
            opened,
            embedder,
            evidence=args.evidence,
            reference=everything if args.extractor == "reference" else None,
        )
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
                            RecallHit(memory=m.memory, score=m.score, sources=m.sources, cosine=m.cosine)
                            for m in memories
                            if m.memory is not None
                        ),
                        turns=tuple(
                            TurnHit(turn=t.turn, score=t.score, sources=t.sources, cosine=t.cosine)
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
    meta = {"store": args.store, "evidence": args.evidence, "embedder": provider, "extractor": args.extractor}
    return asked, split_by_id, {**meta, "events": len(usage), "memories_written": written}


def main() -> int:  # noqa: PLR0915 - a benchmark's script read top to bottom: arguments, grid, runs, report
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
        "--extractor",
        choices=("configured", "reference"),
        default="configured",
        help="configured (PMEM_EXTRACTOR, rules offline) or reference (LoCoMo's own observations)",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        default=["none", *(f"{m}:{n}" for m in (0, 0.05, 0.1, 0.15, 0.2) for n in (3, 5, 8))],
        help="MARGIN:MAX variants of the memories' lead (`store.rules.turn_recall.ItemMerge`; none: no "
        "lead, the merge by rank alone as before)",
    )
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
    merges = [parse_merge(text) for text in args.merge]
    print(meta)
    document: dict[str, Any] = {**meta, "conversations": measured}
    tried = []
    best: tuple[tuple[float, float], ItemMerge] | None = None
    for merge in merges:
        summary = scores(of_split["dev"], merge, "both")
        tried.append({"merge": merge_label(merge), "dev": summary})
        print(line(f"  dev both {merge_label(merge)}", summary))
        # ties at 10 go to the variant better at 20 (the API's default limit)
        total = (
            summary["recall@10"] + summary["answer_recall@10"],
            summary["recall@20"] + summary["answer_recall@20"],
        )
        if best is None or total > best[0]:
            best = (total, merge)
    assert best is not None
    chosen = best[1]
    print(f"chosen on dev: {merge_label(chosen)}; the product's: {merge_label(ITEM_MERGE)}")
    figures: dict[str, dict[str, Any]] = {}
    hints: dict[str, dict[str, float]] = {}
    for name, members in of_split.items():
        if not members:
            continue
        figures[name] = {
            "both (product)": scores(members, ITEM_MERGE, "both"),
            "both (chosen)": scores(members, chosen, "both"),
            "both (no lead)": scores(members, ItemMerge(lead_margin=None), "both"),
            "turns": scores(members, None, "turns"),
            "memories": scores(members, None, "memories"),
        }
        hints[name] = {
            "product": composition(members, ITEM_MERGE, 20),
            "no lead": composition(members, ItemMerge(lead_margin=None), 20),
        }
        for label, summary in figures[name].items():
            print(line(f"{name}: {label}", summary), flush=True)
        print(f"{name}: the default hint (limit 20) holds, per question: {hints[name]}")
    document["as_stored"] = {
        "tried_on_dev": tried,
        "chosen": merge_label(chosen),
        "product": merge_label(ITEM_MERGE),
        "figures": figures,
        "hint_at_limit_20": hints,
    }
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
