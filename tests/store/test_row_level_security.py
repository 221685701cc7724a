"""Row-level security on a real Postgres: the team boundary held by the database itself.

The product connects as `pmem_app` (`PostgresMemoryStore(database_role=…)`); every transaction it
opens carries the running task's team scope (`store.team_scope`). A query with its team filter
removed, sent on the product's own connections as team A, must return none of team B's rows."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from extraction.embeddings import HashingEmbedder
from store.errors import TeamBoundaryViolation
from store.migrate import migrate
from store.model import NewMemory, OwnerRef
from store.postgres import neighbours_sql
from store.postgres.params import float4_array, register_vector_dumper
from store.postgres.store import PostgresMemoryStore
from store.team_scope import platform_scope, team_scope, teams_scope
from tests.store.as_the_worker import event_of, write_as_the_worker
from tests.store.store_testkit import postgres_store

DIM = 384
TEAM_A, TEAM_B = uuid.uuid4(), uuid.uuid4()
APP_ROLE = "pmem_app"

# the planted bug: each table read without its team filter
UNFILTERED = {
    "memories": "SELECT team_id FROM memories",
    "conversation_turns": "SELECT team_id FROM conversation_turns",
    "memory_audit": "SELECT team_id FROM memory_audit",
    "memory_revisions": "SELECT m.team_id FROM memory_revisions r JOIN memories m ON m.id = r.memory_id",
}

# what every table with team data must have, beside each table with a `team_id` column
GUARDED_WITHOUT_TEAM_ID = ("memory_revisions", "memory_settings", "directory")


@pytest.fixture(autouse=True)
def the_test_sees_every_team() -> None:
    """No ambient scope here: each check enters the scope it tests."""


@pytest.fixture(scope="module")
def rls_url(new_database: Callable[[], str]) -> str:
    """A migrated database for this module."""
    url = new_database()
    migrate(url, DIM)
    return url


@pytest.fixture
async def product(rls_url: str) -> AsyncIterator[PostgresMemoryStore]:
    """The product's store as it runs in production: the `pmem_app` role, owning no table; each
    team's conversation written as the worker writes it, in that team's scope."""
    with psycopg.connect(rls_url, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE memories, memory_revisions, memory_audit, processed_events, conversation_turns, "
            "memory_settings, directory CASCADE"
        )
    store = postgres_store(rls_url, HashingEmbedder(dim=DIM), database_role=APP_ROLE)
    user = uuid.uuid4()
    for team in (TEAM_A, TEAM_B):
        first, second = (
            event_of([line, "Nice!"], user=user, channel=uuid.uuid4(), team=team)
            for line in ("I work at a bakery in Porto", "I work at a school in Porto now")
        )
        with team_scope(teams_scope([team])):
            (memory_id,) = await write_as_the_worker(store, first, [("employer", "Works at a bakery", (1,))])
            await store.review.approve(memory_id, actor="test")
            # a reviewed memory restated with another value: a revision is proposed
            await write_as_the_worker(store, second, [("employer", "Works at a school", (1,))])
            await store.settings.put_settings(level="team", target_id=team, min_confidence=0.4)
    yield store
    await store.close()


def owner_counts(url: str, sql: str) -> dict[uuid.UUID | None, int]:
    """Rows per team of `sql`, read as the tables' owner (row-level security does not apply)."""
    with psycopg.connect(url, autocommit=True) as conn:
        teams = [row[0] for row in conn.execute(sql).fetchall()]
    return {team: teams.count(team) for team in set(teams)}


