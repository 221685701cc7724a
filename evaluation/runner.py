"""`run_locomo`: a LoCoMo evaluation through the real store and the real recall.

Each conversation's units (observations or dialog turns) become active `user`-scope memories of a
fresh owner, or (`extracted`) its sessions go through the worker's extraction pipeline and a
reviewer approves what it proposes, or (`product`) the product runs as a user runs it
(`evaluation.product_run`); every QA question then goes through `recall` at max(k) and is
scored the official way, plus answer recall (`evaluation.locomo`)."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from evaluation import hint_run, product_run
from evaluation.cache import CachingEmbedder, ConcatenatedEmbedder, cache_file
from evaluation.checkpoint import checkpoint_file, load_checkpoint, save_checkpoint
from evaluation.extracted import session_events, usage_summary, without_evidence_recall
from evaluation.locomo import (
    Conversation,
    QuestionResult,
    load_locomo,
    select_split,
    split_of,
    summarise,
)
from evaluation.options import PIPELINE_UNITS, EvalError, EvalOptions
from evaluation.product import kinds_count
from evaluation.progress import Progress
from evaluation.report import has_questions, report_json
from evaluation.stores import evaluation_store
from evaluation.units import unit_key_contexts, unit_memories, unit_vectors
from store.model import Retriever

_WRITE_BATCH = 256


async def evaluate_units(
    store: Any,
    embedder: CachingEmbedder,
    conversation: Conversation,
    options: EvalOptions,
    progress: Progress,
) -> dict[str, list[QuestionResult]]:
    """Write the conversation's units as memories of a fresh owner, then ask every question through
    each retriever; the results by retriever."""
    owner = uuid.uuid4()
    if options.unit != "observation" and options.unit != "dialog":
        raise EvalError(f"{options.unit} memories go through the extraction pipeline, not unit loading")
    units = conversation.units(options.unit)
    label = f"{conversation.sample_id}: loading {options.unit}s"
    progress.update(0, label)
    vectors = await unit_vectors(embedder, conversation, options, lambda n: progress.update(n, label))
    memories = unit_memories(units, owner, vectors, unit_key_contexts(conversation, options))
    dia_ids: dict[uuid.UUID, tuple[str, ...]] = {}
    for start in range(0, len(memories), _WRITE_BATCH):
        batch = memories[start : start + _WRITE_BATCH]
        written = await store.writes.write_event(event_id=uuid.uuid4(), memories=batch, actor="pmem-eval")
        for unit, result in zip(units[start : start + _WRITE_BATCH], written.results, strict=True):
            dia_ids[result.memory_id] = unit.dia_ids
        progress.update(len(batch), label)
    if len(dia_ids) != len(units):
        raise EvalError(
            f"{conversation.sample_id}: wrote {len(units)} units but got {len(dia_ids)} distinct memories; "
            "unit keys must be unique per owner"
        )

    await embedder.embed_queries([q.question for q in conversation.questions])
    results = await ask_questions(
        store,
        owner,
        conversation,
        options,
        progress,
        text_of=lambda hit: hit.memory.value,
        units_of=lambda hit: dia_ids.get(hit.memory.id, ()),
    )

    if not options.keep and options.database_url is not None:
        # an external database: leave nothing behind
        ids = list(dia_ids)
        for start in range(0, len(ids), 64):
            await asyncio.gather(
                *(store.erasure.delete(i, actor="pmem-eval") for i in ids[start : start + 64])
            )
    return results


async def run_locomo(options: EvalOptions, *, progress_stream: TextIO | None = None) -> dict[str, Any]:  # noqa: PLR0915 - one evaluation run in order: load, split, each conversation, score, report
    """Load LoCoMo, evaluate the split's conversations through the real store, return the `--json`
    report (with `--split all`, the dev and test halves too)."""
    everything = load_locomo(options.file)
    split_by_id = {c.sample_id: split_of(i, len(everything)) for i, c in enumerate(everything)}
    conversations = select_split(everything, options.split)
    if options.max_conversations is not None:
        conversations = conversations[: options.max_conversations]

    from config import load_settings
    from extraction.embeddings import build_embedder, close_embedder, embedding_identity

    overrides: dict[str, Any] = {"embedding_provider": options.embedding_provider}
    if options.embedding_model is not None:
        overrides["embedding_model"] = options.embedding_model
    settings = load_settings(**overrides)
    part_settings = [settings]
    if options.fuse_embedding_model is not None:
        part_settings.append(
            load_settings(embedding_provider="local", embedding_model=options.fuse_embedding_model)
        )
    parts: list[tuple[CachingEmbedder, Path | None]] = []
    for each in part_settings:
        part = CachingEmbedder(build_embedder(each), batch_size=each.embedding_batch_size)
        identity = embedding_identity(each)
        part_cache = cache_file(options, identity.provider, identity.model, part.dim)
        if part_cache is not None:
            part.load(part_cache)
        parts.append((part, part_cache))
    embedder = parts[0][0]
    if len(parts) > 1:
        embedder = CachingEmbedder(ConcatenatedEmbedder(tuple(part for part, _ in parts)))
    per_conversation: dict[str, dict[str, list[QuestionResult]]] = {}
    usage: dict[str, list[dict[str, int]]] = {}
    checkpoint = checkpoint_file(options, settings)
    if checkpoint is not None:
        per_conversation, usage = load_checkpoint(checkpoint, options)

    async with AsyncExitStack() as stack:
        for part, _ in parts:
            stack.push_async_callback(close_embedder, part.inner)  # an HTTP embedder's session
            # load the model now: SQLite's recall holds its one connection while it embeds the
            # query, and a model loading there (torch, seconds on a busy machine) would time the
            # other recalls in flight out of the pool
            await part.inner.embed(["warm-up"])
        store = await evaluation_store(options, embedder, stack)
        pipeline = (
            extraction_pipeline(
                settings,
                store,
                embedder,
                evidence=options.evidence,
                reference=everything if options.extractor == "reference" else None,
            )
            if options.unit in PIPELINE_UNITS
            else None
        )
        if pipeline is not None:
            stack.push_async_callback(pipeline.deps.extractor.close)
        todo = [c for c in conversations if c.sample_id not in per_conversation]
        total = sum(work_steps(c, options) for c in todo)
        progress = Progress(total=total, stream=progress_stream or sys.stderr)
        if len(todo) < len(conversations):
            progress.stream.write(
                f"resuming: {len(conversations) - len(todo)} conversation(s) done in {checkpoint}\n"
            )
        composition: dict[str, list[tuple[Any, ...]]] = {}
        hint_records: list[dict[str, Any]] = []
        for conversation in todo:
            if pipeline is not None and options.unit == "hint":
                hinted = await hint_run.run_conversation(
                    store,
                    pipeline.deps,
                    conversation,
                    budgets=options.budgets,
                    concurrency=options.concurrency,
                    on_step=lambda label: progress.update(1, label),
                )
                per_conversation[conversation.sample_id] = hinted.results
                usage[conversation.sample_id] = list(hinted.usage)
                hint_records.extend(hinted.hints)
            elif pipeline is not None and options.unit == "product":
                runs = await product_run.run_conversation(
                    store,
                    pipeline.deps,
                    conversation,
                    includes=options.include,
                    limit=max(options.ks),
                    concurrency=options.concurrency,
                    on_step=lambda label: progress.update(1, label),
                )
                per_conversation[conversation.sample_id] = {
                    include: list(run.results) for include, run in runs.items()
                }
                usage[conversation.sample_id] = list(runs[options.include[0]].usage)
                for include, run in runs.items():
                    composition.setdefault(include, []).extend(run.recalled)
            elif pipeline is not None:
                results, used = await evaluate_extracted(store, pipeline, conversation, options, progress)
                per_conversation[conversation.sample_id] = results
                usage[conversation.sample_id] = used
            else:
                per_conversation[conversation.sample_id] = await evaluate_units(
                    store, embedder, conversation, options, progress
                )
            for part, part_cache in parts:
                if part_cache is not None:
                    part.save(part_cache)
            if checkpoint is not None:
                save_checkpoint(checkpoint, per_conversation, usage)
        progress.close()
    if options.hints_out is not None:
        write_hints(options.hints_out, hint_records)

    # one row per retriever, for the product unit per include, for the hint unit per kind and budget
    rows: Sequence[str] = options.retrievers
    if options.unit == "product":
        rows = options.include
    elif options.unit == "hint":
        rows = hint_run.row_names(options.budgets)

    def summaries_of(sample_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        summaries = {
            r: summarise([item for sid in sample_ids for item in per_conversation[sid][r]], options.ks)
            for r in rows
        }
        if options.unit == "product" and not options.evidence and "memories" in summaries:
            # bare memories stand for no dialog turn: evidence recall would only count the
            # questions without evidence
            summaries["memories"] = without_evidence_recall(summaries["memories"])
        return summaries

    ids = [c.sample_id for c in conversations]
    if options.unit == "extracted":
        plain = summaries_of

        def summaries_of(sample_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
            return {r: without_evidence_recall(summary) for r, summary in plain(sample_ids).items()}

    by_split = None
    if options.split == "all":
        by_split = {
            name: summaries_of([sid for sid in ids if split_by_id[sid] == name]) for name in ("dev", "test")
        }
        by_split = {name: per for name, per in by_split.items() if per and has_questions(per)}
    provider = " + ".join(
        f"{identity.provider} ({identity.model})" for identity in map(embedding_identity, part_settings)
    )
    report = report_json(
        questions=sum(len(c.questions) for c in conversations),
        unit=options.unit,
        embedder=provider,
        summaries=summaries_of(ids),
        split=options.split,
        store=options.store,
        conversations=ids,
        by_split=by_split,
    )
    if options.unit == "product":
        report["include"] = list(options.include)
        report["evidence"] = options.evidence
        report["top_10_kinds"] = {include: kinds_count(items, 10) for include, items in composition.items()}
    if options.unit == "hint":
        report["budgets"] = list(options.budgets)
        report["hint_recall_limit"] = hint_run.HINT_RECALL_LIMIT
    if options.unit in PIPELINE_UNITS:
        report["extractor"] = options.extractor or settings.effective_extractor
        report["extraction"] = usage_summary([item for sid in ids for item in usage.get(sid, [])])
    return report


def work_steps(conversation: Conversation, options: EvalOptions) -> int:
    """Progress steps for one conversation: units loaded (embedded, written) or events extracted,
    then one per question and retriever."""
    if options.unit == "product":
        return product_run.steps(conversation, len(options.include))
    if options.unit == "hint":
        return hint_run.steps(conversation)
    asked = len(conversation.questions) * len(options.retrievers)
    if options.unit == "extracted":
        return 2 * len({t.session for t in conversation.turns}) * max(1, len(conversation.speakers)) + asked
    return 2 * len(conversation.units(options.unit)) + asked


def write_hints(path: Path, records: Sequence[dict[str, Any]]) -> None:
    """Every question's hints as asked, one JSON object a line (`--hints-out`)."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")


