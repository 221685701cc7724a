"""`pmem recall` and `pmem review` give up on a database that accepts the connection and then never
answers within PMEM_DB_CONNECT_TIMEOUT_S, with one line naming the problem and the fix."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.commands.errors import EXIT_UNREACHABLE
from tests.database_role import clean_environment

REPO = Path(__file__).resolve().parents[2]
USER = "7a1c0000-0000-4000-8000-000000000000"
CONNECT_TIMEOUT_S = 2
# on top of the timeout and of the command's own start-up (measured against a closed port): well
# under the store's default connect timeout (10 s), which a command ignoring the setting waits out
ALLOWANCE_S = 4


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte; its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stopping = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stopping.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stopping.set()
        thread.join(timeout=5)
        for connection in held:
            connection.close()
        listener.close()


@pytest.mark.parametrize(
    "command",
    [["recall", "--user-id", USER, "what", "matters"], ["review", "list"]],
    ids=["recall", "review"],
)
def pmem(command: list[str], database_url: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run `pmem COMMAND` against `database_url`; the result and how long it took."""
    env = clean_environment()
    env |= {
        "PMEM_DATABASE_URL": database_url,
        "PMEM_DB_CONNECT_TIMEOUT_S": str(CONNECT_TIMEOUT_S),
        "PMEM_EMBEDDING_PROVIDER": "hashing",
    }
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", *command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CONNECT_TIMEOUT_S + 60,
        check=False,
    )
    return result, time.monotonic() - started


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (connections are refused at once)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    "command",
    [["recall", "--user-id", USER, "what", "matters"], ["review", "list"]],
    ids=["recall", "review"],
)
def test_a_database_that_never_answers_ends_the_command(silent_server: int, command: list[str]) -> None:
    _, start_up = pmem(command, f"postgresql://pmem@127.0.0.1:{closed_port()}/pmem")
    result, elapsed = pmem(command, f"postgresql://pmem@127.0.0.1:{silent_server}/pmem")
    limit = start_up + CONNECT_TIMEOUT_S + ALLOWANCE_S
    assert elapsed < limit, f"{elapsed:.1f} s (start-up {start_up:.1f} s)"
    assert result.returncode == EXIT_UNREACHABLE, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"pmem {command[0]}: cannot reach the database (")
    assert "PMEM_DATABASE_URL" in lines[0] and "Traceback" not in result.stderr
