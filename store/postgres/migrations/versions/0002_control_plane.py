"""Control plane: team boundary on memories, erasure tombstones, retention settings, API keys.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

- `memories.team_id` (nullable): the team of the conversation that wrote the memory. A memory with a
  team is recalled, listed, merged and de-duplicated only in that team's context, so the team is part
  of the row's identity: the unique key becomes (scope, owner, user, team, key).
- `memory_audit.team_id`, and the action `erase`: a content-free tombstone left by erasure.
- `memory_settings.pending_days` / `archived_days`: retention (null = inherit).
- `api_keys`: service credentials, stored as SHA-256 hashes.
- Indexes for the review queue (newest pending first) and for erasing everything about a user.
"""

from __future__ import annotations

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

NIL = "'00000000-0000-0000-0000-000000000000'::uuid"
ACTIONS = "'add', 'update', 'propose', 'approve', 'reject', 'edit', 'archive', 'delete', 'erase'"


def upgrade() -> None:
    op.execute("ALTER TABLE memories ADD COLUMN team_id uuid")
    op.execute("DROP INDEX IF EXISTS uq_memories_scope_owner_user_key")
    op.execute(
        "CREATE UNIQUE INDEX uq_memories_scope_owner_user_team_key ON memories "
        f"(scope, owner_id, coalesce(user_id, {NIL}), coalesce(team_id, {NIL}), key)"
    )
    op.execute(
        "CREATE INDEX ix_memories_pending_created ON memories (created_at DESC, id DESC) "
        "WHERE status = 'pending_review'"
    )
    op.execute("CREATE INDEX ix_memories_user_id ON memories (user_id) WHERE scope = 'persona_user'")
    op.execute("CREATE INDEX ix_memories_team_id ON memories (team_id) WHERE team_id IS NOT NULL")
    op.execute(
        "CREATE INDEX ix_memory_revisions_pending_created ON memory_revisions (created_at DESC, id DESC) "
        "WHERE status = 'pending'"
    )

    op.execute("ALTER TABLE memory_audit ADD COLUMN team_id uuid")
    op.execute("ALTER TABLE memory_audit DROP CONSTRAINT ck_memory_audit_action")
    op.execute(f"ALTER TABLE memory_audit ADD CONSTRAINT ck_memory_audit_action CHECK (action IN ({ACTIONS}))")
    op.execute("CREATE INDEX ix_memory_audit_owner_id ON memory_audit (owner_id)")
    op.execute("CREATE INDEX ix_memory_audit_user_id ON memory_audit (user_id) WHERE user_id IS NOT NULL")

    op.execute("ALTER TABLE memory_settings ADD COLUMN pending_days integer")
    op.execute("ALTER TABLE memory_settings ADD COLUMN archived_days integer")
    op.execute(
        "ALTER TABLE memory_settings ADD CONSTRAINT ck_memory_settings_retention CHECK "
        "((pending_days IS NULL OR pending_days >= 1) AND (archived_days IS NULL OR archived_days >= 1))"
    )

    op.execute(
        """
        CREATE TABLE api_keys (
            id uuid PRIMARY KEY,
            name text NOT NULL,
            key_hash text NOT NULL,
            prefix text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            last_used_at timestamptz,
            revoked_at timestamptz
        )
        """
    )
    op.execute("CREATE UNIQUE INDEX uq_api_keys_key_hash ON api_keys (key_hash)")
    op.execute("CREATE UNIQUE INDEX uq_api_keys_active_name ON api_keys (name) WHERE revoked_at IS NULL")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS api_keys")
    op.execute("ALTER TABLE memory_settings DROP CONSTRAINT IF EXISTS ck_memory_settings_retention")
    op.execute("ALTER TABLE memory_settings DROP COLUMN IF EXISTS archived_days")
    op.execute("ALTER TABLE memory_settings DROP COLUMN IF EXISTS pending_days")
    op.execute("DROP INDEX IF EXISTS ix_memory_audit_user_id")
    op.execute("DROP INDEX IF EXISTS ix_memory_audit_owner_id")
    op.execute("DELETE FROM memory_audit WHERE action = 'erase'")
    op.execute("ALTER TABLE memory_audit DROP CONSTRAINT ck_memory_audit_action")
    op.execute(
        "ALTER TABLE memory_audit ADD CONSTRAINT ck_memory_audit_action CHECK (action IN "
        "('add', 'update', 'propose', 'approve', 'reject', 'edit', 'archive', 'delete'))"
    )
    op.execute("ALTER TABLE memory_audit DROP COLUMN IF EXISTS team_id")
    op.execute("DROP INDEX IF EXISTS ix_memory_revisions_pending_created")
    op.execute("DROP INDEX IF EXISTS ix_memories_team_id")
    op.execute("DROP INDEX IF EXISTS ix_memories_user_id")
    op.execute("DROP INDEX IF EXISTS ix_memories_pending_created")
    op.execute("DROP INDEX IF EXISTS uq_memories_scope_owner_user_team_key")
    op.execute(
        "CREATE UNIQUE INDEX uq_memories_scope_owner_user_key ON memories "
        f"(scope, owner_id, coalesce(user_id, {NIL}), key)"
    )
    op.execute("ALTER TABLE memories DROP COLUMN IF EXISTS team_id")
