"""Fixtures of the deploy/ tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def readme() -> Path:
    return Path(__file__).resolve().parents[2] / "README.md"
