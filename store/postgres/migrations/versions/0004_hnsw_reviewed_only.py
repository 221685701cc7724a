"""The HNSW index holds reviewed (active) memories only; an index of each owner's most recent
pending memories.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

The worker writes every fact as `pending_review`, and inserting a row into a large HNSW graph was
most of the database's work per event on a populated store (bench/README.md, "What the
worker's design rests on"). Recall reads active memories only, so pending rows no longer enter the graph; a
row is added when it is approved. The near-duplicate read of a large owner ranks its most recent
pending rows exactly through `ix_memories_owner_pending`.

The upgrade rebuilds the HNSW index: minutes on a store of a few hundred thousand memories
(raise `maintenance_work_mem` for the session that runs `pmem migrate` to make it faster).
"""

from __future__ import annotations

from alembic import context, op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


NIL = "'00000000-0000-0000-0000-000000000000'::uuid"


def _dim() -> int:
    return int(
        context.config.attributes.get("embedding_dim")
        or context.config.get_main_option("embedding_dim")
        or 384
    )


def _hnsw_index(dim: int, name: str, where: str) -> str | None:
    # pgvector's HNSW takes `vector` up to 2000 dimensions and `halfvec` up to 4000
    if dim <= 2000:
        target = "embedding vector_cosine_ops"
    elif dim <= 4000:
        target = f"(embedding::halfvec({dim})) halfvec_cosine_ops"
    else:
        return None
    return f"CREATE INDEX {name} ON memories USING hnsw ({target}){where}"


def _replace_hnsw(where: str) -> None:
    # build the new graph beside the old one (CREATE INDEX lets reads through, recall keeps its
    # index), then swap: the DROP's exclusive lock is held only from here to the commit
    index = _hnsw_index(_dim(), "ix_memories_embedding_hnsw_new", where)
    if index is None:
        return
    op.execute(index)
    op.execute("DROP INDEX IF EXISTS ix_memories_embedding_hnsw")
    op.execute("ALTER INDEX ix_memories_embedding_hnsw_new RENAME TO ix_memories_embedding_hnsw")


def upgrade() -> None:
    op.execute(
        "CREATE INDEX ix_memories_owner_pending ON memories "
        f"(scope, owner_id, coalesce(user_id, {NIL}), updated_at DESC) WHERE status = 'pending_review'"
    )
    _replace_hnsw(" WHERE status = 'active'")


def downgrade() -> None:
    _replace_hnsw("")
    op.execute("DROP INDEX IF EXISTS ix_memories_owner_pending")