async def test_a_query_without_its_team_filter_returns_none_of_another_teams_rows(
    product: PostgresMemoryStore, rls_url: str
) -> None:
    for table, sql in UNFILTERED.items():
        # the rows are there: the table's owner sees both teams
        stored = owner_counts(rls_url, sql)
        assert stored.get(TEAM_A, 0) > 0 and stored.get(TEAM_B, 0) > 0, (table, stored)
        with team_scope(teams_scope([TEAM_A])):
            on_driver = {row["team_id"] for row in await product.connections.fetch(sql)}
            async with product.connections.reading() as conn:
                on_reading = {row[0] for row in (await conn.execute(text(sql))).all()}
            async with product._pg.transaction() as conn:
                in_transaction = {row[0] for row in (await conn.execute(text(sql))).all()}
        for seen in (on_driver, on_reading, in_transaction):
            assert TEAM_B not in seen, table
        assert on_driver == on_reading == in_transaction == {TEAM_A}, table


async def test_team_settings_and_names_of_another_team_are_invisible(
    product: PostgresMemoryStore,
) -> None:
    await _with_names(product)
    with team_scope(teams_scope([TEAM_A])):
        rows = await product.connections.fetch("SELECT target_id FROM memory_settings")
        names = await product.connections.fetch("SELECT id FROM directory WHERE kind = 'team'")
    assert {row["target_id"] for row in rows} == {TEAM_A}
    assert {row["id"] for row in names} == {TEAM_A}


async def _with_names(store: PostgresMemoryStore) -> None:
    from store.model import DirectoryEntry

    for team in (TEAM_A, TEAM_B):
        with team_scope(teams_scope([team])):
            await store.directory.set_names([DirectoryEntry(kind="team", id=team, name=f"team {team}")])


async def test_outside_any_scope_the_product_sees_no_teams_rows_and_the_platform_scope_all(
    product: PostgresMemoryStore,
) -> None:
    sql = UNFILTERED["memories"]
    unscoped = {row["team_id"] for row in await product.connections.fetch(sql)}
    with platform_scope("test: every team"):
        everything = {row["team_id"] for row in await product.connections.fetch(sql)}
    assert unscoped == set()
    assert everything == {TEAM_A, TEAM_B}


async def test_a_write_into_another_team_is_refused(product: PostgresMemoryStore) -> None:
    event = event_of(["I moved to Lisbon", "Cool"], user=uuid.uuid4(), channel=uuid.uuid4(), team=TEAM_B)
    with pytest.raises(TeamBoundaryViolation, match="row-level security policy"):
        await write_as_the_worker(
            product, event, [("city", "Lives in Lisbon", (1,))], scope=teams_scope([TEAM_A])
        )


async def test_the_products_recall_in_team_a_never_returns_team_bs_memories(
    product: PostgresMemoryStore,
) -> None:
    with platform_scope("test: find the user"):
        (row,) = await product.connections.fetch(
            "SELECT DISTINCT owner_id FROM memories WHERE team_id = %(t)s", {"t": TEAM_A}
        )
    with team_scope(teams_scope([TEAM_A])):
        hits = await product.recall(row["owner_id"], None, "bakery", 10, team_id=TEAM_A)
    assert hits and all(hit.memory.team_id == TEAM_A for hit in hits)


def test_every_table_with_team_data_has_row_level_security(rls_url: str) -> None:
    with psycopg.connect(rls_url, autocommit=True) as conn:
        with_team_id = {
            row[0]
            for row in conn.execute(
                "SELECT c.table_name FROM information_schema.columns c "
                "JOIN information_schema.tables t USING (table_schema, table_name) "
                "WHERE c.table_schema = current_schema() AND c.column_name = 'team_id' "
                "AND t.table_type = 'BASE TABLE'"
            )
        }
        guarded = {
            row[0]: (row[1], row[2], row[3])
            for row in conn.execute(
                "SELECT c.relname, c.relrowsecurity, pg_get_userbyid(c.relowner), "
                "has_table_privilege(%s, c.oid, 'SELECT, INSERT, UPDATE, DELETE') "
                "FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'",
                (APP_ROLE,),
            )
        }
        policies = {row[0] for row in conn.execute("SELECT tablename FROM pg_policies")}
    assert {"memories", "conversation_turns", "memory_audit"} <= with_team_id
    for table in with_team_id | set(GUARDED_WITHOUT_TEAM_ID):
        rls, owner, granted = guarded[table]
        assert rls, f"{table} has no row-level security"
        assert table in policies, f"{table} has no policy"
        assert owner != APP_ROLE and granted, table


