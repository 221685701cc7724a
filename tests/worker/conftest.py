"""Fixtures of the worker's end-to-end tests (helpers: worker_harness.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import pytest

from cli.embedded import EmbeddedNats
from store.migrate import migrate_async
from testkit.fake_openai import FakeOpenAI
from tests.fakes.fixtures import fake_openai  # noqa: F401  (fixture)
from tests.worker.worker_harness import Harness


@pytest.fixture
async def harness(
    nats_server: EmbeddedNats,
    database_url: str,
    fake_openai: FakeOpenAI,  # noqa: F811
) -> AsyncIterator[Harness]:
    """A migrated database, unique NATS names, the fake LLM, and a test-side NATS connection."""
    await migrate_async(database_url, 384)
    nc = await nats.connect(nats_server.url)
    try:
        yield Harness.on(nats_url=nats_server.url, database_url=database_url, fake=fake_openai, nc=nc)
    finally:
        await nc.close()
