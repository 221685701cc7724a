"""The checkpoint of an `extracted` run: finished conversations' results, so an interrupted run
resumes where it stopped."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.locomo import QuestionResult
from evaluation.options import EvalOptions


def checkpoint_file(options: EvalOptions, settings: Any) -> Path | None:
    """Where an extracted-unit run keeps finished conversations (None: other units, or no cache)."""
    if options.unit != "extracted" or options.embedding_cache is None:
        return None
    extractor = options.extractor or settings.effective_extractor
    model = settings.llm_model if extractor == "llm" else extractor
    data = options.file.resolve()
    stamp = f"{data.name}-{data.stat().st_size if data.exists() else 0}"
    name = (
        f"extracted-{stamp}-{options.split}-{options.store}-{extractor}-{model}-"
        f"{options.embedding_provider}-{'-'.join(options.retrievers)}-k{max(options.ks)}"
    ).replace("/", "_")
    return options.embedding_cache / f"{name}.json"


def load_checkpoint(
    path: Path, options: EvalOptions
) -> tuple[dict[str, dict[str, list[QuestionResult]]], dict[str, list[dict[str, int]]]]:
    """Finished conversations of an interrupted run (nothing when the file is missing or unreadable)."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}, {}
    results = {
        sid: {
            retriever: [
                QuestionResult(
                    category=item["category"],
                    evidence=tuple(item["evidence"]),
                    ranked=(),
                    answer=item["answer"],
                    texts=tuple(item["texts"]),
                )
                for item in items
            ]
            for retriever, items in per_retriever.items()
        }
        for sid, per_retriever in saved.get("results", {}).items()
        if set(per_retriever) >= set(options.retrievers)
    }
    usage = {sid: saved.get("usage", {}).get(sid, []) for sid in results}
    return results, usage


def save_checkpoint(
    path: Path,
    results: Mapping[str, Mapping[str, Sequence[QuestionResult]]],
    usage: Mapping[str, Sequence[Mapping[str, int]]],
) -> None:
    """Write finished conversations' results and extraction usage to `path` (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "results": {
            sid: {
                retriever: [
                    {
                        "category": r.category,
                        "evidence": list(r.evidence),
                        "answer": r.answer,
                        "texts": list(r.texts or ()),
                    }
                    for r in items
                ]
                for retriever, items in per_retriever.items()
            }
            for sid, per_retriever in results.items()
        },
        "usage": {sid: list(items) for sid, items in usage.items()},
    }
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(document))
    partial.replace(path)
