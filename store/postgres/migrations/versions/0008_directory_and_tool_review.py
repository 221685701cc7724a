"""Display names of teams, personas and users, and the `review_tool_saves` setting.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

`directory` keeps the latest name the platform gave each team, persona or user (from events or
`PUT /v1/directory/...`), so the web UI can show names instead of UUIDs. `review_tool_saves` decides
whether a memory a model saves through a tool is active at once or waits for review.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("memory_settings", sa.Column("review_tool_saves", sa.Boolean(), nullable=True))
    op.create_table(
        "directory",
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("kind", "id"),
        sa.CheckConstraint("kind IN ('team', 'persona', 'user')", name="ck_directory_kind"),
    )


def downgrade() -> None:
    op.drop_table("directory")
    op.drop_column("memory_settings", "review_tool_saves")
