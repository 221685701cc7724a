"""`processed_events.body_sha256`: the content hash an event was first written with.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05

A duplicate `event_id` is dropped; with the hash, one whose body changed (a publisher reusing ids)
is logged as such rather than passing for a redelivery. Rows written before have none (NULL).
"""

from __future__ import annotations

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE processed_events ADD COLUMN IF NOT EXISTS body_sha256 text")


def downgrade() -> None:
    op.execute("ALTER TABLE processed_events DROP COLUMN IF EXISTS body_sha256")
