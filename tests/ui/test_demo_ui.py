"""`pmem demo --keep-running` leaves the web UI running with pending memories in all three scopes, a proposed
change, and sign-in links for an admin, a team admin and a user; Ctrl-C stops it cleanly."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cli.embedded import free_port
from tests.database_role import clean_environment
from tests.ui.harness import REPO

pytestmark = pytest.mark.slow


def read_links(process: subprocess.Popen[str], timeout_s: float) -> tuple[dict[str, str], str]:
    """The sign-in links the demo prints (by role), and everything it printed up to them."""
    assert process.stdout is not None
    links: dict[str, str] = {}
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(links) < 3 and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            if process.poll() is not None:
                break
            continue
        seen.append(line)
        match = re.match(r"\s+(admin|team admin|user)\s+(http://\S+)", line)
        if match:
            links[match.group(1)] = match.group(2)
    return links, "".join(seen)


def test_demo_serves_the_ui_with_every_scope_waiting_until_ctrl_c(server_dir: Path, chromium: Any) -> None:
    port = free_port()
    env = clean_environment()
    env["PMEM_EMBEDDING_PROVIDER"] = "hashing"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli.main",
            "demo",
            "--data-dir",
            str(server_dir / "demo"),
            "--keep-running",
            "--port",
            str(port),
            "--nats-port",
            str(free_port()),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        links, printed = read_links(process, timeout_s=150)
        assert set(links) == {"admin", "team admin", "user"}, printed
        assert "scripted offline stand-in for an LLM" in printed

        context = chromium.new_context()
        page = context.new_page()
        page.goto(links["admin"])
        page.wait_for_url(f"http://127.0.0.1:{port}/ui/review")
        # every scope waiting, each in words and with the sample conversations' names
        scopes = set(page.locator("[data-row-id] .item-head .badge[data-scope]").all_inner_texts())
        assert {"about Bob Silva", "Chef's own", "Bob Silva, with Chef", "Carla Reis, with Tutor"} <= scopes
        assert page.locator("[data-signed-in]").inner_text() == "Signed in as Priya Raman, admin"
        assert page.locator('a[data-name="team"]').first.inner_text() == "Acme"
        change = page.locator("[data-row-id]", has=page.get_by_text("Proposed change"))
        assert "Moved to Porto" in change.locator(".new").inner_text()
        context.close()

        context = chromium.new_context()
        page = context.new_page()
        page.goto(links["user"])
        page.wait_for_url(f"http://127.0.0.1:{port}/ui/me")
        assert page.get_by_role("heading", name="About you").is_visible()
        assert page.get_by_role("heading", name="You, with Chef").is_visible()
        assert page.locator("[data-signed-in]").inner_text() == "Signed in as Alice Martin"
        remembered = page.locator("[data-conversations]").inner_text()
        assert "with Chef" in remembered and "persona 356511b6" not in remembered
        context.close()
    finally:
        process.send_signal(signal.SIGINT)
        try:
            rest, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert process.returncode == 0, rest
