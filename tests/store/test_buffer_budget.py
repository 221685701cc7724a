"""The shared buffers against what hints read (store/postgres/buffer_budget.py): the rule, the sizes
read from a real Postgres, and the one WARNING `pmem serve` logs at start-up on a server whose
`shared_buffers` is smaller than the turns' context index and the memories."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from cli.embedded import EmbeddedPostgres
from extraction.embeddings import HashingEmbedder
from store.migrate import migrate
from store.postgres.buffer_budget import (
    MB,
    HotSet,
    buffers_warning,
    read_hot_set,
    suggested_shared_buffers,
    warn_if_buffers_too_small,
)
from store.postgres.store import PostgresMemoryStore
from tests.api.serve_harness import logged_at_start_up, serve_environment
from tests.server_directory import server_directory

DIM = 384


def hot(shared_buffers_mb: float, index_mb: float, memories_mb: float) -> HotSet:
    return HotSet(
        shared_buffers=int(shared_buffers_mb * MB),
        turn_window_index=int(index_mb * MB),
        memories=int(memories_mb * MB),
    )


def test_no_warning_while_what_hints_read_fits() -> None:
    assert buffers_warning(hot(128, 100, 28), process="pmem serve") is None
    assert buffers_warning(hot(4096, 2770, 400), process="pmem serve") is None


def test_the_warning_names_the_sizes_and_the_setting_to_raise() -> None:
    warning = buffers_warning(hot(128, 271, 22), process="pmem serve")
    assert warning is not None
    assert warning.startswith("pmem serve: Postgres's shared_buffers (128 MB) is smaller than what hints")
    assert "the turns' context index (271 MB) and the memories (22 MB), 293 MB together" in warning
    # 293 MB with a quarter more room, in whole 128 MB steps
    assert "ALTER SYSTEM SET shared_buffers = '384MB', then restart Postgres" in warning
    assert "docs/operations.md: Postgres memory" in warning


@pytest.mark.parametrize(
    ("needed_mb", "suggested_mb"),
    [(0, 128), (1, 128), (102, 128), (103, 256), (2770 + 400, 3968)],
)
def test_the_suggestion_leaves_room_to_grow(needed_mb: int, suggested_mb: int) -> None:
    assert suggested_shared_buffers(needed_mb * MB) == suggested_mb * MB


async def test_the_sizes_are_the_servers(new_database: Callable[[], str]) -> None:
    url = new_database()
    migrate(url, DIM)
    store = PostgresMemoryStore(url, HashingEmbedder(dim=DIM))
    try:
        found = await read_hot_set(store)
    finally:
        await store.close()
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT pg_size_bytes(current_setting('shared_buffers')), "
            "pg_relation_size('ix_conversation_turns_context'), pg_total_relation_size('memories'), "
            "pg_relation_size('memories')"
        ).fetchone()
    assert row is not None
    shared_buffers, index, memories, memories_heap = row
    assert found == HotSet(shared_buffers=shared_buffers, turn_window_index=index, memories=memories)
    assert index > 0 and memories > memories_heap  # the memories' indexes count too


async def test_no_check_without_a_postgres_server() -> None:
    assert await warn_if_buffers_too_small(object(), process="pmem serve") is None


@pytest.fixture(scope="module")
def small_buffers_server() -> Iterator[EmbeddedPostgres]:
    """A Postgres of its own whose `shared_buffers` (1 MB) a migrated schema with a few hundred
    turns outgrows."""
    with server_directory("pmem-test-buffers-") as root:
        server = EmbeddedPostgres(data_dir=root / "data").start()
        try:
            server.configure({"shared_buffers": "1MB"})
            yield server
        finally:
            server.stop()


def fill_turns(url: str, count: int) -> None:
    """`count` turns of one context, each with a vector (what makes the context index large)."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO conversation_turns (id, channel_id, event_id, user_id, role, text, at, position, "
            "embedding) SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), "
            "'00000000-0000-0000-0000-000000000001', 'user', 'turn ' || g, now(), g, "
            f"CAST(array_fill(0.5, ARRAY[{DIM}]) AS vector({DIM})) FROM generate_series(1, %s) AS g",
            (count,),
        )


def test_pmem_serve_warns_once_at_start_up(
    small_buffers_server: EmbeddedPostgres, new_database: Callable[[], str]
) -> None:
    small = small_buffers_server.create_database("buffers")
    migrate(small, DIM)
    fill_turns(small, 600)
    with psycopg.connect(small) as conn:
        row = conn.execute("SELECT pg_relation_size('ix_conversation_turns_context')").fetchone()
    assert row is not None and row[0] > 1 * MB  # what the small server's buffers cannot hold
    roomy = new_database()  # the session's server: the default 128 MB
    migrate(roomy, DIM)
    # two API processes: the parent checks once, before it starts them
    for url, workers, expected in ((small, "1", 1), (small, "2", 1), (roomy, "1", 0)):
        lines = logged_at_start_up({**serve_environment(url), "PMEM_API_WORKERS": workers}, "shared_buffers")
        assert len(lines) == expected, lines
        if expected:
            assert "pmem serve: Postgres's shared_buffers (1.0 MB) is smaller than" in lines[0]
            assert "ALTER SYSTEM SET shared_buffers = '128MB'" in lines[0]
