"""Postgres: a turn recall reads a context's recent window from the context index alone (an
index-only scan: a context's turns lie one per heap page among everyone else's), and the index
carries the vector only where an entry stays under the B-tree's size limit."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from extraction.embeddings import HashingEmbedder, hashing_vector
from store.migrate import migrate
from store.model import NewTurn
from store.postgres.dialect import turn_window_includes
from store.postgres.params import float4_array, register_vector_dumper
from store.postgres.turns_sql import turn_recall_sql, turn_vector_sql
from store.rules.turn_recall import TURN_STATS_SAMPLE, TURN_WINDOW
from tests.database_role import DATABASE_ROLE
from tests.store.conftest import DIM, truncate
from tests.store.store_testkit import postgres_store

NIL = uuid.UUID(int=0)
SAID = datetime(2026, 3, 4, 10, 30, tzinfo=UTC)


def said(user: uuid.UUID, position: int, text: str) -> NewTurn:
    return NewTurn(
        channel_id=uuid.UUID(int=7),
        user_id=user,
        persona_id=None,
        team_id=None,
        role="user",
        text=text,
        at=SAID + timedelta(minutes=position),
        position=position,
    )


def plan(url: str, sql: str, params: dict[str, Any]) -> str:
    """EXPLAIN ANALYZE of a statement as the product's role runs it."""
    with psycopg.connect(url) as conn:
        register_vector_dumper(conn)
        conn.execute(f"SET ROLE {DATABASE_ROLE}")
        # a few rows: the planner would rather read the table; what is checked is that the index
        # holds every column the statement reads
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET enable_bitmapscan = off")
        rows = conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql, params).fetchall()
    return "\n".join(str(row[0]) for row in rows)


async def test_the_recall_reads_the_window_once_from_the_context_index(pg_url: str) -> None:
    truncate(pg_url)
    store = postgres_store(pg_url, HashingEmbedder(dim=DIM))
    user = uuid.uuid4()
    try:
        texts = [f"the lighthouse keeper logged ship number {n}" for n in range(40)]
        # the context among others', as it always is: the planner reads it through its index
        for someone in [user] + [uuid.uuid4() for _ in range(15)]:
            turns = [said(someone, i + 1, t) for i, t in enumerate(texts)]
            await store.writes.write_event(event_id=uuid.uuid4(), memories=[], turns=turns)
    finally:
        await store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # an index-only scan skips the heap only for pages the visibility map marks all-visible
        conn.execute("VACUUM ANALYZE conversation_turns")
    context = {"user_id": user, "persona": NIL, "team": NIL, "window": TURN_WINDOW, "k": 10}
    vector = float4_array(hashing_vector("keeper", DIM))
    recall = plan(
        pg_url,
        turn_recall_sql(dim=DIM, text=True),
        {
            **context,
            "sample": TURN_STATS_SAMPLE,
            "words": ["keeper"],
            "qv": vector,
            "tq": "keeper",
            "k1": 1.2,
            "b": 0.75,
            "context_weight": 0.75,
        },
    )
    # the vector ranking alone, when the words' shares change the query vector
    window = plan(pg_url, turn_vector_sql(dim=DIM), {**context, "qv": vector})
    # one read of the window per statement
    assert recall.count("using ix_conversation_turns_context") == 1, recall
    for statement in (recall, window):
        assert "Index Only Scan using ix_conversation_turns_context" in statement, statement
        assert "Heap Fetches: 0" in statement, statement
        # the persona and the team bound the scan under row-level security too (a coalesce would
        # leave only the user: every turn of the user read and sorted)
        assert all(
            "persona_id IS NULL" in cond and "team_id IS NULL" in cond
            for cond in context_conditions(statement)
        )


def context_conditions(statement: str) -> list[str]:
    """The Index Cond of each scan of the context index in an EXPLAIN's text (at least one)."""
    lines = statement.splitlines()
    found = [
        next(line for line in lines[i + 1 :] if "Index Cond:" in line)
        for i, line in enumerate(lines)
        if "using ix_conversation_turns_context" in line
    ]
    assert found, statement
    return found


async def test_the_vector_rides_in_the_context_index_up_to_384_dimensions(
    new_database: Callable[[], str],
) -> None:
    assert "embedding" in turn_window_includes(384)
    assert "embedding" not in turn_window_includes(768)
    url = new_database()
    migrate(url, 768)
    with psycopg.connect(url) as conn:
        [definition] = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_conversation_turns_context'"
        ).fetchone() or [""]
        # an entry of a 768-dimension vector (3 kB) would pass the B-tree's 2,704-byte limit
        assert 'INCLUDE (id, persona_id, team_id, channel_id, "position", text_key, window_tsv)' in definition
    # without the vector in the index, recall reads the window's rows from the table
    store = postgres_store(url, HashingEmbedder(dim=768))
    user = uuid.uuid4()
    try:
        turns = [said(user, 1, "the lighthouse keeper waved"), said(user, 2, "we ate in the harbour")]
        await store.writes.write_event(event_id=uuid.uuid4(), memories=[], turns=turns)
        hits = await store.turns.recall_turns(user, None, "lighthouse keeper", 1)
    finally:
        await store.close()
    assert [h.turn.text for h in hits] == ["the lighthouse keeper waved"]
