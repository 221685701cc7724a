"""`pmem regate [--dry-run]`: pass the rows stored before the gate through it — memories (key,
value, evidence), conversation turns and directory names: text that changes is rewritten (and
embedded again), a refused row is erased (`store.core.regate`). Reports the counts; idempotent."""

from __future__ import annotations

import argparse
import asyncio
import sys

from cli.commands.errors import run_reporting_database_errors
from cli.commands.store_session import command_settings, opened_store
from config import Settings


def register(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of `pmem regate`."""
    parser.add_argument("--database-url", help="default: PMEM_DATABASE_URL")
    parser.add_argument("--dry-run", action="store_true", help="count what would change; change nothing")
    parser.set_defaults(run=run)


async def _run(settings: Settings, *, dry_run: bool) -> int:
    async with opened_store(settings) as store:
        report = await store.gate.regate(dry_run=dry_run)
    verb = "would rewrite" if dry_run else "rewrote"
    erase = "would erase" if dry_run else "erased"
    print(
        f"pmem regate: memories {report.memories_seen} read, {verb} {report.memories_rewritten}, "
        f"{erase} {report.memories_erased} (a secret or nothing left), "
        f"{report.memories_left} left for a hand edit (the admitted key is another memory's); "
        f"turns {report.turns_seen} read, {verb} {report.turns_rewritten}, {erase} {report.turns_erased}; "
        f"names {report.names_seen} read, {verb} {report.names_rewritten}, {erase} {report.names_erased}",
        file=sys.stderr,
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """Pass the stored rows through the gate once."""
    settings = command_settings(args.database_url)
    return run_reporting_database_errors("regate", lambda: asyncio.run(_run(settings, dry_run=args.dry_run)))
