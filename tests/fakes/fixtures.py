"""Pytest fixtures around the fake OpenAI-compatible server. Import them in a conftest:

from tests.fakes.fixtures import fake_openai  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.fake_openai import FakeOpenAI


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started fake server (no latency, 384-dim embeddings, rules-based chat answers) per test."""
    with FakeOpenAI() as server:
        yield server
