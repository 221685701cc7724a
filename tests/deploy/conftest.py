"""Fixtures of the deploy/ tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def readme() -> Path:
    """The operators' page (docs/operations.md): deployment, sizing, the connection budget, metrics."""
    return Path(__file__).resolve().parents[2] / "docs" / "operations.md"