@dataclass(frozen=True, kw_only=True)
class ExtractionPipeline:
    """The worker's pipeline dependencies for a run, and the metrics that count its LLM calls."""

    deps: Any  # worker.pipeline.PipelineDeps
    metrics: Any  # worker.metrics.Metrics


def extraction_pipeline(
    settings: Any,
    store: Any,
    embedder: CachingEmbedder,
    *,
    evidence: bool = True,
    reference: Sequence[Conversation] | None = None,
) -> ExtractionPipeline:
    """The worker's pipeline with the configured extractor (rules offline, an LLM when configured),
    or with `reference`, the reference extractor of those conversations' observations
    (`evaluation.reference`); without `evidence`, the extractor's evidence numbers are dropped."""
    from evaluation.reference import ReferenceExtractor
    from extraction.factory import build_extractor
    from worker.metrics import Metrics
    from worker.pipeline import PipelineDeps

    metrics = Metrics()
    extractor: Any = ReferenceExtractor(reference) if reference is not None else build_extractor(settings)
    if not evidence:
        extractor = product_run.WithoutEvidence(extractor)
    deps = PipelineDeps(store=store, extractor=extractor, embedder=embedder, metrics=metrics)
    return ExtractionPipeline(deps=deps, metrics=metrics)


async def evaluate_extracted(
    store: Any,
    pipeline: ExtractionPipeline,
    conversation: Conversation,
    options: EvalOptions,
    progress: Progress,
) -> tuple[dict[str, list[QuestionResult]], list[dict[str, int]]]:
    """Run the conversation's sessions through the pipeline into a fresh owner, approve what it
    proposed (as a reviewer would), then ask every question."""
    from store.model import MemoryFilter
    from worker.pipeline import process_event

    owner = uuid.uuid4()
    label = f"{conversation.sample_id}: extracting"
    used: list[dict[str, int]] = []
    registry = pipeline.metrics.registry
    for item in session_events(conversation, owner):
        calls_before = registry.get_sample_value("pmem_llm_calls_total") or 0.0
        outcome = await process_event(item.event, pipeline.deps)
        calls = (registry.get_sample_value("pmem_llm_calls_total") or 0.0) - calls_before
        used.append(
            {
                "prompt_tokens": outcome.usage.prompt_tokens,
                "completion_tokens": outcome.usage.completion_tokens,
                "llm_calls": int(calls),
                "written": len(outcome.written),
            }
        )
        progress.update(1, label)
        # a reviewer approves what the worker proposed (new memories and revisions of earlier ones)
        for written in outcome.written:
            await store.review.approve(written.id, actor="pmem-eval")
        progress.update(1, label)
    memories = await store.listing.list_memories(
        MemoryFilter(scope="user", owner_id=owner, status="active", limit=100_000)
    )

    results = await ask_questions(
        store,
        owner,
        conversation,
        options,
        progress,
        text_of=lambda hit: f"{hit.memory.key}: {hit.memory.value}",
    )
    if not options.keep and options.database_url is not None:
        for memory in memories:
            await store.erasure.delete(memory.id, actor="pmem-eval")
    return results, used


