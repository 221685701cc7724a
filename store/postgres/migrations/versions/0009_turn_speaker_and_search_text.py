"""Who said a remembered turn, and the text full text finds it by.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

- `conversation_turns.speaker`: the speaker's name when the platform gives one (`name` on an event's
  message); NULL otherwise.
- `conversation_turns.search_text`: `Speaker: text` with the turns around it, so a reply is found by
  what it answers; NULL for turns stored before (their own text is searched, as before).
- `conversation_turns.search_tsv` covers both: the turn's own words at weight A, the others at B.
  The generated column is rebuilt, which rewrites the table (minutes on millions of turns).
"""

from __future__ import annotations

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

TURN_TSV = (
    "setweight(to_tsvector('english'::regconfig, text), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(search_text, '')), 'B')"
)
OLD_TURN_TSV = "to_tsvector('english'::regconfig, text)"


def _rebuild_tsv(expression: str) -> None:
    op.execute("DROP INDEX IF EXISTS ix_conversation_turns_search_tsv")
    op.execute("ALTER TABLE conversation_turns DROP COLUMN search_tsv")
    op.execute(
        f"ALTER TABLE conversation_turns ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS ({expression}) STORED"
    )
    op.execute("CREATE INDEX ix_conversation_turns_search_tsv ON conversation_turns USING gin (search_tsv)")


def upgrade() -> None:
    op.execute("ALTER TABLE conversation_turns ADD COLUMN speaker text")
    op.execute("ALTER TABLE conversation_turns ADD COLUMN search_text text")
    _rebuild_tsv(TURN_TSV)


def downgrade() -> None:
    op.execute("ALTER TABLE conversation_turns DROP COLUMN search_tsv")
    op.execute("ALTER TABLE conversation_turns DROP COLUMN search_text")
    op.execute("ALTER TABLE conversation_turns DROP COLUMN speaker")
    op.execute(
        f"ALTER TABLE conversation_turns ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS ({OLD_TURN_TSV}) STORED"
    )
    op.execute("CREATE INDEX ix_conversation_turns_search_tsv ON conversation_turns USING gin (search_tsv)")
