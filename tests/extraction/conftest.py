"""Fixtures for the extraction tests: the fake OpenAI-compatible server and fast retry schedules."""

from __future__ import annotations

import pytest

from extraction.errors import RetryPolicy
from tests.fakes.fixtures import fake_openai  # noqa: F401  (fixture re-exported for this directory)


@pytest.fixture
def fast_retry() -> RetryPolicy:
    """Three retries with millisecond backoff; Retry-After honoured up to 2 s."""
    return RetryPolicy(max_retries=3, wait_initial_s=0.001, wait_max_s=0.005, retry_after_cap_s=2.0)
