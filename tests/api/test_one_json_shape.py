"""A memory, and a recall item, read the same from every door: `pmem review list --json` and
`pmem recall --json` print what the API answers, field for field (team, evidence and the time of
the conversation included), and the tools show a model a few of those fields, written alike."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from api.auth import mint_jwt
from cli.main import main
from extraction.embeddings import HashingEmbedder
from store.model import NewMemory
from store.services.tools import MEMORY_VIEW_FIELDS, memory_view
from store.sqlite.store import SqliteMemoryStore
from tests.api.conftest import AUTH, DIM, SECRET, TEAM_A


async def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    """What a `pmem` command printed as JSON (it runs its own event loop: in a thread)."""
    capsys.readouterr()
    assert await asyncio.to_thread(main, list(argv)) == 0
    return json.loads(capsys.readouterr().out)


async def test_the_cli_prints_a_memory_and_a_recall_item_as_the_api_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/shape.db"
    monkeypatch.setenv("PMEM_DATABASE_URL", url)
    monkeypatch.setenv("PMEM_EMBEDDING_PROVIDER", "hashing")
    monkeypatch.setenv("PMEM_EMBEDDING_DIM", str(DIM))
    user = uuid.uuid4()
    store = SqliteMemoryStore(url, HashingEmbedder(dim=DIM))
    try:
        await store.check_schema()
        written = await store.writes.upsert(
            NewMemory(
                scope="user",
                owner_id=user,
                user_id=None,
                key="pet",
                value="Has a grey cat called Bo",
                status="active",
                confidence=0.9,
                source_channel_id=uuid.uuid4(),
                observed_at=datetime(2026, 3, 1, 12, 0, tzinfo=UTC),
                team_id=TEAM_A,
                evidence="user: I adopted a grey cat, Bo",
            )
        )
        memory = await store.listing.get_by_id(written.memory_id)
        assert memory is not None
        app = create_app(store=store, auth=AUTH, max_body_bytes=64_000)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        token = mint_jwt(secret=SECRET, subject=user, role="user", teams=(TEAM_A,))
        async with httpx.AsyncClient(transport=transport, base_url="http://pmem.test") as http:
            mine = await http.get("/v1/me/memories", headers={"Authorization": f"Bearer {token}"})
            assert mine.status_code == 200, mine.text
            _, key = await store.api_keys.create_api_key("chat-backend")
            recalled = await http.post(
                "/v1/recall",
                headers={"Authorization": f"Bearer {key}"},
                json={"user_id": str(user), "team_id": str(TEAM_A), "query": "cat", "include": ["memories"]},
            )
            assert recalled.status_code == 200, recalled.text
    finally:
        await store.close()

    [from_api] = mine.json()["items"]
    assert from_api["team_id"] == str(TEAM_A) and from_api["evidence"] == "user: I adopted a grey cat, Bo"
    assert from_api["observed_at"] == "2026-03-01T12:00:00+00:00"
    listing = await cli_json(capsys, "review", "list", "--status", "active", "--json")
    assert isinstance(listing, dict)
    assert listing["memories"] == [from_api]

    [item_from_api] = recalled.json()["items"]
    assert item_from_api["kind"] == "memory" and item_from_api["id"] == from_api["id"]
    from_cli = await cli_json(
        capsys,
        "recall",
        "--user-id",
        str(user),
        "--team-id",
        str(TEAM_A),
        "--include",
        "memories",
        "--json",
        "cat",
    )
    assert from_cli == [item_from_api]

    view = memory_view(memory, score=0.5)
    assert set(view) == {*MEMORY_VIEW_FIELDS, "score"}
    assert {name: view[name] for name in MEMORY_VIEW_FIELDS if name != "confidence"} == {
        name: from_api[name] for name in MEMORY_VIEW_FIELDS if name != "confidence"
    }