async def ask_questions(
    store: Any,
    owner: uuid.UUID,
    conversation: Conversation,
    options: EvalOptions,
    progress: Progress,
    *,
    text_of: Callable[[Any], str],
    units_of: Callable[[Any], tuple[str, ...]] | None = None,
) -> dict[str, list[QuestionResult]]:
    """Every question of `conversation` through each of `options.retrievers` (at most
    `options.concurrency` in flight), each answer kept as its hits' texts (`text_of`) and, where
    the memories are units of the conversation (`units_of`: a hit's dia_ids), the units ranked."""
    limit = max(options.ks)
    semaphore = asyncio.Semaphore(options.concurrency)
    label = f"{conversation.sample_id}: querying"

    async def ask(question: str, retriever: Retriever) -> list[Any]:
        async with semaphore:
            hits = await store.recall(owner, None, question, limit, retriever=retriever)
        progress.update(1, label)
        return list(hits)

    results: dict[str, list[QuestionResult]] = {}
    for retriever in options.retrievers:
        answers = await asyncio.gather(*(ask(q.question, retriever) for q in conversation.questions))
        results[retriever] = [
            QuestionResult(
                category=q.category,
                evidence=q.evidence,
                ranked=tuple(units_of(hit) for hit in hits) if units_of is not None else (),
                answer=q.answer,
                texts=tuple(text_of(hit) for hit in hits),
            )
            for q, hits in zip(conversation.questions, answers, strict=True)
        ]
    return results
