"""An index of each owner's most recently reviewed (active) memories.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

The worker's read of a large owner under the owner lock ranks the rows made active in the last few
minutes (`store.neighbours.REVIEW_MARGIN`). Through `ix_memories_owner_recent`, which holds every
status, that scan also stepped over the dead versions a frequently rewritten pending row leaves
behind (a persona's pending fact restated by each of its users: thousands within a minute), under
the lock the persona's other events wait for (bench/README.md). Pending rows never
enter this index, and approvals are rare, so it costs the worker's writes nothing.
"""

from __future__ import annotations

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


NIL = "'00000000-0000-0000-0000-000000000000'::uuid"


def upgrade() -> None:
    op.execute(
        "CREATE INDEX ix_memories_owner_reviewed ON memories "
        f"(scope, owner_id, coalesce(user_id, {NIL}), updated_at DESC) WHERE status = 'active'"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memories_owner_reviewed")
