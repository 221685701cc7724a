"""Postgres-only recall behaviour: the HNSW iterative scan keeps owner-filtered vector search complete."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import numpy as np
import psycopg
import pytest

from extraction.embeddings import HashingEmbedder
from store.core.schema import build_schema
from store.migrate import migrate
from store.postgres.params import float4_array
from store.postgres.recall_sql import RecallTuning, recall_sql, session_settings_sql
from store.postgres.schema import POSTGRES
from store.postgres.store import PostgresMemoryStore
from store.postgres.write_sql import insert_new_statement
from store.rules.recall import resolve_scopes
from tests.factories import user_fact

DIM = 16
OWNER_ROWS = 20
OTHER_ROWS = 3000


def _populate(url: str, owner: uuid.UUID) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(
            f"""
            INSERT INTO memories (scope, owner_id, key, value, status, embedding)
            SELECT 'user', CASE WHEN i <= {OWNER_ROWS} THEN %s::uuid ELSE gen_random_uuid() END,
                   'key ' || i, 'value ' || i, 'active',
                   (SELECT array_agg(random() - 0.5) FROM generate_series(1, {DIM}) WHERE i > 0)::vector
            FROM generate_series(1, {OWNER_ROWS + OTHER_ROWS}) AS i
            """,
            (owner,),
        )
        conn.execute("ANALYZE memories")


async def test_owner_filtered_hnsw_scan_returns_every_owner_row(new_database: Callable[[], str]) -> None:
    url = new_database()
    migrate(url, DIM)
    owner = uuid.uuid4()
    _populate(url, owner)
    store = PostgresMemoryStore(url, HashingEmbedder(dim=DIM), tuning=RecallTuning(ef_search=40))
    sql = recall_sql(owners=resolve_scopes(owner, None), branches=["vector"], embedding_dim=DIM)
    params = {
        "k": 30,
        "user_id": owner,
        "persona_id": None,
        "team_id": None,
        "qv": float4_array([0.1] * DIM),
    }

    async def vector_rows(*settings: str) -> tuple[int, str]:
        # a pooled connection of the store, so it carries the store's session settings
        async with store.engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            async with driver.transaction(force_rollback=True), driver.cursor() as cur:
                # make the planner walk the HNSW index instead of the (scope, owner_id, status) btree
                for setting in ("enable_sort = off", "enable_seqscan = off", *settings):
                    await cur.execute(f"SET LOCAL {setting}")
                await cur.execute("EXPLAIN " + sql, params)
                plan = "\n".join(r[0] for r in await cur.fetchall())
                await cur.execute(sql, params)
                rows = await cur.fetchall()
        # `source` follows the memory columns
        return sum(1 for r in rows if r[-3] == "vector"), plan

    try:
        assert (await store.session_settings())["hnsw.iterative_scan"] == "relaxed_order"
        found, plan = await vector_rows()
        assert "ix_memories_embedding_hnsw" in plan
        assert found == OWNER_ROWS
        # without the iterative scan the same plan silently loses most of the owner's rows
        lost, _ = await vector_rows("hnsw.iterative_scan = off")
        assert lost < OWNER_ROWS
    finally:
        await store.close()


async def test_pooled_connections_carry_the_tuning(pg_url: str) -> None:
    store = PostgresMemoryStore(
        pg_url, HashingEmbedder(dim=384), tuning=RecallTuning(ef_search=64, max_scan_tuples=5000)
    )
    try:
        assert await store.session_settings() == {
            "hnsw.iterative_scan": "relaxed_order",
            "hnsw.ef_search": "64",
            "hnsw.max_scan_tuples": "5000",
            "plan_cache_mode": "force_custom_plan",
            "random_page_cost": "1.1",
            "TimeZone": "UTC",
        }
    finally:
        await store.close()


async def test_tuning_can_leave_the_planner_settings_to_the_server(pg_url: str) -> None:
    store = PostgresMemoryStore(
        pg_url, HashingEmbedder(dim=384), tuning=RecallTuning(plan_cache_mode=None, random_page_cost=None)
    )
    try:
        settings = await store.session_settings()
        assert (settings["plan_cache_mode"], settings["random_page_cost"]) == ("auto", "4")
    finally:
        await store.close()


def test_an_unknown_plan_cache_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="plan_cache_mode must be"):
        session_settings_sql(RecallTuning(plan_cache_mode="always"))


def test_arrays_bound_as_arrays_read_back_as_the_same_values_in_postgres(pg_url: str) -> None:
    from datetime import UTC, datetime

    texts = [
        "plain",
        'with "quotes"',
        "back\\slash",
        "a,b",
        "{braces}",
        "NULL",
        "",
        " padded ",
        "é ✓ 🌍",
        None,
    ]
    ids = [uuid.uuid4(), None]
    when = [datetime(2026, 12, 1, 9, 30, tzinfo=UTC), None]
    starts = [1, None, 385]
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT CAST(%b AS text[]), CAST(%b AS uuid[]), CAST(%b AS float8[]), CAST(%b AS timestamptz[]), "
            "CAST(%b AS int[]), CAST(%b AS uuid[]), CAST(%b AS text[])",
            (texts, ids, [0.9, 1e-7], when, starts, [None, None], []),
        ).fetchone()
    # a column of NULLs only, or of no rows, has no element type to send: it goes as text, cast alike
    assert row == (texts, ids, [0.9, 1e-7], when, starts, [None, None], [])


def test_a_float4_array_parameter_reads_back_as_the_float32_vector(pg_url: str) -> None:
    from store.postgres.params import register_vector_dumper

    values = [0.1, -2.5, 3.0000001, 1e-30]
    float32 = [float(x) for x in np.asarray(values, dtype=np.float32)]
    with psycopg.connect(pg_url) as conn:
        register_vector_dumper(conn)
        row = conn.execute(
            "SELECT CAST(CAST(%s AS real[]) AS vector(4)), CAST(%s AS real[]), (CAST(%s AS real[]))[3:4]",
            (float4_array(values), float4_array([]), float4_array(values)),
        ).fetchone()
    assert row is not None
    assert [float(np.float32(x)) for x in row[0].strip("[]").split(",")] == float32
    assert row[1] == []
    assert [float(np.float32(x)) for x in row[2]] == float32[2:4]


async def test_rows_with_and_without_embeddings_are_inserted_in_one_statement(
    new_database: Callable[[], str],
) -> None:
    from sqlalchemy import text

    url = new_database()
    migrate(url, DIM)
    store = PostgresMemoryStore(url, HashingEmbedder(dim=DIM))
    owner = uuid.uuid4()
    rows = [user_fact(owner, key, f"value of {key}", confidence=0.9) for key in ("a", "b", "c")]
    vectors = [[0.5] * DIM, None, [0.25] * DIM]
    sql, params = insert_new_statement(
        build_schema(DIM, POSTGRES),
        [uuid.uuid4() for _ in rows],
        rows,
        vectors,
        actor="test",
        event_id=None,
    )
    async with store.engine.begin() as conn:
        await conn.exec_driver_sql(sql, params)
        stored = (
            await conn.execute(
                text("SELECT key, embedding::text FROM memories WHERE owner_id = :o ORDER BY key"),
                {"o": owner},
            )
        ).all()
    await store.close()
    assert [tuple(row) for row in stored] == [
        ("a", "[" + ",".join(["0.5"] * DIM) + "]"),
        ("b", None),
        ("c", "[" + ",".join(["0.25"] * DIM) + "]"),
    ]
