"""`pmem retention`: reject pending memories and erase archived ones older than the configured days
(PMEM_RETENTION_*_DAYS), and erase conversation turns said more than PMEM_HISTORY_DAYS ago (each
overridden per team and persona). Idempotent; run it daily (CronJob)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime

from cli.commands.errors import run_reporting_database_errors
from cli.commands.store_session import command_settings, opened_store
from config import Settings


def register(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of `pmem retention`."""
    parser.add_argument("--database-url", help="default: PMEM_DATABASE_URL")
    parser.set_defaults(run=run)


async def _run(settings: Settings) -> int:
    def progress(done: int) -> None:
        print(f"\rpmem retention: {done} memories and turns handled…", end="", file=sys.stderr, flush=True)

    async with opened_store(settings) as store:
        report = await store.erasure.retention(now=datetime.now(UTC), progress=progress)
    print(
        f"\rpmem retention: rejected {report.rejected_memories} pending memories and "
        f"{report.rejected_revisions} proposed changes, erased {report.erased_memories} archived memories "
        f"and {report.erased_turns} conversation turns older than their history_days",
        file=sys.stderr,
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """Apply retention once."""
    settings = command_settings(args.database_url)
    return run_reporting_database_errors("retention", lambda: asyncio.run(_run(settings)))
