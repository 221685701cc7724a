"""Many `ScoreFusion` variants on one loaded LoCoMo split (dev only: constants are chosen here and
reported on test): the split's conversations are written once into a fresh store, then every
question is recalled (hybrid) once per variant. Faster than `tune_fusion.py`, which reloads the
store per variant; the figures are the same (`pmem eval locomo` runs the same recall).

    python bench/tune_recall.py /path/to/locomo10.json [--unit observation|dialog]
        [--store sqlite|postgres] [--split dev] [--dialog-context N]
        [--observation-context none|source] [--no-key-context] [--source-context N]
        [--dialog-key-after N]
        --variant "name: field=value field=value" ...

A variant is a name, a colon and `ScoreFusion` field assignments (Python literals; `default` is
the defaults). Embeddings come from the eval cache (.pmem/eval-cache)."""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import sys
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.locomo_dev import STORES, hybrid_options, locomo_parser, write_results
from evaluation.cache import CachingEmbedder, cache_file
from evaluation.locomo import (
    OBSERVATION_CONTEXTS,
    QuestionResult,
    load_locomo,
    select_split,
    summarise,
)
from evaluation.options import (
    DEFAULT_DIALOG_CONTEXT,
    DEFAULT_DIALOG_KEY_AFTER,
    DEFAULT_EMBEDDING_CACHE,
    DEFAULT_KEY_CONTEXT,
    DEFAULT_OBSERVATION_CONTEXT,
    DEFAULT_SOURCE_CONTEXT,
)
from evaluation.stores import evaluation_store
from evaluation.units import unit_key_contexts, unit_memories, unit_vectors
from store.postgres.backend import PgBackend
from store.rules.recall import ScoreFusion

_FIELDS = {f.name for f in fields(ScoreFusion)}


def parse_variant(spec: str) -> tuple[str, ScoreFusion]:
    """`"name: a=1 b=0.5"` → (name, ScoreFusion(a=1, b=0.5))."""
    name, _, assignments = spec.partition(":")
    values: dict[str, Any] = {}
    for part in assignments.split():
        if part == "default":
            continue
        key, _, raw = part.partition("=")
        if key not in _FIELDS:
            raise SystemExit(f"unknown ScoreFusion field {key!r}")
        values[key] = ast.literal_eval(raw)
    return name.strip(), replace(ScoreFusion(), **values)


def rank_with(store: Any, fusion: ScoreFusion) -> None:
    """Make `store` rank its next recalls with `fusion`: the Postgres store's backend ranks through
    its `PgRecall`, the SQLite store's backend itself; either keeps the fusion it was opened with."""
    backend = store.backend
    ranker = backend.recall if isinstance(backend, PgBackend) else backend
    if not isinstance(getattr(ranker, "_fusion", None), ScoreFusion):
        kind = type(ranker).__name__
        raise SystemExit(f"{kind} keeps no ScoreFusion in _fusion: the variants would not apply")
    ranker._fusion = fusion


async def main(argv: list[str] | None = None) -> int:
    parser = locomo_parser(__doc__)
    parser.add_argument("--store", default="sqlite", choices=STORES)
    parser.add_argument("--split", default="dev", choices=["dev", "test", "all"])
    parser.add_argument("--dialog-context", type=int, default=DEFAULT_DIALOG_CONTEXT)
    parser.add_argument(
        "--observation-context", choices=OBSERVATION_CONTEXTS, default=DEFAULT_OBSERVATION_CONTEXT
    )
    parser.add_argument("--key-context", action=argparse.BooleanOptionalAction, default=DEFAULT_KEY_CONTEXT)
    parser.add_argument("--source-context", type=int, default=DEFAULT_SOURCE_CONTEXT)
    parser.add_argument("--dialog-key-after", type=int, default=DEFAULT_DIALOG_KEY_AFTER)
    parser.add_argument("--variant", action="append", required=True)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    variants = [parse_variant(spec) for spec in args.variant]
    options = hybrid_options(
        args,
        split=args.split,
        store=args.store,
        embedding_cache=DEFAULT_EMBEDDING_CACHE,
        dialog_context=args.dialog_context,
        observation_context=args.observation_context,
        key_context=args.key_context,
        source_context=args.source_context,
        dialog_key_after=args.dialog_key_after,
    )
    from config import load_settings
    from extraction.embeddings import build_embedder, embedding_identity

    settings = load_settings(embedding_provider=options.embedding_provider)
    embedder = CachingEmbedder(build_embedder(settings), batch_size=settings.embedding_batch_size)
    identity = embedding_identity(settings)  # PMEM_EMBEDDING_MODEL picks the local model
    cached = cache_file(options, identity.provider, identity.model, embedder.dim)
    assert cached is not None
    embedder.load(cached)
    conversations = select_split(load_locomo(options.file), options.split)
    results: dict[str, Any] = {}
    async with AsyncExitStack() as stack:
        store = await evaluation_store(options, embedder, stack)
        loaded = []
        for conversation in conversations:
            owner = uuid.uuid4()
            units = conversation.units(options.unit)
            vectors = await unit_vectors(embedder, conversation, options)
            memories = unit_memories(units, owner, vectors, unit_key_contexts(conversation, options))
            dia_ids: dict[uuid.UUID, tuple[str, ...]] = {}
            for start in range(0, len(memories), 256):
                written = await store.writes.write_event(
                    event_id=uuid.uuid4(), memories=memories[start : start + 256], actor="tune"
                )
                for unit, result in zip(units[start : start + 256], written.results, strict=True):
                    dia_ids[result.memory_id] = unit.dia_ids
            await embedder.embed_queries([q.question for q in conversation.questions])
            loaded.append((owner, conversation, dia_ids))
        embedder.save(cached)
        for name, fusion in variants:
            rank_with(store, fusion)
            started = time.monotonic()
            items: list[QuestionResult] = []
            for owner, conversation, dia_ids in loaded:
                semaphore = asyncio.Semaphore(8)

                async def ask(
                    question: str, owner: uuid.UUID = owner, semaphore: asyncio.Semaphore = semaphore
                ) -> list[Any]:
                    async with semaphore:
                        return list(await store.recall(owner, None, question, 50, retriever="hybrid"))

                answers = await asyncio.gather(*(ask(q.question) for q in conversation.questions))
                items.extend(
                    QuestionResult(
                        category=q.category,
                        evidence=q.evidence,
                        ranked=tuple(dia_ids.get(hit.memory.id, ()) for hit in hits),
                    )
                    for q, hits in zip(conversation.questions, answers, strict=True)
                )
            summary = summarise(items, options.ks)
            results[name] = {
                **{k: round(v, 4) for k, v in summary.items() if k.startswith("recall@")},
                "by_category@10": {c: round(e["recall@10"], 3) for c, e in summary["by_category"].items()},
                "seconds": round(time.monotonic() - started, 1),
            }
            print(f"{name:<36}", json.dumps(results[name]), flush=True)
    write_results(results, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
