"""Web-UI sessions of their own: a sign-in token opens one, sign-out ends it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

The UI's cookie used to be the platform's JWT itself, a full API credential that outlived
sign-out. A session is now a random cookie whose SHA-256 is stored here with who signed in; the
sign-in token's id is unique, so each sign-in link opens one session only.
"""

from __future__ import annotations

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE ui_sessions (
            digest text PRIMARY KEY,
            sign_in_id text NOT NULL,
            subject uuid NOT NULL,
            role text NOT NULL,
            teams text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz NOT NULL,
            sign_in_expires_at timestamptz NOT NULL,
            ended_at timestamptz
        )
        """
    )
    op.execute("CREATE UNIQUE INDEX uq_ui_sessions_sign_in_id ON ui_sessions (sign_in_id)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS ui_sessions")
