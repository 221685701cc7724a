"""Migrations: alembic on Postgres (idempotent, dimension-checked, matching the table definitions),
create_all on SQLite; and the store's own schema check at open time."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from extraction.embeddings import HashingEmbedder
from store.core.schema import build_schema
from store.factory import open_store
from store.migrate import (
    VERSION_TABLE,
    EmbeddingDimensionMismatch,
    SchemaError,
    alembic_config,
    head_revision,
    migrate,
)
from store.postgres.schema import POSTGRES
from store.postgres.store import PostgresMemoryStore
from store.rules.urls import to_sqlalchemy_url
from store.sqlite.store import SqliteMemoryStore
from tests.factories import user_fact

NewDatabase = Callable[[], str]


def table_names(url: str) -> set[str]:
    """Tables of a database (the engine is disposed so no connection outlives the test)."""
    engine = create_engine(to_sqlalchemy_url(url, asynchronous=False))
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def schema_snapshot(url: str) -> list[tuple[str, ...]]:
    """Tables, columns (with types) and index definitions of the public schema."""
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type, udt_name FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY 1, 2"
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1, 2"
        ).fetchall()
    return [tuple(map(str, row)) for row in columns + indexes]


def test_migrating_an_empty_database_creates_the_schema(new_database: NewDatabase) -> None:
    url = new_database()
    report = migrate(url, 384)
    assert (report.from_revision, report.to_revision) == (None, head_revision())
    assert report.changed and "migrated" in report.describe()
    tables = table_names(url)
    assert {
        "memories",
        "memory_revisions",
        "memory_audit",
        "processed_events",
        "memory_settings",
        VERSION_TABLE,
    } <= tables
    assert "chat_messages" not in tables


def test_migrating_twice_is_a_no_op(new_database: NewDatabase) -> None:
    url = new_database()
    migrate(url, 384)
    before = schema_snapshot(url)
    again = migrate(url, 384)
    assert not again.changed and "nothing to do" in again.describe()
    assert schema_snapshot(url) == before


def test_concurrent_migrations_both_succeed(new_database: NewDatabase) -> None:
    url = new_database()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            migrate(url, 384)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_different_embedding_dimension_is_a_clear_error(new_database: NewDatabase) -> None:
    url = new_database()
    migrate(url, 384)
    with pytest.raises(EmbeddingDimensionMismatch) as caught:
        migrate(url, 1536)
    message = str(caught.value)
    assert "vector(384)" in message and "1536" in message and "PMEM_EMBEDDING_DIM=384" in message
    assert (caught.value.existing, caught.value.configured) == (384, 1536)


def test_a_foreign_memories_table_is_refused(new_database: NewDatabase) -> None:
    url = new_database()
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE memories (id uuid PRIMARY KEY, embedding vector(384))")
    with pytest.raises(SchemaError, match="not created by pmem migrate"):
        migrate(url, 384)


def test_the_migrated_schema_matches_the_table_definitions(new_database: NewDatabase) -> None:
    url = new_database()
    migrate(url, 384)
    engine = create_engine(to_sqlalchemy_url(url, asynchronous=False))
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            assert compare_metadata(context, build_schema(384, POSTGRES).metadata) == []
            # and the comparison does notice a difference
            assert compare_metadata(context, build_schema(768, POSTGRES).metadata) != []
    finally:
        engine.dispose()


def test_the_seed_indexes_exist(new_database: NewDatabase) -> None:
    url = new_database()
    migrate(url, 384)
    with psycopg.connect(url) as conn:
        defs = {
            name: definition
            for name, definition in conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memories'"
            ).fetchall()
        }
    assert "(scope, owner_id, status)" in defs["ix_memories_scope_owner_status"]
    assert "WHERE (scope = 'persona_user'::text)" in defs["ix_memories_persona_user"]
    # one row per scope, owner, user, team and key: a team's memory is its own row (team boundary)
    unique = defs["uq_memories_scope_owner_user_team_key"]
    assert "UNIQUE" in unique and "COALESCE(user_id, '00000000-0000-0000-0000-000000000000'::uuid)" in unique
    assert "COALESCE(team_id, '00000000-0000-0000-0000-000000000000'::uuid)" in unique
    assert "gin (search_tsv)" in defs["ix_memories_search_tsv"]
    assert "(source_channel_id)" in defs["ix_memories_source_channel_id"]
    # reviewed memories only: pending rows, the worker's every write, stay out of the graph
    assert (
        "hnsw (embedding vector_cosine_ops) WHERE (status = 'active'::text)"
        in defs["ix_memories_embedding_hnsw"]
    )
    pending = defs["ix_memories_owner_pending"]
    assert "updated_at DESC" in pending and "WHERE (status = 'pending_review'::text)" in pending
    reviewed = defs["ix_memories_owner_reviewed"]
    assert "updated_at DESC" in reviewed and "WHERE (status = 'active'::text)" in reviewed


def _hnsw_definition(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_memories_embedding_hnsw'"
        ).fetchone()
    return str(row[0]) if row else ""


def _to_revision(url: str, revision: str, *, down: bool = False) -> None:
    engine = create_engine(to_sqlalchemy_url(url, asynchronous=False))
    try:
        with engine.begin() as conn:
            config = alembic_config(embedding_dim=384, connection=conn)
            (command.downgrade if down else command.upgrade)(config, revision)
    finally:
        engine.dispose()


async def test_upgrading_from_0003_keeps_the_rows_and_indexes_reviewed_memories_only(
    new_database: NewDatabase,
) -> None:
    url = new_database()
    _to_revision(url, "0003")
    assert "WHERE" not in _hnsw_definition(url)
    user = uuid.uuid4()
    # rows as that revision's schema holds them (today's store writes columns it lacks)
    with psycopg.connect(url) as conn:
        for key, status in (("pet", "active"), ("city", "pending_review")):
            conn.execute(
                "INSERT INTO memories (id, scope, owner_id, key, value, status) "
                "VALUES (%s, 'user', %s, %s, %s, %s)",
                (uuid.uuid4(), user, key, f"{key} fact", status),
            )
    migrate(url, 384)
    assert "WHERE (status = 'active'::text)" in _hnsw_definition(url)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone() == (2,)
    _to_revision(url, "0003", down=True)
    assert "WHERE" not in _hnsw_definition(url)
    with psycopg.connect(url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'ix_memories_owner_pending'"
        ).fetchone() == (0,)


async def test_dimensions_over_2000_index_a_halfvec_cast_and_recall_works(new_database: NewDatabase) -> None:
    url = new_database()
    migrate(url, 3072)  # text-embedding-3-large's size, over pgvector's 2,000-dimension index limit
    with psycopg.connect(url) as conn:
        (definition,) = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_memories_embedding_hnsw'"
        ).fetchone() or ("",)
    assert "(embedding)::halfvec(3072)" in definition and "halfvec_cosine_ops" in definition
    store = PostgresMemoryStore(url, HashingEmbedder(dim=3072))
    try:
        import uuid

        user = uuid.uuid4()
        await store.writes.upsert(
            user_fact(
                user,
                "city",
                "Lives in Lisbon",
                status="active",
            )
        )
        hits = await store.recall(user, None, "Lisbon", retriever="vector")
        assert [h.memory.key for h in hits] == ["city"]
    finally:
        await store.close()


def test_sqlite_migrate_creates_the_tables(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    report = migrate(url, 384)
    assert report.backend == "sqlite"
    migrate(url, 384)
    tables = table_names(url)
    assert {"memories", "memory_revisions", "memory_audit", "processed_events"} <= tables
    assert "chat_messages" not in tables


async def test_opening_an_unmigrated_database_says_to_run_migrate(new_database: NewDatabase) -> None:
    with pytest.raises(SchemaError, match="run `pmem migrate`"):
        await open_store(new_database(), HashingEmbedder(dim=384))


async def test_opening_with_an_embedder_of_another_dimension_fails(new_database: NewDatabase) -> None:
    url = new_database()
    migrate(url, 384)
    with pytest.raises(EmbeddingDimensionMismatch, match="vector\\(384\\)"):
        await open_store(url, HashingEmbedder(dim=768))
    store = await open_store(url, HashingEmbedder(dim=384))
    assert isinstance(store, PostgresMemoryStore)
    await store.close()


async def test_open_store_picks_sqlite_for_sqlite_urls(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/x.db", HashingEmbedder(dim=16))
    try:
        assert isinstance(store, SqliteMemoryStore)
        await store.ping()
    finally:
        await store.close()


async def test_upgrading_from_0008_keeps_the_turns_and_searches_their_speaker_and_search_text(
    new_database: NewDatabase,
) -> None:
    url = new_database()
    _to_revision(url, "0008")
    user, event = uuid.uuid4(), uuid.uuid4()
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO conversation_turns (id, channel_id, event_id, user_id, role, text, at, position) "
            "VALUES (%s, %s, %s, %s, 'user', 'we sailed to Madeira', now(), 1)",
            (uuid.uuid4(), uuid.uuid4(), event, user),
        )
    migrate(url, 384)
    with psycopg.connect(url) as conn:
        # the turn stored before keeps its text, has no speaker, and is still found by its words
        assert conn.execute("SELECT text, speaker, search_text FROM conversation_turns").fetchall() == [
            ("we sailed to Madeira", None, None)
        ]
        found = "SELECT count(*) FROM conversation_turns WHERE search_tsv @@ to_tsquery('english', %s)"
        assert conn.execute(found, ("madeira",)).fetchone() == (1,)
        conn.execute(
            "UPDATE conversation_turns SET speaker = 'Ada', search_text = 'Bea: where did the ferry go?'"
        )
        # the words of the turns around it find it too, and the generated column is indexed
        assert conn.execute(found, ("ferry",)).fetchone() == (1,)
        assert conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'ix_conversation_turns_search_tsv'"
        ).fetchone() == (1,)
    _to_revision(url, "0008", down=True)
    with psycopg.connect(url) as conn:
        columns = {
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'conversation_turns'"
            ).fetchall()
        }
        assert "speaker" not in columns and "search_text" not in columns and "search_tsv" in columns
        assert conn.execute("SELECT count(*) FROM conversation_turns").fetchone() == (1,)


def test_sqlite_migrate_adds_the_speaker_and_search_text_to_an_older_file(tmp_path: Path) -> None:
    import sqlite3

    url = f"sqlite:///{tmp_path}/old.db"
    migrate(url, 384)
    with sqlite3.connect(tmp_path / "old.db") as conn:
        # the table as files written before these columns hold it
        conn.execute("ALTER TABLE conversation_turns DROP COLUMN search_text")
        conn.execute("ALTER TABLE conversation_turns DROP COLUMN speaker")
    migrate(url, 384)
    with sqlite3.connect(tmp_path / "old.db") as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(conversation_turns)")}
    assert {"speaker", "search_text"} <= columns


def test_upgrading_from_0014_keys_the_turns_text_and_bounds_the_indexed_full_text(
    new_database: NewDatabase,
) -> None:
    url = new_database()
    _to_revision(url, "0014")
    short, long = "we sailed to Madeira", " ".join(f"harbour{n}" for n in range(200))
    with psycopg.connect(url) as conn:
        for position, text in enumerate((short, long), start=1):
            conn.execute(
                "INSERT INTO conversation_turns (id, channel_id, event_id, user_id, role, text, at, "
                "position) VALUES (%s, %s, %s, %s, 'user', %s, now(), %s)",
                (uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), text, position),
            )
    migrate(url, 384)
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT text_key = CAST(md5(text) AS uuid), window_tsv = search_tsv, window_tsv IS NULL "
            "FROM conversation_turns ORDER BY position"
        ).fetchall()
        # the short turn's full text rides in the index; the long one's stays in its row only
        assert rows == [(True, True, False), (True, None, True)]
        [definition] = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_conversation_turns_context'"
        ).fetchone() or [""]
        assert definition.endswith(
            'INCLUDE (id, persona_id, team_id, channel_id, "position", text_key, window_tsv, embedding)'
        )
    _to_revision(url, "0014", down=True)
    with psycopg.connect(url) as conn:
        columns = {
            str(row[0])
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'conversation_turns'"
            ).fetchall()
        }
        assert not {"text_key", "window_tsv"} & columns
        assert conn.execute("SELECT count(*) FROM conversation_turns").fetchone() == (2,)
