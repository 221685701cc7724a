"""`pmem migrate`: create or upgrade the schema of PMEM_DATABASE_URL (Postgres via the shipped alembic
migrations, SQLite directly). Running it twice is a no-op; a changed embedding dimension is an error."""

from __future__ import annotations

import argparse

from config import load_settings
from store.migrate import migrate


def register(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of `pmem migrate`."""
    parser.add_argument(
        "--database-url",
        help="postgresql://… or sqlite:///path (default: PMEM_DATABASE_URL)",
    )
    parser.add_argument(
        "--embedding-dim",
        type=int,
        help="dimension of memories.embedding (default: PMEM_EMBEDDING_DIM)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Migrate and print what was done (errors and exit codes: cli/commands/errors.py)."""
    overrides: dict[str, object] = {}
    if args.database_url:
        overrides["database_url"] = args.database_url
    if args.embedding_dim:
        overrides["embedding_dim"] = args.embedding_dim
    settings = load_settings(**overrides)
    from extraction.embeddings import embedding_identity  # the LLM client: only when migrating

    # a bad URL, a changed dimension or an unreachable database: one line from cli.main
    report = migrate(settings.database_url, settings.embedding_dim, embedding=embedding_identity(settings))
    print(report.describe())
    return 0
