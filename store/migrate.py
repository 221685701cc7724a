"""Create or upgrade the schema: alembic for Postgres (run programmatically; the scripts ship in the
wheel), `create_all` for SQLite. Safe to run from several processes at once and to run twice."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import Connection

from store.core.schema import AUDIT_ACTION_CHECK, Schema, build_schema
from store.model import EmbeddingIdentity
from store.rules.urls import backend_of, to_sqlalchemy_url
from store.sqlite.schema import SQLITE

MIGRATIONS_DIR = Path(__file__).parent / "postgres" / "migrations"
VERSION_TABLE = "pmem_alembic_version"
# any constant works; it only has to be the same for every `pmem migrate` racing on one database
_ADVISORY_LOCK_KEY = 0x706D656D  # "pmem"


class SchemaError(RuntimeError):
    """The database schema cannot be used as it is; the message names the fix."""


class EmbeddingDimensionMismatch(SchemaError):
    """The `memories.embedding` column has a different dimension than configured."""

    def __init__(self, *, existing: int, configured: int) -> None:
        super().__init__(
            f"memories.embedding is vector({existing}) in the database but PMEM_EMBEDDING_DIM is "
            f"{configured}. Either set PMEM_EMBEDDING_DIM={existing} (and an embedding model of that size), "
            "or migrate into a new, empty database and re-embed the memories with the "
            f"{configured}-dimension model; pmem never changes the column silently."
        )
        self.existing = existing
        self.configured = configured


class EmbeddingModelMismatch(SchemaError):
    """The stored vectors were made by another embedding provider or model than the configured one."""

    def __init__(self, *, recorded: EmbeddingIdentity, configured: EmbeddingIdentity) -> None:
        super().__init__(
            f"the stored memories were embedded with {recorded.describe()} but the configured embedder "
            f"is {configured.describe()}; vectors of two models in one column would silently spoil "
            "recall and de-duplication. Either stop the workers and run `pmem reembed` to re-embed "
            "every memory with the configured model, or keep the recorded one: "
            f"{recorded_settings(recorded)}."
        )
        self.recorded = recorded
        self.configured = configured


def recorded_settings(recorded: EmbeddingIdentity) -> str:
    """The settings that configure the recorded embedder again (`PMEM_EMBEDDING_…=…`)."""
    return (
        f"PMEM_EMBEDDING_PROVIDER={recorded.provider} PMEM_EMBEDDING_MODEL={recorded.model} "
        f"PMEM_EMBEDDING_DIM={recorded.dim}"
    )


def recorded_embedding(conn: Connection) -> EmbeddingIdentity | None:
    """The identity `pmem migrate` recorded (None: not recorded yet)."""
    row = conn.execute(text("SELECT provider, model, dim FROM pmem_embedding WHERE id = 1")).first()
    return None if row is None else EmbeddingIdentity(provider=row[0], model=row[1], dim=int(row[2]))


def record_embedding(conn: Connection, embedding: EmbeddingIdentity) -> None:
    """Record `embedding` when nothing is recorded; refuse another one (`EmbeddingModelMismatch`)."""
    recorded = recorded_embedding(conn)
    if recorded is None:
        conn.execute(
            text("INSERT INTO pmem_embedding (id, provider, model, dim) VALUES (1, :p, :m, :d)"),
            {"p": embedding.provider, "m": embedding.model, "d": embedding.dim},
        )
    elif recorded != embedding:
        raise EmbeddingModelMismatch(recorded=recorded, configured=embedding)


@dataclass(frozen=True, kw_only=True, slots=True)
class MigrationReport:
    """What `migrate` did: revisions before and after, and the dimension in use."""

    backend: str
    from_revision: str | None
    to_revision: str | None
    embedding_dim: int

    @property
    def changed(self) -> bool:
        """Whether anything was applied."""
        return self.from_revision != self.to_revision

    def describe(self) -> str:
        """One line for humans."""
        if self.backend == "sqlite":
            return f"sqlite: tables present (embedding dimension {self.embedding_dim}, stored as JSON)"
        if not self.changed:
            return f"postgresql: already at revision {self.to_revision}; nothing to do"
        return (
            f"postgresql: migrated {self.from_revision or '(empty database)'} -> {self.to_revision} "
            f"(embedding vector({self.embedding_dim}))"
        )


def alembic_config(
    *, embedding_dim: int, connection: Connection | None = None, url: str | None = None
) -> Config:
    """An in-memory alembic Config pointing at the shipped scripts (no alembic.ini needed)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("embedding_dim", str(embedding_dim))
    if url is not None:
        # alembic's Config interpolates %, so escape it in passwords
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["embedding_dim"] = embedding_dim
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str | None:
    """The newest revision shipped with this package."""
    return ScriptDirectory.from_config(alembic_config(embedding_dim=1)).get_current_head()


def existing_embedding_dim(connection: Connection) -> int | None:
    """Dimension of `memories.embedding` in this database, or None when the table does not exist."""
    row = connection.execute(
        text(
            "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass('memories') AND a.attname = 'embedding' AND NOT a.attisdropped"
        )
    ).first()
    if row is None:
        return None
    match = re.fullmatch(r"(?:vector|halfvec)\((\d+)\)", str(row[0]))
    if match is None:
        raise SchemaError(
            f"memories.embedding has type {row[0]!r}, expected vector(N); this table was not created by "
            "pmem migrate. Use a separate database (or schema via search_path) for persona-memory."
        )
    return int(match.group(1))


def current_revision(connection: Connection) -> str | None:
    """The alembic revision this database is at (None before the first migration)."""
    return MigrationContext.configure(
        connection, opts={"version_table": VERSION_TABLE}
    ).get_current_revision()


