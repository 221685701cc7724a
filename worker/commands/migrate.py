"""`pmem migrate`: create or upgrade the schema of PMEM_DATABASE_URL (Postgres via the shipped alembic
migrations, SQLite directly). Running it twice is a no-op; a changed embedding dimension is an error."""

from __future__ import annotations

import argparse
import sys

from sqlalchemy.exc import OperationalError

from extraction.embeddings import embedding_identity
from store.migrate import SchemaError, migrate
from store.urls import DatabaseUrlError
from worker.settings import load_settings


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
    """Migrate and print what was done; exit 2 on a schema or URL problem, 1 if unreachable."""
    overrides: dict[str, object] = {}
    if args.database_url:
        overrides["database_url"] = args.database_url
    if args.embedding_dim:
        overrides["embedding_dim"] = args.embedding_dim
    settings = load_settings(**overrides)
    try:
        report = migrate(
            settings.database_url, settings.embedding_dim, embedding=embedding_identity(settings)
        )
    except (SchemaError, DatabaseUrlError) as exc:
        print(f"pmem migrate: {exc}", file=sys.stderr)
        return 2
    except OperationalError as exc:
        reason = str(exc.orig).strip() if exc.orig is not None else str(exc)
        print(
            f"pmem migrate: cannot reach the database ({reason}); check PMEM_DATABASE_URL or --database-url",
            file=sys.stderr,
        )
        return 1
    print(report.describe())
    return 0
