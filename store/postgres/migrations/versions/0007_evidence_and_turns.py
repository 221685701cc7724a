"""Evidence and time on memories and pending revisions; conversation turns; history settings.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

- `memories.evidence` / `memories.observed_at` and the same on `memory_revisions`: what was said
  that a fact comes from (redacted, with speaker roles, capped) and when it was said.
- `memories.search_tsv` also covers the evidence (weight B under the key and value's A); the
  generated column is rebuilt, which rewrites the table (minutes on a few million memories).
- `conversation_turns`: the messages of past conversations, recalled only in their own context.
- `memory_settings.history` / `history_days`: conversation memory on/off and its retention.
"""

from __future__ import annotations

from alembic import context, op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


NIL = "'00000000-0000-0000-0000-000000000000'::uuid"
MEMORY_TSV = (
    "setweight(to_tsvector('english'::regconfig, key || ' ' || value), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(evidence, '')), 'B')"
)
OLD_MEMORY_TSV = "to_tsvector('english'::regconfig, key || ' ' || value)"


def _dim() -> int:
    return int(
        context.config.attributes.get("embedding_dim")
        or context.config.get_main_option("embedding_dim")
        or 384
    )


def _replace_memory_tsv(expression: str) -> None:
    op.execute("DROP INDEX IF EXISTS ix_memories_search_tsv")
    op.execute("ALTER TABLE memories DROP COLUMN search_tsv")
    op.execute(f"ALTER TABLE memories ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS ({expression}) STORED")
    op.execute("CREATE INDEX ix_memories_search_tsv ON memories USING gin (search_tsv)")


def upgrade() -> None:
    for table in ("memories", "memory_revisions"):
        op.execute(f"ALTER TABLE {table} ADD COLUMN evidence text")
        op.execute(f"ALTER TABLE {table} ADD COLUMN observed_at timestamptz")
    _replace_memory_tsv(MEMORY_TSV)
    op.execute("ALTER TABLE memory_settings ADD COLUMN history boolean")
    op.execute("ALTER TABLE memory_settings ADD COLUMN history_days integer")
    op.execute(
        "ALTER TABLE memory_settings ADD CONSTRAINT ck_memory_settings_history_days "
        "CHECK (history_days IS NULL OR history_days >= 1)"
    )
    op.execute(
        f"""
        CREATE TABLE conversation_turns (
            id uuid PRIMARY KEY,
            channel_id uuid NOT NULL,
            event_id uuid NOT NULL,
            user_id uuid NOT NULL,
            persona_id uuid,
            team_id uuid,
            role text NOT NULL,
            text text NOT NULL,
            at timestamptz NOT NULL,
            position integer NOT NULL,
            embedding vector({_dim()}),
            created_at timestamptz NOT NULL DEFAULT now(),
            search_tsv tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED,
            CONSTRAINT ck_conversation_turns_role CHECK (role IN ('user', 'assistant')),
            CONSTRAINT ck_conversation_turns_position CHECK (position >= 1)
        )
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX uq_conversation_turns_event_position ON conversation_turns (event_id, position)"
    )
    op.execute(
        "CREATE INDEX ix_conversation_turns_context ON conversation_turns "
        f"(user_id, coalesce(persona_id, {NIL}), coalesce(team_id, {NIL}), at DESC)"
    )
    op.execute("CREATE INDEX ix_conversation_turns_at ON conversation_turns (at)")
    op.execute("CREATE INDEX ix_conversation_turns_search_tsv ON conversation_turns USING gin (search_tsv)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS conversation_turns")
    op.execute("ALTER TABLE memory_settings DROP CONSTRAINT IF EXISTS ck_memory_settings_history_days")
    op.execute("ALTER TABLE memory_settings DROP COLUMN IF EXISTS history_days")
    op.execute("ALTER TABLE memory_settings DROP COLUMN IF EXISTS history")
    _replace_memory_tsv(OLD_MEMORY_TSV)
    for table in ("memories", "memory_revisions"):
        op.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS observed_at")
        op.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS evidence")
