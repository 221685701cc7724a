"""`pmem serve` as a real process on a fresh, migrated Postgres database, for tests that drive it
over real HTTP (and MCP): the process, its base URL, a service key and a store on the same data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from cli.embedded import free_port
from store.migrate import migrate
from tests.api.conftest import SECRET
from tests.database_role import clean_environment

PMEM = [sys.executable, "-m", "cli.main"]
DIM = 384


@dataclass(frozen=True, kw_only=True)
class Served:
    """A running `pmem serve`."""

    base: str
    database_url: str
    env: dict[str, str]
    service_key: str


def pmem(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run one `pmem` command with the server's environment."""
    return subprocess.run([*PMEM, *args], env=env, capture_output=True, text=True, timeout=60, check=False)


def serve_environment(database_url: str) -> dict[str, str]:
    """The environment of a `pmem serve` on `database_url` (loopback, a free port, the test secret)."""
    env = clean_environment("PMEM_")
    env.update(
        PMEM_DATABASE_URL=database_url,
        PMEM_AUTH_JWT_SECRET=SECRET,
        PMEM_API_HOST="127.0.0.1",
        PMEM_API_PORT=str(free_port()),
        PMEM_SETTINGS_CACHE_S="0",
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    return env


@dataclass
class ServeProcess:
    """Start and stop `pmem serve` (every wait has a deadline). Its log goes to a file: a pipe nobody
    reads until the end would block the server once the log outgrew the pipe's buffer."""

    env: dict[str, str]
    proc: subprocess.Popen[str] | None = None
    log: Path | None = None

    def start(self, timeout_s: float = 30.0) -> str:
        """Start the server; its base URL once /readyz answers."""
        handle, name = tempfile.mkstemp(prefix="pmem-serve-", suffix=".log")
        self.log = Path(name)
        try:
            self.proc = subprocess.Popen(
                [*PMEM, "serve"], env=self.env, stdout=subprocess.DEVNULL, stderr=handle, text=True
            )
        finally:
            os.close(handle)  # the child holds its own copy
        base = f"http://127.0.0.1:{self.env['PMEM_API_PORT']}"
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    return base
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                logged = self.logged()
                self.stop()
                raise AssertionError(f"pmem serve did not become ready: {logged[-3000:]}")
            time.sleep(0.1)

    def logged(self) -> str:
        """What the server has logged so far."""
        return self.log.read_text(errors="replace") if self.log is not None and self.log.exists() else ""

    def stop(self) -> int | None:
        """SIGTERM, then kill after 10 s; the exit status when it ended by itself. The log is kept
        until the process is gone, then removed."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        finally:
            self.proc.kill()
            self.proc.wait()
            if self.log is not None:
                self.log.unlink(missing_ok=True)


def logged_at_start_up(env: dict[str, str], holding: str) -> list[str]:
    """The lines holding `holding` that `pmem serve` logged by the time it was ready (it is then
    stopped, and must exit cleanly)."""
    process = ServeProcess(env)
    process.start()
    try:
        return [line for line in process.logged().splitlines() if holding in line]
    finally:
        assert process.stop() == 0


def served_process(new_database: Callable[[], str]) -> Iterator[Served]:
    """A fresh database, a service key from `pmem keys create`, and `pmem serve` on it."""
    url = new_database()
    migrate(url, DIM)
    env = serve_environment(url)
    created = pmem(env, "keys", "create", "chat-backend")
    assert created.returncode == 0, created.stderr
    process = ServeProcess(env)
    base = process.start()
    try:
        yield Served(base=base, database_url=url, env=env, service_key=created.stdout.strip())
    finally:
        process.stop()
