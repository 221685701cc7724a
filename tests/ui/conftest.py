"""Fixtures of the browser tests: a real headless Chromium (Debian's package, driven by
Playwright) against the real app served by uvicorn on loopback over a real Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.ui.browser import CHROMIUM_ARGS, HOW_TO_INSTALL, chromium_path


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """One headless Chromium for the session; skips with how to install it when it is absent."""
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip(f"playwright is not installed: {HOW_TO_INSTALL}")
    if executable is None:
        pytest.skip(f"chromium is not installed: {HOW_TO_INSTALL}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=list(CHROMIUM_ARGS))
        yield browser
        browser.close()


@pytest.fixture
def browser_context(chromium: Any) -> Iterator[Any]:
    """A fresh browser profile (no cookies) per test, desktop-sized; downloads allowed."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    context.set_default_timeout(10_000)
    yield context
    context.close()


@pytest.fixture
def page(browser_context: Any) -> Any:
    return browser_context.new_page()
