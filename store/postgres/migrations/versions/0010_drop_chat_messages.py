"""Drop `chat_messages`, a table nothing reads or writes.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04

The conversation window it was made for is served by `conversation_turns` (turns remembered per
user, persona and team, recalled, exported and erased with the person); `chat_messages` kept no
user id, so nothing could have erased its rows for a person.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.execute("DROP TABLE IF EXISTS chat_messages")


def downgrade() -> None:
    op.create_table(
        "chat_messages",
        sa.Column("id", sa.BigInteger(), sa.Identity(), primary_key=True),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("room_id", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("role IN ('system', 'user', 'assistant', 'tool')", name="ck_chat_messages_role"),
    )
    op.create_index("ix_chat_messages_agent_room", "chat_messages", ["agent_id", "room_id", "id"])
