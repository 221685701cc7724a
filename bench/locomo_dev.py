"""What the fusion-tuning scripts share: the start of their command line (the LoCoMo file, the unit
to recall), the options of a hybrid-only `pmem eval locomo` run at recall@5/10/25/50, and writing
the results to `--json-out`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from evaluation.options import EvalOptions, local_embedder_available, resolve_embedding_provider

STORES = ("postgres", "sqlite")


def locomo_parser(description: str | None) -> argparse.ArgumentParser:
    """A parser that takes the LoCoMo file and `--unit`; the script adds the rest."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", type=Path)
    parser.add_argument("--unit", default="observation", choices=["observation", "dialog"])
    return parser


def write_results(results: dict[str, Any], json_out: Path | None) -> None:
    """The results as JSON in `json_out`, when one was given."""
    if json_out:
        json_out.write_text(json.dumps(results, indent=2) + "\n")


def hybrid_options(args: argparse.Namespace, **options: Any) -> EvalOptions:
    """The run of `args.file` and `args.unit` through the hybrid retriever at recall@5/10/25/50, with
    the embedder `pmem eval` would choose and a fresh store; `options` set the rest."""
    return EvalOptions(
        file=args.file,
        unit=args.unit,
        ks=(5, 10, 25, 50),
        retrievers=("hybrid",),
        embedding_provider=resolve_embedding_provider(None, {}, local_embedder_available()),
        database_url=None,
        data_dir=None,
        **options,
    )
