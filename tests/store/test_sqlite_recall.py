"""The SQLite store's recall machinery: the FTS5 mirror kept in step by triggers (owner tokens,
status, edits, deletes), the in-memory owner index and when it is refreshed, and the numpy scoring."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from extraction.embeddings import HashingEmbedder
from store.model import NewMemory, OwnerRef
from store.sqlite.fts import owner_match, owner_token
from store.sqlite.ranking import top_cosines, unit_rows
from store.sqlite.store import SqliteMemoryStore
from tests.factories import user_fact


def _new(owner: uuid.UUID, key: str, value: str, **kw: object) -> NewMemory:
    return user_fact(owner, key, value, status="active", **kw)  # type: ignore[arg-type]


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> SqliteMemoryStore:
    store = SqliteMemoryStore(f"sqlite:///{tmp_path}/recall.db", HashingEmbedder(dim=64))
    yield store  # type: ignore[misc]
    await store.close()


async def test_fts_rows_carry_the_owner_token_the_query_asks_for(
    sqlite_store: SqliteMemoryStore, tmp_path: Path
) -> None:
    user, persona = uuid.uuid4(), uuid.uuid4()
    owners = [
        OwnerRef(scope="user", owner_id=user),
        OwnerRef(scope="persona", owner_id=persona),
        OwnerRef(scope="persona_user", owner_id=persona, user_id=user),
    ]
    for owner in owners:
        await sqlite_store.writes.upsert(
            NewMemory(
                scope=owner.scope,
                owner_id=owner.owner_id,
                user_id=owner.user_id,
                key=f"{owner.scope} fact",
                value="likes kayaking",
                status="active",
            )
        )
    with sqlite3.connect(tmp_path / "recall.db") as conn:
        tokens = {row[0] for row in conn.execute("SELECT owner FROM memories_fts")}
        assert tokens == {owner_token(owner) for owner in owners}
        for owner in owners:
            found = conn.execute(
                "SELECT key FROM memories_fts WHERE memories_fts MATCH ?",
                (owner_match([owner], None, '"kayak"'),),
            ).fetchall()
            assert found == [(f"{owner.scope} fact",)]


async def test_keyword_recall_stems_and_follows_edits_archives_and_deletes(
    sqlite_store: SqliteMemoryStore,
) -> None:
    user = uuid.uuid4()
    filler = [("tea", "drinks green tea"), ("chess", "plays chess on sundays"), ("jazz", "listens to jazz")]
    for key, value in filler:
        await sqlite_store.writes.upsert(_new(user, key, value))
    written = await sqlite_store.writes.upsert(_new(user, "diet", "prefers vegetarian food"))
    memory_id = written.memory_id
    hits = await sqlite_store.recall(user, None, "food preferences", 5, retriever="keyword")
    assert [h.memory.id for h in hits] == [memory_id]  # "preferences" and "prefers" share a stem

    await sqlite_store.review.edit(memory_id, "eats fish now", actor="test")
    assert await sqlite_store.recall(user, None, "vegetarian", 5, retriever="keyword") == []
    assert [h.memory.id for h in await sqlite_store.recall(user, None, "fish", 5, retriever="keyword")] == [
        memory_id
    ]
    await sqlite_store.erasure.archive(memory_id, actor="test")
    assert await sqlite_store.recall(user, None, "fish", 5, retriever="keyword") == []
    await sqlite_store.erasure.delete(memory_id, actor="test")
    hits = await sqlite_store.recall(user, None, "fish", 5)
    assert memory_id not in {h.memory.id for h in hits}
    async with sqlite_store.engine.connect() as conn:
        left = (await conn.exec_driver_sql("SELECT count(*) FROM memories_fts")).scalar_one()
    assert left == len(filler)


async def test_another_connections_write_refreshes_the_owner_index(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/shared.db"
    reader = SqliteMemoryStore(url, HashingEmbedder(dim=64))
    writer = SqliteMemoryStore(url, HashingEmbedder(dim=64))
    user = uuid.uuid4()
    try:
        await writer.writes.upsert(_new(user, "pet", "has a beagle"))
        assert len(await reader.recall(user, None, "beagle", 5, retriever="vector")) == 1
        await writer.writes.upsert(_new(user, "car", "drives a beagle-yellow van"))
        assert len(await reader.recall(user, None, "beagle", 5, retriever="vector")) == 2
    finally:
        await reader.close()
        await writer.close()


def test_top_cosines_ranks_usable_rows_by_similarity() -> None:
    matrix = unit_rows(np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 0.0], [0.0, 1.0]], dtype=np.float32))
    usable = np.array([True, True, False, True])
    assert [i for i, _ in top_cosines(matrix, usable, [0.0, 2.0], 10)] == [3, 1, 0]
    assert [i for i, _ in top_cosines(matrix, usable, [1.0, 0.0], 2)] == [0, 1]
    assert top_cosines(matrix, usable, [0.0, 0.0], 3) == []
    cosine = top_cosines(matrix, usable, [1.0, 1.0], 1)[0][1]
    assert cosine == pytest.approx((0.6 + 0.8) / 2**0.5)


async def test_keyword_and_vector_recall_keep_the_team_boundary(sqlite_store: SqliteMemoryStore) -> None:
    user, team, other_team = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await sqlite_store.writes.upsert(_new(user, "pet", "has a beagle"))
    await sqlite_store.writes.upsert(_new(user, "work pet", "the office beagle", team_id=team))
    await sqlite_store.writes.upsert(
        _new(user, "other pet", "a beagle at the other office", team_id=other_team)
    )
    for retriever in ("keyword", "vector", "hybrid"):
        no_team = await sqlite_store.recall(user, None, "beagle", 5, retriever=retriever)  # type: ignore[arg-type]
        in_team = await sqlite_store.recall(user, None, "beagle", 5, retriever=retriever, team_id=team)  # type: ignore[arg-type]
        assert {h.memory.key for h in no_team} == {"pet"}
        assert {h.memory.key for h in in_team} == {"pet", "work pet"}


class _FailingEmbedder:
    """A hashing embedder that fails as many calls as `failures_left` says."""

    def __init__(self) -> None:
        self._inner = HashingEmbedder(dim=64)
        self.failures_left = 0

    @property
    def dim(self) -> int:
        return self._inner.dim

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError("embedding service down")
        return await self._inner.embed(texts)


async def test_a_failing_vector_branch_fails_the_recall_and_returns_the_connection(tmp_path: Path) -> None:
    # the full-text and vector branches run side by side: the embedder's error is not swallowed
    # into a full-text-only answer, and the store's only connection is free for the next recall
    embedder = _FailingEmbedder()
    store = SqliteMemoryStore(f"sqlite:///{tmp_path}/fail.db", embedder, busy_timeout_ms=2_000)
    user = uuid.uuid4()
    try:
        await store.writes.upsert(_new(user, "pet", "has a beagle"))
        embedder.failures_left = 1
        with pytest.raises(RuntimeError, match="embedding service down"):
            await store.recall(user, None, "beagle", 5)
        hits = await store.recall(user, None, "beagle", 5)
        assert [(h.memory.key, h.sources) for h in hits] == [("pet", ("vector", "text"))]
    finally:
        await store.close()
