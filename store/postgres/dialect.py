"""What the Postgres statements of the store share: the nil uuid literal, the text-search
configuration and the full-text documents of memories and turns (generated columns), the
`websearch_to_tsquery` input of a query, and the HNSW index's expression for a dimension."""

from __future__ import annotations

from store.rules.terms import query_terms

NIL_UUID_SQL = "'00000000-0000-0000-0000-000000000000'::uuid"


def context_key_sql(column: str) -> str:
    """`column` with NULL read as the nil uuid, as the turns' context index keys it: a CASE, not a
    coalesce. Under row-level security Postgres applies a condition before the policy's only when it
    cannot leak (leakproof operators, CASE, IS NULL), and it counts a coalesce as leaky: on
    `coalesce(persona_id, nil) = $1` only the user stays an index condition, and a recall sorted all
    of a user's turns to find a context's most recent ones (250 ms instead of 13 for 101,000 turns)."""
    return f"(CASE WHEN {column} IS NULL THEN {NIL_UUID_SQL} ELSE {column} END)"


# pgvector's HNSW indexes `vector` up to 2000 dimensions and `halfvec` up to 4000.
HNSW_VECTOR_MAX_DIM = 2000
HNSW_HALFVEC_MAX_DIM = 4000
TEXT_SEARCH_CONFIG = "english"
# what full text searches in a memory: its key and value (weight A) and its evidence (weight B,
# so a match in what was said counts, but less than one in the fact itself)
MEMORY_TSV_SQL = (
    f"setweight(to_tsvector('{TEXT_SEARCH_CONFIG}'::regconfig, key || ' ' || value), 'A') || "
    f"setweight(to_tsvector('{TEXT_SEARCH_CONFIG}'::regconfig, coalesce(evidence, '')), 'B')"
)
# a turn is found by its own words and, weighing less, those of the turns around it (`search_text`
# holds both; `text` alone for a turn stored without it)
TURN_TSV_SQL = (
    f"setweight(to_tsvector('{TEXT_SEARCH_CONFIG}'::regconfig, text), 'A') || "
    f"setweight(to_tsvector('{TEXT_SEARCH_CONFIG}'::regconfig, coalesce(search_text, '')), 'B')"
)
# one key per message text (`store.rules.turn_recall.same_message` by conversation, position and
# this): the window's de-duplication reads 16 bytes from the context index, not the text
TURN_TEXT_KEY_SQL = "CAST(md5(text) AS uuid)"
# the full text again when it is small enough to ride in the context index beside the vector
# (`turn_window_includes`); NULL for a longer one, which recall reads from the row. The bound is on
# the text form (each lexeme's binary form is at most 4 bytes longer), as a B-tree entry must stay
# under 2,704 bytes; `pmem_bounded_tsv` (migration 0015) takes the document once, where a CASE
# would build it three times on every insert
TURN_WINDOW_TSV_MAX_BYTES = 800
TURN_WINDOW_TSV_SQL = f"pmem_bounded_tsv({TURN_TSV_SQL}, {TURN_WINDOW_TSV_MAX_BYTES})"
# a vector up to this dimension (4 bytes each) rides in the context index too
TURN_WINDOW_VECTOR_MAX_DIM = 384


def websearch_or_query(query: str) -> str | None:
    """Input for Postgres `websearch_to_tsquery` that ORs every term (None when there is none).

    Only word characters survive, so user text cannot inject tsquery syntax (`-`, quotes)."""
    terms = [t for t in query_terms(query) if t != "or"]
    return " or ".join(terms) if terms else None


def turn_window_includes(embedding_dim: int) -> tuple[str, ...]:
    """The columns the turns' context index carries beside its key, so a recall reads a context's
    recent window from the index alone: the vector only up to `TURN_WINDOW_VECTOR_MAX_DIM`."""
    columns = ("id", "persona_id", "team_id", "channel_id", "position", "text_key", "window_tsv")
    return columns + (("embedding",) if embedding_dim <= TURN_WINDOW_VECTOR_MAX_DIM else ())


def hnsw_expression(embedding_dim: int) -> tuple[str, str] | None:
    """(indexed expression, operator class) of the HNSW index for a dimension; None above 4000."""
    if embedding_dim <= HNSW_VECTOR_MAX_DIM:
        return "embedding", "vector_cosine_ops"
    if embedding_dim <= HNSW_HALFVEC_MAX_DIM:
        return f"(embedding::halfvec({embedding_dim}))", "halfvec_cosine_ops"
    return None
