"""A context's recent turns read from its index alone.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06

A turn recall ranks a context's most recent turns; each lay on a heap page of its own (a context's
turns arrive among everyone else's), so a recall visited a page per turn, twice (the word statistics,
then the ranking). The context index now carries what the ranking reads, in key order:

- `conversation_turns.text_key`: the md5 of the text as a uuid, what tells two stored copies of one
  message apart from another message at the same position, instead of the text itself;
- `conversation_turns.window_tsv`: `search_tsv` again when its text form, plus 4 bytes a lexeme,
  fits in 800 bytes (`pmem_bounded_tsv`; NULL otherwise: recall reads `search_tsv` from the row),
  so an index entry stays under the B-tree's 2,704 bytes;
- `ix_conversation_turns_context`, its persona and team keyed with CASE instead of coalesce (a
  condition row-level security keeps an index condition), INCLUDE (id, persona_id, team_id,
  channel_id, position, text_key, window_tsv) and the embedding up to 384 dimensions.

Both columns are generated, which rewrites the table, and the index is rebuilt (minutes on millions
of turns; the index grows by about a row's size). Index-only reads need the visibility map: the
table's insert-driven autovacuum starts after 1 % of its rows instead of 20 %.
"""

from __future__ import annotations

from alembic import context, op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | None = None
depends_on: str | None = None

NIL = "'00000000-0000-0000-0000-000000000000'::uuid"
TURN_TSV = (
    "setweight(to_tsvector('english'::regconfig, text), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(search_text, '')), 'B')"
)
WINDOW_TSV = f"pmem_bounded_tsv({TURN_TSV}, 800)"
# a function, so the document is built once (its argument), not three times as in a CASE; an
# argument this costly keeps Postgres from inlining it
BOUNDED_TSV = """
CREATE OR REPLACE FUNCTION pmem_bounded_tsv(document tsvector, max_bytes integer) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN octet_length(CAST(document AS text)) + 4 * length(document) <= max_bytes
                  THEN document END $$
"""
TEXT_KEY = "CAST(md5(text) AS uuid)"
# persona and team keyed with CASE, which row-level security lets stay an index condition (it
# counts a coalesce as leaky: store.postgres.dialect.context_key_sql); 0014 keyed them coalesced
CONTEXT_KEY = (
    f"user_id, (CASE WHEN persona_id IS NULL THEN {NIL} ELSE persona_id END), "
    f"(CASE WHEN team_id IS NULL THEN {NIL} ELSE team_id END), at DESC"
)
EARLIER_CONTEXT_KEY = f"user_id, coalesce(persona_id, {NIL}), coalesce(team_id, {NIL}), at DESC"


def _dim() -> int:
    return int(
        context.config.attributes.get("embedding_dim")
        or context.config.get_main_option("embedding_dim")
        or 384
    )


def upgrade() -> None:
    include = "id, persona_id, team_id, channel_id, position, text_key, window_tsv"
    if _dim() <= 384:
        include += ", embedding"
    op.execute(BOUNDED_TSV)
    op.execute(
        "ALTER TABLE conversation_turns "
        f"ADD COLUMN text_key uuid GENERATED ALWAYS AS ({TEXT_KEY}) STORED, "
        f"ADD COLUMN window_tsv tsvector GENERATED ALWAYS AS ({WINDOW_TSV}) STORED"
    )
    op.execute("DROP INDEX IF EXISTS ix_conversation_turns_context")
    op.execute(
        f"CREATE INDEX ix_conversation_turns_context ON conversation_turns ({CONTEXT_KEY}) INCLUDE ({include})"
    )
    op.execute("ALTER TABLE conversation_turns SET (autovacuum_vacuum_insert_scale_factor = 0.01)")


def downgrade() -> None:
    op.execute("ALTER TABLE conversation_turns RESET (autovacuum_vacuum_insert_scale_factor)")
    op.execute("DROP INDEX IF EXISTS ix_conversation_turns_context")
    op.execute("ALTER TABLE conversation_turns DROP COLUMN window_tsv, DROP COLUMN text_key")
    op.execute(f"CREATE INDEX ix_conversation_turns_context ON conversation_turns ({EARLIER_CONTEXT_KEY})")
    op.execute("DROP FUNCTION IF EXISTS pmem_bounded_tsv(tsvector, integer)")