@contextmanager
def _one_transaction(database_url: str) -> Iterator[Connection]:
    """One connection to `database_url` in one transaction (committed unless it raises); no pool
    is left behind."""
    engine = create_engine(to_sqlalchemy_url(database_url, asynchronous=False), poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


def _migrate_postgres(
    database_url: str, embedding_dim: int, embedding: EmbeddingIdentity | None
) -> MigrationReport:
    with _one_transaction(database_url) as conn:
        # serialise concurrent `pmem migrate` runs (e.g. several workers starting at once)
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK_KEY})
        before = current_revision(conn)
        existing = existing_embedding_dim(conn)
        if existing is not None and before is None:
            raise SchemaError(
                "a `memories` table exists but was not created by pmem migrate (no "
                f"{VERSION_TABLE} table). Point PMEM_DATABASE_URL at a database of its own, or drop the "
                "foreign table if it is a leftover."
            )
        if existing is not None and existing != embedding_dim:
            raise EmbeddingDimensionMismatch(existing=existing, configured=embedding_dim)
        command.upgrade(alembic_config(embedding_dim=embedding_dim, connection=conn), "head")
        after = current_revision(conn)
        if embedding is not None:
            record_embedding(conn, embedding)
    return MigrationReport(
        backend="postgresql", from_revision=before, to_revision=after, embedding_dim=embedding_dim
    )


# Columns added after the first release, for SQLite files created before them (Postgres: alembic).
_SQLITE_ADDED_COLUMNS = (
    ("memories", "team_id", "TEXT"),
    ("memory_audit", "team_id", "TEXT"),
    ("memory_settings", "pending_days", "INTEGER"),
    ("memory_settings", "archived_days", "INTEGER"),
    ("memories", "evidence", "TEXT"),
    ("memories", "observed_at", "DATETIME"),
    ("memory_revisions", "evidence", "TEXT"),
    ("memory_revisions", "observed_at", "DATETIME"),
    ("memory_settings", "history", "BOOLEAN"),
    ("memory_settings", "history_days", "INTEGER"),
    ("conversation_turns", "speaker", "TEXT"),
    ("conversation_turns", "search_text", "TEXT"),
    ("processed_events", "body_sha256", "TEXT"),
    ("memories", "pinned", "BOOLEAN NOT NULL DEFAULT 0"),
    ("memory_settings", "known_personas_only", "BOOLEAN"),
)


def _rebuild_sqlite_audit(conn: Connection, schema: Schema) -> None:
    """Rebuild `memory_audit` of a file whose CHECK allows fewer actions than `AUDIT_ACTION_CHECK`
    (SQLite cannot alter a constraint): the rows are copied into the table as defined now."""
    found = conn.execute(
        text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'memory_audit'")
    ).scalar()
    if found is None or AUDIT_ACTION_CHECK in str(found):
        return
    audit = schema.audit
    old_columns = {row[1] for row in conn.execute(text("PRAGMA table_info(memory_audit)"))}
    copied = ", ".join(column.name for column in audit.c if column.name in old_columns)
    conn.execute(text("ALTER TABLE memory_audit RENAME TO memory_audit_before"))
    for index in audit.indexes:
        conn.execute(text(f"DROP INDEX IF EXISTS {index.name}"))
    audit.create(conn)
    conn.execute(text(f"INSERT INTO memory_audit ({copied}) SELECT {copied} FROM memory_audit_before"))
    conn.execute(text("DROP TABLE memory_audit_before"))


def create_sqlite_schema(conn: Connection, schema: Schema) -> None:
    """Create missing tables, add columns and indexes newer than the file, drop superseded indexes."""
    schema.metadata.create_all(conn)
    for table, column, sql_type in _SQLITE_ADDED_COLUMNS:
        present = {row[1] for row in conn.execute(text(f"PRAGMA table_info({table})"))}
        if column not in present:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}"))
    _rebuild_sqlite_audit(conn, schema)
    conn.execute(text("DROP INDEX IF EXISTS uq_memories_scope_owner_user_key"))
    conn.execute(text("DROP TABLE IF EXISTS chat_messages"))  # nothing reads or writes it
    present_indexes = {
        row[0] for row in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'index'"))
    }
    for each_table in schema.metadata.sorted_tables:
        for index in each_table.indexes:
            if index.name not in present_indexes:
                index.create(conn)


def _migrate_sqlite(
    database_url: str, embedding_dim: int, embedding: EmbeddingIdentity | None
) -> MigrationReport:
    with _one_transaction(database_url) as conn:
        create_sqlite_schema(conn, build_schema(embedding_dim, SQLITE))
        if embedding is not None:
            record_embedding(conn, embedding)
    return MigrationReport(
        backend="sqlite", from_revision=None, to_revision=None, embedding_dim=embedding_dim
    )


def migrate(
    database_url: str, embedding_dim: int, *, embedding: EmbeddingIdentity | None = None
) -> MigrationReport:
    """Bring the database at `database_url` (a plain postgresql:// or sqlite:/// URL) to the newest schema,
    and record `embedding` (provider, model, dimension) when given.

    Raises `EmbeddingDimensionMismatch` when the existing column has another dimension, and
    `EmbeddingModelMismatch` when another embedding model is recorded."""
    if embedding_dim < 1:
        raise ValueError(f"embedding dimension must be positive, got {embedding_dim}")
    if backend_of(database_url) == "sqlite":
        return _migrate_sqlite(database_url, embedding_dim, embedding)
    return _migrate_postgres(database_url, embedding_dim, embedding)


async def migrate_async(
    database_url: str, embedding_dim: int, *, embedding: EmbeddingIdentity | None = None
) -> MigrationReport:
    """`migrate` in a worker thread, for callers already inside an event loop."""
    return await asyncio.to_thread(migrate, database_url, embedding_dim, embedding=embedding)
