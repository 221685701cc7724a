"""`memories.pinned`: a fact a reviewer or the user pinned is in every hint; audit actions `pin`, `unpin`.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06

A constant default makes the new column a catalogue change (no table rewrite). The partial index
holds only pinned rows, so reading an owner's pinned facts for each hint stays a few index entries
however many memories the owner has. Downgrading removes the `pin` and `unpin` audit rows, which the
older constraint does not allow.
"""

from __future__ import annotations

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None

_ACTIONS_BEFORE = "'add', 'update', 'propose', 'approve', 'reject', 'edit', 'archive', 'delete', 'erase'"
_ACTIONS_AFTER = f"{_ACTIONS_BEFORE}, 'pin', 'unpin'"


def _audit_actions(actions: str) -> None:
    op.execute("ALTER TABLE memory_audit DROP CONSTRAINT ck_memory_audit_action")
    op.execute(
        f"ALTER TABLE memory_audit ADD CONSTRAINT ck_memory_audit_action CHECK (action IN ({actions})) NOT VALID"
    )
    op.execute("ALTER TABLE memory_audit VALIDATE CONSTRAINT ck_memory_audit_action")


def upgrade() -> None:
    op.execute("ALTER TABLE memories ADD COLUMN IF NOT EXISTS pinned boolean NOT NULL DEFAULT false")
    op.execute("CREATE INDEX IF NOT EXISTS ix_memories_pinned ON memories (scope, owner_id) WHERE pinned")
    _audit_actions(_ACTIONS_AFTER)


def downgrade() -> None:
    op.execute("DELETE FROM memory_audit WHERE action IN ('pin', 'unpin')")
    _audit_actions(_ACTIONS_BEFORE)
    op.execute("DROP INDEX IF EXISTS ix_memories_pinned")
    op.execute("ALTER TABLE memories DROP COLUMN IF EXISTS pinned")
