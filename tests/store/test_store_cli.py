"""`pmem migrate`, `pmem recall` and `pmem review` against a real Postgres."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from cli.main import main
from extraction.embeddings import HashingEmbedder
from store.postgres.store import PostgresMemoryStore
from tests.store.store_testkit import mem


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PMEM_DATABASE_URL", database_url)
    monkeypatch.setenv("PMEM_EMBEDDING_PROVIDER", "hashing")
    monkeypatch.setenv("PMEM_EMBEDDING_DIM", "384")
    return database_url


@asynccontextmanager
async def opened(database_url: str) -> AsyncIterator[PostgresMemoryStore]:
    """A store on the CLI's database, to set up or read what the CLI sees; closed after."""
    store = PostgresMemoryStore(database_url, HashingEmbedder(dim=384))
    try:
        yield store
    finally:
        await store.close()


async def pmem(*argv: str) -> int:
    """Run the CLI in a thread (it starts its own event loop)."""
    return await asyncio.to_thread(main, list(argv))


@pytest.fixture
async def migrated(cli_env: str) -> str:
    """The CLI's database after `pmem migrate` succeeded on it."""
    assert await pmem("migrate") == 0
    return cli_env


def test_pmem_migrate_reports_what_it_did_and_is_idempotent(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["migrate"]) == 0
    from store.migrate import head_revision

    assert f"migrated (empty database) -> {head_revision()}" in capsys.readouterr().out
    assert main(["migrate"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert main(["migrate", "--embedding-dim", "768"]) == 2
    err = capsys.readouterr().err
    assert "vector(384)" in err and "768" in err


def test_pmem_migrate_accepts_a_database_url_flag(
    new_database: object, capsys: pytest.CaptureFixture[str]
) -> None:
    url = new_database()  # type: ignore[operator]
    assert main(["migrate", "--database-url", url]) == 0
    assert "migrated" in capsys.readouterr().out


def test_pmem_migrate_refuses_an_unusable_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--database-url", "sqlite://"]) == 2
    assert "names no file" in capsys.readouterr().err


async def test_pmem_recall_prints_json_and_a_table(migrated: str, capsys: pytest.CaptureFixture[str]) -> None:
    user, persona = uuid.uuid4(), uuid.uuid4()
    async with opened(migrated) as store:
        await store.writes.upsert(mem(owner=user, key="home city", value="Lives in Lisbon"))
        await store.writes.upsert(
            mem(scope="persona_user", owner=persona, user=user, key="level", value="Beginner")
        )
        await store.writes.upsert(
            mem(owner=user, key="pending", value="Lisbon maybe", status="pending_review")
        )
    capsys.readouterr()

    assert (
        await pmem("recall", "--user-id", str(user), "--json", "where", "does", "she", "live", "Lisbon") == 0
    )
    records = json.loads(capsys.readouterr().out)
    assert [r["key"] for r in records] == ["home city"]
    assert {"id", "scope", "owner_id", "user_id", "key", "value", "confidence", "status", "score"} <= set(
        records[0]
    )
    assert (records[0]["owner_id"], records[0]["status"]) == (str(user), "active")

    assert await pmem("recall", "--user-id", str(user), "--persona-id", str(persona), "--limit", "5") == 0
    table = capsys.readouterr().out
    assert "home city" in table and "level" in table and "persona_user" in table and "pending" not in table

    assert await pmem("recall", "--user-id", str(user), "--retriever", "keyword", "--json", "Lisbon") == 0
    assert [r["sources"] for r in json.loads(capsys.readouterr().out)] == [["text"]]


async def test_pmem_recall_on_an_unmigrated_database_says_to_migrate(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await pmem("recall", "--user-id", str(uuid.uuid4())) == 2
    assert "pmem migrate" in capsys.readouterr().err


def test_pmem_recall_rejects_a_non_uuid_user(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["recall", "--user-id", "bob"])
    assert "not a UUID" in capsys.readouterr().err


async def test_pmem_review_lists_approves_rejects_and_edits(
    migrated: str, capsys: pytest.CaptureFixture[str]
) -> None:
    user = uuid.uuid4()
    async with opened(migrated) as store:
        pending = await store.writes.upsert(
            mem(owner=user, key="pet", value="Has a cat", status="pending_review")
        )
        rejected = await store.writes.upsert(
            mem(owner=user, key="city", value="Porto", status="pending_review")
        )
        active = await store.writes.upsert(mem(owner=user, key="diet", value="Is vegetarian"))
        await store.writes.upsert(mem(owner=user, key="diet", value="Is vegan", status="pending_review"))
    capsys.readouterr()

    assert await pmem("review", "list", "--json") == 0
    listing = json.loads(capsys.readouterr().out)
    assert {m["key"] for m in listing["memories"]} == {"pet", "city"}
    assert [(c["key"], c["old_value"], c["new_value"]) for c in listing["proposed_changes"]] == [
        ("diet", "Is vegetarian", "Is vegan")
    ]

    assert await pmem("review", "approve", str(pending.memory_id), "--actor", "admin:ana") == 0
    assert "[active] pet: Has a cat" in capsys.readouterr().out
    assert await pmem("review", "approve", str(active.memory_id)) == 0
    assert "[active] diet: Is vegan" in capsys.readouterr().out
    assert await pmem("review", "reject", str(rejected.memory_id)) == 0
    assert "[archived] city" in capsys.readouterr().out
    assert await pmem("review", "edit", str(active.memory_id), "Eats fish on Fridays") == 0
    assert "diet: Eats fish on Fridays" in capsys.readouterr().out
    assert await pmem("review", "edit", str(active.memory_id), "sk-proj1234567890abcdefABCDEF") == 1
    assert "value: holds only a secret (api key)" in capsys.readouterr().err
    assert await pmem("review", "approve", str(active.memory_id)) == 1
    assert "nothing to do" in capsys.readouterr().err
    assert await pmem("review", "approve", str(uuid.uuid4())) == 1
    assert "no memory with id" in capsys.readouterr().err

    assert await pmem("review", "list") == 0
    assert capsys.readouterr().out.startswith("0 memories")

    async with opened(migrated) as store:
        log = await store.review.audit_log(pending.memory_id)
    assert (log[-1].action, log[-1].actor) == ("approve", "admin:ana")


async def test_pmem_recall_returns_turns_marked_as_such_and_include_selects(
    migrated: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import UTC, datetime

    from store.model import NewTurn

    user = uuid.uuid4()
    async with opened(migrated) as store:
        await store.writes.upsert(mem(owner=user, key="home city", value="Lives in Lisbon"))
        said = NewTurn(
            channel_id=uuid.uuid4(),
            user_id=user,
            persona_id=None,
            team_id=None,
            role="user",
            text="I moved to Lisbon last spring",
            at=datetime(2026, 4, 1, tzinfo=UTC),
            position=1,
            speaker="Ada",
        )
        await store.writes.write_event(event_id=uuid.uuid4(), memories=[], turns=[said])
    capsys.readouterr()
    assert await pmem("recall", "--user-id", str(user), "--json", "Lisbon") == 0
    records = json.loads(capsys.readouterr().out)
    assert sorted(r["kind"] for r in records) == ["memory", "turn"]  # one list holds both kinds
    (turn,) = [r for r in records if r["kind"] == "turn"]
    assert turn["text"] == "I moved to Lisbon last spring" and turn["role"] == "user"
    assert turn["speaker"] == "Ada"
    assert await pmem("recall", "--user-id", str(user), "--include", "turns", "--json", "Lisbon") == 0
    assert [r["kind"] for r in json.loads(capsys.readouterr().out)] == ["turn"]
    assert await pmem("recall", "--user-id", str(user), "--include", "turns", "Lisbon") == 0
    table = capsys.readouterr().out
    assert "turn" in table and "Ada" in table  # who said it, not only the role
