"""Embedding identity: which provider, model and dimension made the stored vectors; an index of
each owner's most recent memories.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

- `pmem_embedding` (one row): provider, model, dim, written by `pmem migrate` from the configured
  embedder. Worker, recall and serve refuse to run with another model (two vector spaces in one
  column would silently spoil similarity); `pmem reembed` switches models and keeps its checkpoint
  in `reembed_provider` / `reembed_model` / `reembed_after` (resumable).
"""

from __future__ import annotations

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


NIL = "'00000000-0000-0000-0000-000000000000'::uuid"


def upgrade() -> None:
    # an owner's most recently updated memories, read without sorting all of them
    op.execute(
        "CREATE INDEX ix_memories_owner_recent ON memories "
        f"(scope, owner_id, coalesce(user_id, {NIL}), updated_at DESC)"
    )
    op.execute(
        "CREATE TABLE pmem_embedding ("
        " id integer PRIMARY KEY,"
        " provider text NOT NULL,"
        " model text NOT NULL,"
        " dim integer NOT NULL,"
        " reembed_provider text,"
        " reembed_model text,"
        " reembed_after uuid,"
        " updated_at timestamptz NOT NULL DEFAULT now(),"
        " CONSTRAINT ck_pmem_embedding_one_row CHECK (id = 1))"
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS pmem_embedding")
    op.execute("DROP INDEX IF EXISTS ix_memories_owner_recent")
