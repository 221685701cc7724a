"""Alembic environment for persona-memory. Run through `store.migrate.migrate()` (or `pmem migrate`),
which passes the connection and the embedding dimension in `config.attributes`; no alembic.ini."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection

from store.core.schema import build_schema
from store.postgres.schema import POSTGRES

VERSION_TABLE = "pmem_alembic_version"

config = context.config
embedding_dim = int(config.attributes.get("embedding_dim") or config.get_main_option("embedding_dim") or 384)
target_metadata = build_schema(embedding_dim, POSTGRES).metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    """Emit the SQL instead of running it (`pmem migrate --sql`)."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run on the caller's connection when given one (inside its transaction), else on the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(str(config.get_main_option("sqlalchemy.url")), poolclass=pool.NullPool)
    with engine.connect() as conn:
        _run(conn)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
