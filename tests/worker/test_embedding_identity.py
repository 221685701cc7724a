"""The embedding model is recorded and enforced (real Postgres): `pmem migrate` records provider,
model and dimension; the worker, recall and serve refuse another model naming both; `pmem reembed`
switches models in resumable batches."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import text

from config import load_settings
from extraction.embeddings import HashingEmbedder, embedding_identity
from store.factory import open_store
from store.migrate import EmbeddingModelMismatch, migrate_async
from store.model import EmbeddingIdentity
from testkit.fake_openai import FakeOpenAI
from tests.database_role import clean_environment
from tests.factories import user_fact
from tests.worker.worker_harness import Harness
from worker.app import build_worker

pytestmark = pytest.mark.asyncio
REPO = Path(__file__).resolve().parents[2]
HASHING = EmbeddingIdentity(provider="hashing", model="hashing-v1", dim=384)


class ConstantEmbedder:
    """A different 'model': every text becomes the same unit vector."""

    dim = 384
    identity = EmbeddingIdentity(provider="test", model="constant", dim=384)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * 383 for _ in texts]


async def seed(url: str, count: int) -> None:
    store = await open_store(url, HashingEmbedder(dim=384))
    try:
        owner = uuid.uuid4()
        memories = [
            user_fact(
                owner,
                f"fact {i}",
                f"Value number {i}",
                confidence=0.9,
                status="pending_review",
            )
            for i in range(count)
        ]
        await store.writes.write_event(event_id=uuid.uuid4(), memories=memories)
    finally:
        await store.close()


async def test_migrate_records_the_model_and_refuses_another(database_url: str) -> None:
    await migrate_async(database_url, 384, embedding=HASHING)
    await migrate_async(database_url, 384, embedding=HASHING)  # the same again: fine
    other = EmbeddingIdentity(provider="openai", model="text-embedding-3-small", dim=384)
    with pytest.raises(EmbeddingModelMismatch) as caught:
        await migrate_async(database_url, 384, embedding=other)
    message = str(caught.value)
    assert "hashing hashing-v1 (384 dimensions)" in message
    assert "openai text-embedding-3-small (384 dimensions)" in message
    assert "pmem reembed" in message
    # how to keep the recorded model, as settings to paste
    assert "PMEM_EMBEDDING_PROVIDER=hashing PMEM_EMBEDDING_MODEL=hashing-v1 PMEM_EMBEDDING_DIM=384" in message


async def test_worker_and_recall_refuse_another_model_naming_both(harness: Harness) -> None:
    h = harness
    await migrate_async(h.database_url, 384, embedding=HASHING)
    settings = h.settings()  # the fake's openai-compatible embeddings, model fake-embedding
    assert embedding_identity(settings).provider == "openai"
    with pytest.raises(EmbeddingModelMismatch) as worker_refused:
        await build_worker(settings)
    assert "hashing hashing-v1" in str(worker_refused.value)
    assert "openai fake-embedding" in str(worker_refused.value)
    # recall and serve open the store through store.factory.open_store
    with pytest.raises(EmbeddingModelMismatch):
        await open_store(h.database_url, ConstantEmbedder())
    store = await open_store(h.database_url, HashingEmbedder(dim=384))  # the recorded model: fine
    await store.close()


async def test_reembed_resumes_after_an_interruption_and_records_the_new_model(database_url: str) -> None:
    await migrate_async(database_url, 384, embedding=HASHING)
    await seed(database_url, 50)
    store = await open_store(database_url, ConstantEmbedder(), check_schema=False)
    seen: list[tuple[int, int]] = []

    def interrupt_after_two_batches(done: int, total: int) -> None:
        seen.append((done, total))
        if len(seen) == 3:  # the start, then two batches of 20
            raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            await store.embedding_models.reembed(batch_size=20, progress=interrupt_after_two_batches)
        assert await store.embedding_models.recorded_embedding() == HASHING  # not switched half-way
        report = await store.embedding_models.reembed(
            batch_size=20, progress=lambda d, t: seen.append((d, t))
        )
        assert report.resumed and report.reembedded == 10 and report.total == 50
        assert seen[-1] == (50, 50)
        assert await store.embedding_models.recorded_embedding() == ConstantEmbedder.identity
        async with store.engine.connect() as conn:
            rows = (await conn.execute(text("SELECT (embedding::real[])[1] FROM memories"))).all()
        assert len(rows) == 50 and all(float(r[0]) == 1.0 for r in rows)
    finally:
        await store.close()
    store = await open_store(database_url, ConstantEmbedder())  # the new model is accepted now
    await store.close()


async def test_pmem_reembed_command_shows_progress_and_switches(database_url: str) -> None:
    await migrate_async(database_url, 384, embedding=HASHING)
    await seed(database_url, 30)
    with FakeOpenAI() as fake:
        env = {
            **clean_environment(),
            "PMEM_DATABASE_URL": database_url,
            "PMEM_EMBEDDING_PROVIDER": "openai",
            "PMEM_EMBEDDING_MODEL": "fake-embedding",
            "PMEM_EMBEDDING_BASE_URL": fake.base_url,
            "PMEM_EMBEDDING_API_KEY": "k",
        }
        result = subprocess.run(  # noqa: ASYNC221 - the test waits for the command on purpose
            [sys.executable, "-m", "cli.main", "reembed", "--batch-size", "7"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        assert "30/30 100%" in result.stderr
        assert "re-embedded 30 of 30 memories with openai fake-embedding" in result.stdout
        assert fake.counters["embeddings"] == 5  # 30 rows in batches of 7
    settings = load_settings(embedding_provider="openai", embedding_model="fake-embedding")
    assert embedding_identity(settings) == EmbeddingIdentity(
        provider="openai", model="fake-embedding", dim=384
    )
