"""Each owner's most recent memories indexed on the plain `user_id` column.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06

The worker reads an owner's most recent memories for the extraction prompt's existing keys and its
near-duplicate windows (pending rows; rows made active in the last minutes). The owner indexes
keyed the user as `coalesce(user_id, nil)`, and Postgres does not count a `coalesce(...) = $1`
condition as leakproof: under row-level security (the `pmem_app` role) it runs only after the
policy, so it is no index condition, and a `persona_user` owner's read stepped over the rows of
every other user of the persona first (75 ms for the last of 20 users of a 40,000-row persona
instead of 0.6; bench/README.md, "Row-level security"). `user_id = $1` and `user_id IS NULL` are
leakproof. The pending and reviewed windows' indexes (0004, 0005), which only those reads use, are
rebuilt on the plain column; the prompt's gets one beside `ix_memories_owner_recent`, which the
SQLite schema shares.
"""

from __future__ import annotations

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | None = None
depends_on: str | None = None

NIL = "'00000000-0000-0000-0000-000000000000'::uuid"
# name: partial index predicate ("" for none)
INDEXES = {
    "ix_memories_owner_user_recent": "",
    "ix_memories_owner_pending": " WHERE status = 'pending_review'",
    "ix_memories_owner_reviewed": " WHERE status = 'active'",
}


def upgrade() -> None:
    for name, where in INDEXES.items():
        op.execute(f"DROP INDEX IF EXISTS {name}")
        op.execute(f"CREATE INDEX {name} ON memories (scope, owner_id, user_id, updated_at DESC){where}")


def downgrade() -> None:
    for name, where in INDEXES.items():
        op.execute(f"DROP INDEX IF EXISTS {name}")
        if where:
            op.execute(
                f"CREATE INDEX {name} ON memories "
                f"(scope, owner_id, coalesce(user_id, {NIL}), updated_at DESC){where}"
            )
