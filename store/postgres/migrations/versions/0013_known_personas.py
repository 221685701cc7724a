"""`memory_settings.known_personas_only`: events for personas the directory does not know are
dead-lettered instead of remembered (null = inherit; off by default).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE memory_settings ADD COLUMN IF NOT EXISTS known_personas_only boolean")


def downgrade() -> None:
    op.execute("ALTER TABLE memory_settings DROP COLUMN IF EXISTS known_personas_only")
