"""SQLAlchemy 2 table definitions: `memories` with the platform's column contract (plus a generated
tsvector), and beside it the audit trail, pending revisions, processed events, memory settings and
chat history.

The embedding dimension is a deployment setting (`PMEM_EMBEDDING_DIM`), so the tables are built by
`build_schema(dim, dialect)`, with the backend's `SchemaDialect` (`store.postgres.schema`,
`store.sqlite.schema`). Postgres gets its schema from the alembic migrations (`store.migrate`);
these definitions are what the stores query and what SQLite creates directly. A test checks that
the migrated Postgres database and these definitions do not drift apart.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    TypeDecorator,
    false,
    func,
    literal_column,
    text,
)
from sqlalchemy.types import TypeEngine

from store.model import AUDIT_ACTIONS


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both backends (SQLite keeps naive UTC text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> datetime | None:
        """Normalise to UTC; SQLite gets it naive because it cannot store an offset."""
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected datetime, got {type(value).__name__}")
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        utc = aware.astimezone(UTC)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        """Attach UTC to naive values read back from SQLite."""
        if value is None:
            return None
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


@dataclass(frozen=True, kw_only=True, slots=True)
class Schema:
    """All tables of the store for one dialect and embedding dimension."""

    metadata: MetaData
    memories: Table
    revisions: Table
    audit: Table
    processed_events: Table
    settings: Table
    turns: Table
    api_keys: Table
    ui_sessions: Table
    embedding_config: Table
    directory: Table
    embedding_dim: int


@dataclass(frozen=True, kw_only=True, slots=True)
class SchemaDialect:
    """What one backend's tables differ in (`store.postgres.schema.POSTGRES`,
    `store.sqlite.schema.SQLITE`): column types, the nil UUID in SQL, a memory id's server default,
    and what it adds to the shared tables (Postgres: generated full-text columns, GIN, HNSW and
    partial indexes)."""

    guid: TypeEngine[uuid.UUID]
    real: TypeEngine[float]
    embedding: Callable[[int], TypeEngine[Any]]
    serial: TypeEngine[int]
    # the arguments that make an integer primary key number itself (Postgres: an identity column)
    numbered: Callable[[], tuple[Any, ...]]
    nil: str
    new_id: Any
    # adds to (memories, conversation_turns) for an embedding dimension
    extend: Callable[[Table, Table, int], None]


# the audit actions the table accepts: the model's `AuditAction`, nothing else
AUDIT_ACTION_CHECK = "action IN (" + ", ".join(f"'{action}'" for action in AUDIT_ACTIONS) + ")"


def _memories(md: MetaData, dim: int, dialect: SchemaDialect) -> Table:
    guid, nil = dialect.guid, dialect.nil
    columns: list[Any] = [
        Column(
            "id",
            guid,
            primary_key=True,
            server_default=dialect.new_id,
        ),
        Column("scope", Text, nullable=False),
        Column("owner_id", guid, nullable=False),
        Column("user_id", guid, nullable=True),
        Column("key", Text, nullable=False),
        Column("value", Text, nullable=False),
        Column("source_channel_id", guid, nullable=True),
        Column("confidence", dialect.real, nullable=False, server_default=text("1.0")),
        Column("status", Text, nullable=False, server_default=text("'pending_review'")),
        Column("embedding", dialect.embedding(dim), nullable=True),
        Column("created_at", UtcDateTime(), nullable=False, server_default=func.now()),
        Column("updated_at", UtcDateTime(), nullable=False, server_default=func.now()),
        # the team of the conversation that wrote it: recalled, listed and merged only in that team
        Column("team_id", guid, nullable=True),
        # what was said that it comes from (redacted, with speaker roles, capped) and when
        Column("evidence", Text, nullable=True),
        Column("observed_at", UtcDateTime(), nullable=True),
        # pinned by a reviewer or the user: while active, in every hint of its context
        Column("pinned", Boolean, nullable=False, server_default=false()),
        CheckConstraint("scope IN ('user', 'persona', 'persona_user')", name="ck_memories_scope"),
        CheckConstraint("status IN ('active', 'pending_review', 'archived')", name="ck_memories_status"),
        CheckConstraint("confidence >= 0 AND confidence <= 1", name="ck_memories_confidence"),
        CheckConstraint("(scope = 'persona_user') = (user_id IS NOT NULL)", name="ck_memories_user_id"),
    ]
    table = Table("memories", md, *columns)
    Index("ix_memories_scope_owner_status", table.c.scope, table.c.owner_id, table.c.status)
    Index(
        "ix_memories_persona_user",
        table.c.owner_id,
        table.c.user_id,
        postgresql_where=text("scope = 'persona_user'"),
        sqlite_where=text("scope = 'persona_user'"),
    )
    Index(
        "uq_memories_scope_owner_user_team_key",
        table.c.scope,
        table.c.owner_id,
        func.coalesce(table.c.user_id, literal_column(nil)),
        func.coalesce(table.c.team_id, literal_column(nil)),
        table.c.key,
        unique=True,
    )
    Index(
        "ix_memories_pending_created",
        table.c.created_at.desc(),
        table.c.id.desc(),
        postgresql_where=text("status = 'pending_review'"),
        sqlite_where=text("status = 'pending_review'"),
    )
    Index(
        "ix_memories_user_id",
        table.c.user_id,
        postgresql_where=text("scope = 'persona_user'"),
        sqlite_where=text("scope = 'persona_user'"),
    )
    Index(
        "ix_memories_team_id",
        table.c.team_id,
        postgresql_where=text("team_id IS NOT NULL"),
        sqlite_where=text("team_id IS NOT NULL"),
    )
    Index("ix_memories_source_channel_id", table.c.source_channel_id)
    # an owner's pinned memories, read for every hint: only the few pinned rows are indexed
    Index(
        "ix_memories_pinned",
        table.c.scope,
        table.c.owner_id,
        postgresql_where=text("pinned"),
        # as SQLite's queries spell the predicate, so its planner sees the index applies
        sqlite_where=text("pinned = 1"),
    )
    # an owner's most recently updated memories without sorting all of them (the prompt's keys)
    Index(
        "ix_memories_owner_recent",
        table.c.scope,
        table.c.owner_id,
        func.coalesce(table.c.user_id, literal_column(nil)),
        table.c.updated_at.desc(),
    )
    return table


def _turns(md: MetaData, dim: int, dialect: SchemaDialect) -> Table:
    """`conversation_turns`: the messages of past conversations (conversation memory), each
    recalled only in its own context (user, persona or none, team or none)."""
    guid, nil = dialect.guid, dialect.nil
    columns: list[Any] = [
        Column("id", guid, primary_key=True),
        Column("channel_id", guid, nullable=False),
        Column("event_id", guid, nullable=False),
        Column("user_id", guid, nullable=False),
        Column("persona_id", guid, nullable=True),
        Column("team_id", guid, nullable=True),
        Column("role", Text, nullable=False),
        Column("text", Text, nullable=False),
        Column("at", UtcDateTime(), nullable=False),
        Column("position", Integer, nullable=False),
        # who said it, when the platform named them
        Column("speaker", Text, nullable=True),
        # `Speaker said, "text"` with the turns around it (`Speaker: text` in rows stored before
        # 2026-12-04): what full text matches the turn by
        Column("search_text", Text, nullable=True),
        # the turn embedded with its neighbouring turns
        Column("embedding", dialect.embedding(dim), nullable=True),
        Column("created_at", UtcDateTime(), nullable=False, server_default=func.now()),
        CheckConstraint("role IN ('user', 'assistant')", name="ck_conversation_turns_role"),
        CheckConstraint("position >= 1", name="ck_conversation_turns_position"),
    ]
    table = Table("conversation_turns", md, *columns)
    # one row per message of an event: a redelivered event cannot store its turns twice
    Index("uq_conversation_turns_event_position", table.c.event_id, table.c.position, unique=True)
    # a context's turns, newest first: recall's exact vector scan, listing, retention
    Index(
        "ix_conversation_turns_context",
        table.c.user_id,
        func.coalesce(table.c.persona_id, literal_column(nil)),
        func.coalesce(table.c.team_id, literal_column(nil)),
        table.c.at.desc(),
    )
    Index("ix_conversation_turns_at", table.c.at)
    # no HNSW index: every event writes a dozen turns, and an HNSW insert into a large graph
    # costs ~20x a row's other indexes (bench/README.md); recall ranks a context's most recent
    # turns exactly through ix_conversation_turns_context (`store.rules.turn_recall.TURN_WINDOW`)
    return table


def build_schema(embedding_dim: int, dialect: SchemaDialect) -> Schema:
    """Tables for one backend and embedding dimension (a fresh MetaData each call)."""
    if embedding_dim < 1:
        raise ValueError(f"embedding dimension must be positive, got {embedding_dim}")
    md = MetaData()
    guid, real, serial = dialect.guid, dialect.real, dialect.serial
    memories = _memories(md, embedding_dim, dialect)
    turns = _turns(md, embedding_dim, dialect)
    dialect.extend(memories, turns, embedding_dim)

    revisions = Table(
        "memory_revisions",
        md,
        Column("id", guid, primary_key=True),
        Column("memory_id", guid, ForeignKey("memories.id", ondelete="CASCADE"), nullable=False),
        Column("old_value", Text, nullable=False),
        Column("new_value", Text, nullable=False),
        Column("confidence", real, nullable=False),
        # the proposal's embedding, so approving needs no embedding call inside the transaction
        Column("embedding", dialect.embedding(embedding_dim), nullable=True),
        Column("source_channel_id", guid, nullable=True),
        Column("source_event_id", guid, nullable=True),
        Column("status", Text, nullable=False, server_default=text("'pending'")),
        Column("proposed_by", Text, nullable=False),
        Column("decided_by", Text, nullable=True),
        Column("created_at", UtcDateTime(), nullable=False, server_default=func.now()),
        Column("decided_at", UtcDateTime(), nullable=True),
        # the proposed value's evidence and time (as on memories); approval carries them over
        Column("evidence", Text, nullable=True),
        Column("observed_at", UtcDateTime(), nullable=True),
        CheckConstraint("status IN ('pending', 'approved', 'rejected')", name="ck_memory_revisions_status"),
    )
    # one open proposal per memory: a newer extraction replaces the older proposal
    Index(
        "ix_memory_revisions_pending_created",
        revisions.c.created_at.desc(),
        revisions.c.id.desc(),
        postgresql_where=text("status = 'pending'"),
        sqlite_where=text("status = 'pending'"),
    )
    Index(
        "uq_memory_revisions_pending",
        revisions.c.memory_id,
        unique=True,
        postgresql_where=text("status = 'pending'"),
        sqlite_where=text("status = 'pending'"),
    )

    audit = Table(
        "memory_audit",
        md,
        Column("id", serial, *dialect.numbered(), primary_key=True),
        # no foreign key: the trail must outlive a hard delete
        Column("memory_id", guid, nullable=True),
        Column("action", Text, nullable=False),
        Column("scope", Text, nullable=True),
        Column("owner_id", guid, nullable=True),
        Column("user_id", guid, nullable=True),
        Column("key", Text, nullable=True),
        Column("old_value", Text, nullable=True),
        Column("new_value", Text, nullable=True),
        Column("actor", Text, nullable=False),
        Column("event_id", guid, nullable=True),
        Column("revision_id", guid, nullable=True),
        Column("at", UtcDateTime(), nullable=False, server_default=func.now()),
        Column("team_id", guid, nullable=True),
        CheckConstraint(AUDIT_ACTION_CHECK, name="ck_memory_audit_action"),
    )
    Index("ix_memory_audit_owner_id", audit.c.owner_id)
    Index(
        "ix_memory_audit_user_id",
        audit.c.user_id,
        postgresql_where=text("user_id IS NOT NULL"),
        sqlite_where=text("user_id IS NOT NULL"),
    )
    Index("ix_memory_audit_memory_id", audit.c.memory_id, audit.c.id)
    Index("ix_memory_audit_event_id", audit.c.event_id)

    processed_events = Table(
        "processed_events",
        md,
        Column("event_id", guid, primary_key=True),
        Column("processed_at", UtcDateTime(), nullable=False, server_default=func.now()),
        Column("memory_count", Integer, nullable=False, server_default=text("0")),
        Column("actor", Text, nullable=False, server_default=text("'worker'")),
        # the event's content hash (`worker.events.event_fingerprint`): a reused event_id with
        # another body is told apart from a redelivery
        Column("body_sha256", Text, nullable=True),
    )

    settings = Table(
        "memory_settings",
        md,
        Column("id", serial, *dialect.numbered(), primary_key=True),
        Column("level", Text, nullable=False),
        Column("target_id", guid, nullable=True),
        Column("enabled", Boolean, nullable=True),
        Column("persona_learning", Boolean, nullable=True),
        Column("extraction_prompt", Text, nullable=True),
        Column("min_confidence", real, nullable=True),
        Column("updated_at", UtcDateTime(), nullable=False, server_default=func.now()),
        Column("pending_days", Integer, nullable=True),
        Column("archived_days", Integer, nullable=True),
        Column("history", Boolean, nullable=True),
        Column("history_days", Integer, nullable=True),
        Column("review_tool_saves", Boolean, nullable=True),
        Column("known_personas_only", Boolean, nullable=True),
        CheckConstraint("level IN ('global', 'team', 'persona')", name="ck_memory_settings_level"),
        CheckConstraint("(level = 'global') = (target_id IS NULL)", name="ck_memory_settings_target"),
        CheckConstraint(
            "min_confidence IS NULL OR (min_confidence >= 0 AND min_confidence <= 1)",
            name="ck_memory_settings_min_confidence",
        ),
        CheckConstraint(
            "(pending_days IS NULL OR pending_days >= 1) AND (archived_days IS NULL OR archived_days >= 1)",
            name="ck_memory_settings_retention",
        ),
        CheckConstraint("history_days IS NULL OR history_days >= 1", name="ck_memory_settings_history_days"),
    )
    Index(
        "uq_memory_settings_level_target",
        settings.c.level,
        func.coalesce(settings.c.target_id, literal_column(dialect.nil)),
        unique=True,
    )

    api_keys = Table(
        "api_keys",
        md,
        Column("id", guid, primary_key=True),
        Column("name", Text, nullable=False),
        # SHA-256 of the whole key: keys are 256-bit random, so a fast hash is enough
        Column("key_hash", Text, nullable=False),
        Column("prefix", Text, nullable=False),
        Column("created_at", UtcDateTime(), nullable=False, server_default=func.now()),
        Column("last_used_at", UtcDateTime(), nullable=True),
        Column("revoked_at", UtcDateTime(), nullable=True),
    )
    Index("uq_api_keys_key_hash", api_keys.c.key_hash, unique=True)
    Index(
        "uq_api_keys_active_name",
        api_keys.c.name,
        unique=True,
        postgresql_where=text("revoked_at IS NULL"),
        sqlite_where=text("revoked_at IS NULL"),
    )

    # web-UI sessions: the cookie's SHA-256 (the cookie is 256 random bits) and who signed in. The
    # digest of the sign-in token's `jti` is unique, so a sign-in link opens one session only; an
    # ended session keeps its row (`ended_at`) until both it and its sign-in token have expired.
    ui_sessions = Table(
        "ui_sessions",
        md,
        Column("digest", Text, primary_key=True),
        Column("sign_in_id", Text, nullable=False),
        Column("subject", guid, nullable=False),
        Column("role", Text, nullable=False),
        Column("teams", Text, nullable=False),  # a JSON list of team UUIDs
        Column("created_at", UtcDateTime(), nullable=False, server_default=func.now()),
        Column("expires_at", UtcDateTime(), nullable=False),
        Column("sign_in_expires_at", UtcDateTime(), nullable=False),
        Column("ended_at", UtcDateTime(), nullable=True),
    )
    Index("uq_ui_sessions_sign_in_id", ui_sessions.c.sign_in_id, unique=True)

    # the embedding provider, model and dimension the stored vectors were made with (one row,
    # written by `pmem migrate`); `reembed_*` is the checkpoint of a running `pmem reembed`
    embedding_config = Table(
        "pmem_embedding",
        md,
        Column("id", Integer, primary_key=True, autoincrement=False),
        Column("provider", Text, nullable=False),
        Column("model", Text, nullable=False),
        Column("dim", Integer, nullable=False),
        Column("reembed_provider", Text, nullable=True),
        Column("reembed_model", Text, nullable=True),
        Column("reembed_after", guid, nullable=True),
        Column("updated_at", UtcDateTime(), nullable=False, server_default=func.now()),
        CheckConstraint("id = 1", name="ck_pmem_embedding_one_row"),
    )

    # the latest display name of each team, persona and user (the UI shows names, not UUIDs)
    directory = Table(
        "directory",
        md,
        Column("kind", Text, primary_key=True),
        Column("id", guid, primary_key=True),
        Column("name", Text, nullable=False),
        Column("updated_at", UtcDateTime(), nullable=False, server_default=func.now()),
        CheckConstraint("kind IN ('team', 'persona', 'user')", name="ck_directory_kind"),
    )

    return Schema(
        metadata=md,
        directory=directory,
        api_keys=api_keys,
        ui_sessions=ui_sessions,
        embedding_config=embedding_config,
        memories=memories,
        revisions=revisions,
        audit=audit,
        processed_events=processed_events,
        settings=settings,
        turns=turns,
        embedding_dim=embedding_dim,
    )
