"""The Postgres side of the tables (`store.core.schema`): native UUIDs, `real`, pgvector's `vector`,
identity columns, and what only Postgres has: the generated full-text columns with their GIN
indexes, the HNSW index of reviewed memories and the partial indexes of an owner's recent rows."""

from __future__ import annotations

from typing import Any

from pgvector.sqlalchemy import VECTOR
from sqlalchemy import (
    BigInteger,
    Column,
    Computed,
    Identity,
    Index,
    Table,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import REAL, TSVECTOR, UUID

from store.core.schema import SchemaDialect
from store.postgres.dialect import (
    MEMORY_TSV_SQL,
    NIL_UUID_SQL,
    TURN_TEXT_KEY_SQL,
    TURN_TSV_SQL,
    TURN_WINDOW_TSV_SQL,
    hnsw_expression,
    turn_window_includes,
)

__all__ = ["POSTGRES"]


def _as_postgres_prints_it(column: str) -> str:
    # `context_key_sql(column)` laid out as pg_indexes shows it, so the migrated schema compares
    # equal to this one (the comparison does not normalise whitespace)
    return f"\nCASE\n    WHEN {column} IS NULL THEN {NIL_UUID_SQL}\n    ELSE {column}\nEND"


def _search_and_vector_indexes(memories: Table, turns: Table, dim: int) -> None:
    memories.append_column(Column("search_tsv", TSVECTOR, Computed(MEMORY_TSV_SQL, persisted=True)))
    turns.append_column(Column("search_tsv", TSVECTOR, Computed(TURN_TSV_SQL, persisted=True)))
    turns.append_column(Column("text_key", UUID(as_uuid=True), Computed(TURN_TEXT_KEY_SQL, persisted=True)))
    turns.append_column(Column("window_tsv", TSVECTOR, Computed(TURN_WINDOW_TSV_SQL, persisted=True)))
    # a context's recent window read from its index alone (`store.postgres.turns_sql`): a context's
    # turns lie on heap pages among everyone else's, one page visited per turn
    # keyed with CASE where the shared schema coalesces (`store.postgres.dialect.context_key_sql`:
    # an index condition under row-level security too)
    shared = next(i for i in turns.indexes if i.name == "ix_conversation_turns_context")
    turns.indexes.discard(shared)
    Index(
        "ix_conversation_turns_context",
        turns.c.user_id,
        text(_as_postgres_prints_it("persona_id")),
        text(_as_postgres_prints_it("team_id")),
        turns.c.at.desc(),
        postgresql_include=list(turn_window_includes(dim)),
    )
    Index("ix_memories_search_tsv", memories.c.search_tsv, postgresql_using="gin")
    Index("ix_conversation_turns_search_tsv", turns.c.search_tsv, postgresql_using="gin")
    hnsw = hnsw_expression(dim)
    if hnsw is not None:
        expression, opclass = hnsw
        target: Any = memories.c.embedding if expression == "embedding" else text(expression)
        # reviewed memories only: the worker writes pending rows, and an HNSW insert into a
        # large graph costs ~20× a row's other indexes (bench/README.md); a row enters the
        # graph when it is approved. Recall reads active rows only; the near-duplicate read
        # ranks a large owner's pending rows exactly (ix_memories_owner_pending)
        Index(
            "ix_memories_embedding_hnsw",
            target,
            postgresql_using="hnsw",
            postgresql_ops={"embedding": opclass} if expression == "embedding" else {},
            postgresql_where=text("status = 'active'"),
        )
    # an owner's most recent memories by time, on the plain user_id (migration 0016): all of them
    # (the prompt's keys), pending ones (the near-duplicate read's bounded window), and reviewed
    # ones (the read under the owner lock: rows made active since its HNSW read, without the dead
    # versions a rewritten pending row leaves). The reads filter on `user_id = $1` / `IS NULL`,
    # which stay index conditions under row-level security where a coalesce does not
    # (store.postgres.neighbours_sql.user_condition)
    for name, where in (
        ("ix_memories_owner_user_recent", None),
        ("ix_memories_owner_pending", "status = 'pending_review'"),
        ("ix_memories_owner_reviewed", "status = 'active'"),
    ):
        Index(
            name,
            memories.c.scope,
            memories.c.owner_id,
            memories.c.user_id,
            memories.c.updated_at.desc(),
            postgresql_where=None if where is None else text(where),
        )
    # no HNSW index on turns: every event writes a dozen turns, and an HNSW insert into a large
    # graph costs ~20x a row's other indexes (bench/README.md); recall ranks a context's most
    # recent turns exactly through ix_conversation_turns_context (`store.rules.turn_recall.TURN_WINDOW`)


POSTGRES = SchemaDialect(
    guid=Uuid(as_uuid=True),
    # the column contract says REAL; SQLAlchemy's Float would be double precision
    real=REAL(),
    embedding=VECTOR,
    serial=BigInteger(),
    numbered=lambda: (Identity(),),
    nil=NIL_UUID_SQL,
    new_id=func.gen_random_uuid(),
    extend=_search_and_vector_indexes,
)
