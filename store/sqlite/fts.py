"""The SQLite store's full text: an FTS5 table (`memories_fts`) that triggers keep in step with
`memories`, whose `owner` and `team` tokens let a recall's MATCH read only the caller's owners'
posting lists in its team context, and the `bm25()` expression that scores it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from store.model import OwnerRef

# FTS5 mirror of memories.key and memories.value, plus one `owner` token per active row naming its
# owner (`owner_token`), so a recall's MATCH reads only the caller's owners' posting lists. Its
# `memory_id` links back to memories.id (the rowid of a table without an INTEGER PRIMARY KEY may
# change on VACUUM, so it is not the link). The trailing 0 keeps the porter stemmer off the token.
_OWNER_TOKEN_SQL = (
    "CASE WHEN {t}.status = 'active' THEN "
    "(CASE {t}.scope WHEN 'user' THEN 'u' WHEN 'persona' THEN 'p' ELSE 'q' END) "
    "|| replace({t}.owner_id, '-', '') "
    "|| (CASE WHEN {t}.scope = 'persona_user' THEN replace(coalesce({t}.user_id, ''), '-', '') ELSE '' END) "
    "|| '0' ELSE '' END"
)
# the team of a row: `t0` for none, else `t<hex>0`
_TEAM_TOKEN_SQL = "'t' || replace(coalesce({t}.team_id, ''), '-', '') || '0'"
FTS_COLUMNS = ("memory_id", "owner", "team", "key", "value", "evidence")


def _fts_values(t: str) -> str:
    """The `FTS_COLUMNS` values of the memories row `t` (`new` in a trigger, an alias in a SELECT)."""
    return (
        f"{t}.id, {_OWNER_TOKEN_SQL.format(t=t)}, {_TEAM_TOKEN_SQL.format(t=t)}, "
        f"{t}.key, {t}.value, coalesce({t}.evidence, '')"
    )


_FTS_ROW = f"({', '.join(FTS_COLUMNS)}) VALUES ({_fts_values('new')})"
FTS_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5("
    "memory_id UNINDEXED, owner, team, key, value, evidence, tokenize = 'porter unicode61')",
    f"CREATE TRIGGER IF NOT EXISTS memories_fts_insert AFTER INSERT ON memories BEGIN "
    f"INSERT INTO memories_fts {_FTS_ROW}; END",
    "CREATE TRIGGER IF NOT EXISTS memories_fts_delete AFTER DELETE ON memories BEGIN "
    "DELETE FROM memories_fts WHERE memory_id = old.id; END",
    f"CREATE TRIGGER IF NOT EXISTS memories_fts_update AFTER UPDATE ON memories "
    f"BEGIN DELETE FROM memories_fts WHERE memory_id = old.id; INSERT INTO memories_fts {_FTS_ROW}; END",
)
FTS_BACKFILL = (
    f"INSERT INTO memories_fts ({', '.join(FTS_COLUMNS)}) SELECT {_fts_values('m')} FROM memories m "
    "WHERE NOT EXISTS (SELECT 1 FROM memories_fts f WHERE f.memory_id = m.id)"
)


# a query word found in what was said (the evidence) counts this much of one found in the value
# (Postgres: the evidence's lexemes carry weight B in the tsvector)
EVIDENCE_TEXT_WEIGHT = 0.5


def bm25_expression(key_weight: float) -> str:
    """FTS5 `bm25()` with its column weights: memory_id, owner and team carry no relevance, the key
    `key_weight` (`ScoreFusion.key_weight`), the value 1 and the evidence `EVIDENCE_TEXT_WEIGHT`."""
    return f"bm25(memories_fts, 0.0, 0.0, 0.0, {float(key_weight)!r}, 1.0, {EVIDENCE_TEXT_WEIGHT!r})"


def owner_token(owner: OwnerRef) -> str:
    """The `owner` token the triggers write for an active row of this owner (see _OWNER_TOKEN_SQL)."""
    prefix = {"user": "u", "persona": "p", "persona_user": "q"}[owner.scope]
    user = owner.user_id.hex if owner.scope == "persona_user" and owner.user_id is not None else ""
    return f"{prefix}{owner.owner_id.hex}{user}0"


def team_tokens(team_id: uuid.UUID | None) -> list[str]:
    """The `team` tokens visible in a team context: rows of no team, and of `team_id`."""
    return ["t0"] if team_id is None else ["t0", f"t{team_id.hex}0"]


def owner_match(owners: Sequence[OwnerRef], team_id: uuid.UUID | None, words_match: str) -> str:
    """An FTS5 MATCH expression: the owners' active rows (`owner` column) visible in the team context
    (`team` column) matching the words (in `key`, `value` or `evidence`)."""
    tokens = " OR ".join(f'"{owner_token(owner)}"' for owner in owners)
    teams = " OR ".join(f'"{token}"' for token in team_tokens(team_id))
    return f"owner : ({tokens}) AND team : ({teams}) AND {{key value evidence}} : ({words_match})"