def rows_read_from_memories(plan: dict[str, Any]) -> int:
    """Rows the plan's scans of `memories` produced or filtered out (EXPLAIN ANALYZE, JSON)."""
    own = 0
    if plan.get("Relation Name") == "memories":
        own = int(plan.get("Actual Rows", 0)) + int(plan.get("Rows Removed by Filter", 0))
    return own + sum(rows_read_from_memories(child) for child in plan.get("Plans", []))


@pytest.mark.parametrize("scope", ["user", "persona_user"])
def test_an_owners_most_recent_rows_are_read_through_the_index_under_the_policy(
    rls_url: str, scope: str
) -> None:
    # an owner with more pending memories than the near-duplicate read's window (and the prompt's),
    # beside as many of another user of the same persona (scanned first in the user's order):
    # under the policy, the window's scans must read no more than the tables' owner's do
    owner, team = uuid.uuid4(), uuid.uuid4()
    user = uuid.UUID(int=2**128 - 1) if scope == "persona_user" else None
    other = uuid.UUID(int=1)
    stored = neighbours_sql.PENDING_WINDOW + 100
    with psycopg.connect(rls_url, autocommit=True) as conn:
        for of in (user, other) if user else (user,):
            conn.execute(
                "INSERT INTO memories (scope, owner_id, user_id, key, value, status, updated_at) "
                "SELECT %s, %s, %s, 'key ' || i, 'value ' || i, 'pending_review', now() - i * interval '1 s' "
                "FROM generate_series(1, %s) AS i",
                (scope, owner, of, stored),
            )
        # other owners' rows: the owner's are a few of the table's, as in production
        conn.execute(
            "INSERT INTO memories (scope, owner_id, key, value, status) "
            "SELECT 'user', gen_random_uuid(), 'key', 'value', 'pending_review' "
            "FROM generate_series(1, 20000)"
        )
        conn.execute("ANALYZE memories")
    memory = NewMemory(scope=scope, owner_id=owner, user_id=user, key="city", value="Lisbon", team_id=team)  # type: ignore[arg-type]
    size_key = neighbours_sql.owner_key(memory)
    vector = float4_array([1.0] + [0.0] * (DIM - 1))
    statements = {
        "prompt": neighbours_sql.prompt_memories_statement(
            [OwnerRef(scope=scope, owner_id=owner, user_id=user)],
            team_id=team,
            words=["lisbon"],
            limit=40,  # type: ignore[arg-type]
        ),
        "near duplicates": neighbours_sql.neighbours_statement(
            [memory], [vector], 8, {size_key: stored}, "locked", dim=DIM
        ),
        "owner size": neighbours_sql.owner_count_statement([size_key]),
    }
    read: dict[str, dict[str, int]] = {}
    for role in ("the tables' owner", APP_ROLE):
        with psycopg.connect(rls_url, autocommit=True) as conn:
            register_vector_dumper(conn)
            if role == APP_ROLE:
                conn.execute(f"SET ROLE {APP_ROLE}")
            for name, (sql, params) in statements.items():
                conn.execute("BEGIN")
                conn.execute("SELECT set_config('pmem.teams', %s, true)", (str(team),))
                found = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
                conn.execute("ROLLBACK")
                assert found is not None
                read.setdefault(name, {})[role] = rows_read_from_memories(found[0][0]["Plan"])
    # the plans are the planner's choice; the policy must not make any of them read more
    for name, by_role in read.items():
        assert 0 < by_role[APP_ROLE] <= by_role["the tables' owner"], (name, by_role)
