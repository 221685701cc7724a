"""`pmem reembed`: re-embed every memory with the configured embedding provider and model, in
batches, resumable (run it again after an interruption: it continues from its checkpoint), with a
progress bar; at the end the new model is recorded, so workers, recall and `serve` configured with
it start again. Stop the workers first: a worker still on the old model would write old vectors."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from cli.commands.store_session import opened_store
from config import Settings, load_settings


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of `pmem reembed`."""
    parser.add_argument("--batch-size", type=int, default=256, help="memories per batch (default 256)")
    parser.set_defaults(run=run)


def progress_bar(done: int, total: int, *, width: int = 30) -> str:
    """`[#####.....]  1,200/5,000  24%` (pure)."""
    share = done / total if total else 1.0
    filled = round(width * share)
    return f"[{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} {share:4.0%}"


async def reembed(settings: Settings, *, batch_size: int) -> int:
    """Open the store without the model check (the point is to change the model) and re-embed."""
    last = [0.0]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.2 or done >= total:
            last[0] = now
            end = "\n" if done >= total else ""
            print(f"\r{progress_bar(done, total)}", end=end, file=sys.stderr, flush=True)

    async with opened_store(settings, check_schema=False) as store:
        report = await store.embedding_models.reembed(batch_size=batch_size, progress=show)
    resumed = " (resumed)" if report.resumed else ""
    print(
        f"re-embedded {report.reembedded} of {report.total} memories{resumed} with {report.target.describe()}"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """Re-embed; exit 2 when the configuration cannot work (e.g. another dimension)."""
    settings = load_settings()
    try:
        return asyncio.run(reembed(settings, batch_size=max(1, args.batch_size)))
    except ValueError as exc:
        print(f"pmem reembed: {exc}", file=sys.stderr)
        return 2
