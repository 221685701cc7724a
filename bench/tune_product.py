"""The product's recall constants on the LoCoMo `dev` split only (chosen here, reported on `test`):
every dev session through the real per-event pipeline (rules extractor unless PMEM_EXTRACTOR says
otherwise) into a fresh store, then every dev question through the product's recall, as
`pmem eval locomo --unit product` does.

    python bench/tune_product.py /path/to/locomo10.json [--store postgres|sqlite]
        [--turn-context 0,1,2,3] [--evidence-weight 0,0.5,1,2] [--fusion K:MEMORY:TURN ...]
        [--json-out bench/results/tune_product_dev.json]

Three stages, each on the best of the one before: the turn context window (how many turns before a
turn its embedding carries; include=turns), the evidence weight in a memory's embedding
(include=memories), then the memory-vs-turn fusion (include=both, query time only: one ingestion
serves every fusion variant). Scored on evidence R@10 and answer recall@10; a variant is better when
the sum of the two is higher. Embeddings are cached in .pmem/eval-cache."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import store.context_recall
import worker.pipeline
from worker.commands.evaluate import (
    DEFAULT_EMBEDDING_CACHE,
    CachingEmbedder,
    EvalOptions,
    _cache_file,
    _extraction_pipeline,
    _open_store,
    local_embedder_available,
    resolve_embedding_provider,
)
from worker.evaluation import product_run
from worker.evaluation.locomo import Conversation, load_locomo, select_split, summarise
from worker.evaluation.product import Include

KS = (5, 10, 25, 50)


@dataclass(frozen=True, kw_only=True)
class Fusion:
    """The memory-vs-turn merge: each item scores `weight / (k + its rank in its own list)`."""

    k: int
    memory_weight: float
    turn_weight: float

    @property
    def label(self) -> str:
        """`k=10 memory=1.5 turn=1.0`."""
        return f"k={self.k} memory={self.memory_weight:g} turn={self.turn_weight:g}"


def parse_fusion(text: str) -> Fusion:
    """`K:MEMORY:TURN` → Fusion."""
    k, memory, turn = text.split(":")
    return Fusion(k=int(k), memory_weight=float(memory), turn_weight=float(turn))


@contextmanager
def ingestion(turn_context: int, evidence_weight: float) -> Iterator[None]:
    """The pipeline with these ingestion constants for the duration."""
    saved_context = worker.pipeline.TURN_CONTEXT
    saved_split = worker.pipeline.split_embeddings
    worker.pipeline.TURN_CONTEXT = turn_context
    worker.pipeline.split_embeddings = functools.partial(saved_split, evidence_weight=evidence_weight)  # type: ignore[assignment]
    try:
        yield
    finally:
        worker.pipeline.TURN_CONTEXT = saved_context
        worker.pipeline.split_embeddings = saved_split  # type: ignore[assignment]


@contextmanager
def fused(fusion: Fusion) -> Iterator[None]:
    """Recall merging memories and turns with `fusion` for the duration."""
    saved = store.context_recall.merge_recall
    store.context_recall.merge_recall = functools.partial(  # type: ignore[assignment]
        saved, memory_weight=fusion.memory_weight, turn_weight=fusion.turn_weight, k=fusion.k
    )
    try:
        yield
    finally:
        store.context_recall.merge_recall = saved  # type: ignore[assignment]


def score(results: Sequence[Any]) -> dict[str, float]:
    """Evidence R@k and answer recall@k over the results (the official scoring)."""
    summary = summarise(results, KS)
    return {f"R@{k}": summary[f"recall@{k}"] for k in KS} | {
        f"A@{k}": summary[f"answer_recall@{k}"] for k in KS
    }


async def ingest_all(
    options: EvalOptions,
    conversations: Sequence[Conversation],
    stack: AsyncExitStack,
    embedder: CachingEmbedder,
) -> tuple[Any, dict[str, uuid.UUID]]:
    """A fresh store holding every conversation, one owner each (with the ingestion constants in force)."""
    from worker.settings import load_settings

    settings = load_settings(embedding_provider=options.embedding_provider)
    opened = await _open_store(options, embedder, stack)
    pipeline = _extraction_pipeline(settings, opened, embedder)
    owners: dict[str, uuid.UUID] = {}
    for conversation in conversations:
        owner = uuid.uuid4()
        await product_run.ingest(opened, pipeline.deps, conversation, owner)
        owners[conversation.sample_id] = owner
    return opened, owners


async def ask_all(
    opened: Any, conversations: Sequence[Conversation], owners: dict[str, uuid.UUID], include: Include
) -> dict[str, float]:
    """Every question through the product's recall; the scores."""
    results = []
    for conversation in conversations:
        run = await product_run.ask(
            opened,
            conversation,
            owners[conversation.sample_id],
            include=include,
            limit=max(KS),
            concurrency=8,
        )
        results.extend(run.results)
    return score(results)


def better(a: dict[str, float], b: dict[str, float] | None) -> bool:
    """`a` beats `b` on R@10 + A@10."""
    return b is None or a["R@10"] + a["A@10"] > b["R@10"] + b["A@10"]


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    """Run the three stages; the document written to --json-out."""
    from extraction.embeddings import build_embedder, close_embedder
    from worker.settings import load_settings

    provider = resolve_embedding_provider(None, {}, local_embedder_available())
    options = EvalOptions(
        file=args.file,
        unit="product",
        ks=KS,
        retrievers=("hybrid",),
        embedding_provider=provider,
        database_url=None,
        data_dir=args.data_dir,
        store=args.store,
        embedding_cache=DEFAULT_EMBEDDING_CACHE,
        split="dev",
    )
    conversations = select_split(load_locomo(args.file), "dev")
    settings = load_settings(embedding_provider=provider)
    embedder = CachingEmbedder(build_embedder(settings), batch_size=settings.embedding_batch_size)
    cache_file = _cache_file(options, settings.embedding_model or "default", embedder.dim)
    if cache_file is not None:
        embedder.load(cache_file)
    tried: list[dict[str, Any]] = []

    def report(stage: str, label: str, include: str, scores: dict[str, float], seconds: float) -> None:
        tried.append({"stage": stage, "variant": label, "include": include, **scores})
        print(
            f"{stage:<16} {label:<34} {include:<9} R@10 {scores['R@10']:.3f}  A@10 {scores['A@10']:.3f}  "
            f"R@25 {scores['R@25']:.3f}  A@25 {scores['A@25']:.3f}  ({seconds:.0f} s)",
            flush=True,
        )

    async def stage_ingest(
        turn_context: int, evidence_weight: float, asks: Sequence[tuple[str, Include, Fusion | None]]
    ) -> list[dict[str, float]]:
        async with AsyncExitStack() as stack:
            start = time.monotonic()
            with ingestion(turn_context, evidence_weight):
                opened, owners = await ingest_all(options, conversations, stack, embedder)
            if cache_file is not None:
                embedder.save(cache_file)
            out = []
            for stage, include, fusion in asks:
                if fusion is None:
                    scores = await ask_all(opened, conversations, owners, include)
                else:
                    with fused(fusion):
                        scores = await ask_all(opened, conversations, owners, include)
                label = f"context {turn_context}, evidence {evidence_weight:g}" + (
                    f", {fusion.label}" if fusion else ""
                )
                report(stage, label, include, scores, time.monotonic() - start)
                start = time.monotonic()
                out.append(scores)
            return out

    try:
        best_context, best = args.turn_context[0], None
        for context in args.turn_context:
            (scores,) = await stage_ingest(
                context, args.evidence_weight[0], [("turn context", "turns", None)]
            )
            if better(scores, best):
                best_context, best = context, scores
        best_weight, best = args.evidence_weight[0], None
        for weight in args.evidence_weight:
            (scores,) = await stage_ingest(best_context, weight, [("evidence weight", "memories", None)])
            if better(scores, best):
                best_weight, best = weight, scores
        fusions = [parse_fusion(text) for text in args.fusion]
        asks: list[tuple[str, Include, Fusion | None]] = [
            ("fusion", "turns", None),
            ("fusion", "memories", None),
        ]
        asks += [("fusion", "both", fusion) for fusion in fusions]
        scored = await stage_ingest(best_context, best_weight, asks)
        best_fusion, best = None, None
        for fusion, scores in zip(fusions, scored[2:], strict=True):
            if better(scores, best):
                best_fusion, best = fusion, scores
    finally:
        await close_embedder(embedder.inner)
    chosen = {
        "turn_context": best_context,
        "evidence_weight": best_weight,
        "fusion": None if best_fusion is None else best_fusion.label,
    }
    print("chosen on dev:", json.dumps(chosen))
    return {"split": "dev", "store": args.store, "embedder": provider, "tried": tried, "chosen": chosen}


def main() -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", type=Path)
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--turn-context", type=lambda s: [int(x) for x in s.split(",")], default=[2, 0, 1, 3])
    parser.add_argument(
        "--evidence-weight", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 0.0, 0.5, 2.0]
    )
    parser.add_argument(
        "--fusion",
        nargs="+",
        default=["10:1.5:1", "10:1:1", "60:1:1", "10:0.75:1", "10:0.5:1", "60:0.5:1"],
        help="K:MEMORY_WEIGHT:TURN_WEIGHT variants of the memory-vs-turn merge",
    )
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    document = asyncio.run(main_async(args))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
