"""`pmem worker` start-up against unreachable dependencies, as a subprocess: a bounded, configurable
wait, one log line naming what failed, a non-zero exit; SIGTERM/SIGINT end it in every phase."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.api.worker_harness import worker_process
from tests.database_role import clean_environment
from tests.worker.worker_harness import Harness


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def start(h: Harness, processes: list[subprocess.Popen[str]], **overrides: object) -> subprocess.Popen[str]:
    env = {
        **clean_environment(),
        **h.env(**overrides),
    }
    proc = worker_process(env)
    processes.append(proc)
    return proc


def signalled(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> tuple[int, float]:
    """Send `sig`; the exit status and the seconds the process took to end after it."""
    sent = time.monotonic()
    proc.send_signal(sig)
    code = proc.wait(timeout=10)
    return code, time.monotonic() - sent


def read_until(proc: subprocess.Popen[str], fragment: str, *, within: float) -> list[str]:
    """stderr lines up to and including the first one containing `fragment` (fails after `within`)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + within
    lines: list[str] = []
    os.set_blocking(proc.stderr.fileno(), False)
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if line:
            lines.append(line)
            if fragment in line:
                return lines
        elif proc.poll() is not None:
            break
        else:
            time.sleep(0.02)  # polling a pipe, not synchronising: the deadline bounds it
    raise AssertionError(f"no stderr line with {fragment!r} within {within}s; got {lines}")


def errors(lines: list[str]) -> list[dict[str, object]]:
    records = [json.loads(line) for line in lines if line.startswith("{")]
    return [r for r in records if r.get("level") in ("ERROR", "error")]


def test_unreachable_nats_exits_non_zero_within_the_startup_timeout(
    harness: Harness, processes: list[subprocess.Popen[str]]
) -> None:
    # the timeout bounds the whole start-up, the database's opening included (seconds on a loaded
    # machine): long enough for that phase, so the wait that runs out is NATS's
    proc = start(harness, processes, nats_url=f"nats://127.0.0.1:{closed_port()}", startup_timeout_s=8)
    # timed from the start-up phase, not from the process start: on a loaded machine the imports
    # alone can take seconds, and they are not the wait the timeout bounds
    lines = read_until(proc, "connecting to NATS", within=30)
    started = time.monotonic()
    code = proc.wait(timeout=20)
    elapsed = time.monotonic() - started
    assert proc.stderr is not None
    lines += (proc.stderr.read() or "").splitlines()
    assert code == 3  # unreachable (cli/commands/errors.py)
    assert elapsed < 8 + 3  # the timeout plus the shutdown
    (error,) = errors(lines)
    message = str(error["message"])
    assert "connecting to NATS" in message and "PMEM_STARTUP_TIMEOUT_S=8" in message
    assert "\n" not in message


def test_unreachable_postgres_exits_non_zero_with_one_line(
    harness: Harness, processes: list[subprocess.Popen[str]]
) -> None:
    url = f"postgresql://postgres:secretpw@127.0.0.1:{closed_port()}/postgres"
    proc = start(harness, processes, database_url=url, startup_timeout_s=10)
    code = proc.wait(timeout=20)
    assert proc.stderr is not None
    lines = proc.stderr.read().splitlines()
    assert code == 3  # unreachable (cli/commands/errors.py)
    (error,) = errors(lines)
    message = str(error["message"])
    assert "opening the database" in message and "\n" not in message
    assert "secretpw" not in "\n".join(lines)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_startup_ends_the_process_within_5s(
    harness: Harness, processes: list[subprocess.Popen[str]], sig: signal.Signals
) -> None:
    proc = start(harness, processes, nats_url=f"nats://127.0.0.1:{closed_port()}", startup_timeout_s=120)
    read_until(proc, "connecting to NATS", within=30)
    _, seconds = signalled(proc, sig)
    assert seconds < 5


def test_sigterm_while_running_ends_the_process_within_5s(
    harness: Harness, processes: list[subprocess.Popen[str]]
) -> None:
    proc = start(harness, processes)
    read_until(proc, "with 4 handlers", within=30)
    code, seconds = signalled(proc)
    assert code == 0
    assert seconds < 5


def test_a_second_signal_during_the_graceful_shutdown_exits_at_once(
    harness: Harness, processes: list[subprocess.Popen[str]]
) -> None:
    import asyncio

    from tests.worker.worker_harness import conversation

    h = harness
    h.fake.chat_latency_s = 60.0  # an event stays in flight: the graceful shutdown would wait
    proc = start(h, processes, shutdown_timeout_s=60)
    read_until(proc, "with 4 handlers", within=30)
    loop = asyncio.new_event_loop()  # not asyncio.run: it would unset the session's event loop
    try:
        loop.run_until_complete(_publish_one(h.base, conversation("I live in Oslo.", "Ok.")))
    finally:
        loop.close()
    deadline = time.monotonic() + 30
    while h.fake.counters.get("max_in_flight", 0) < 1:
        assert time.monotonic() < deadline, "the event never reached the LLM"
        time.sleep(0.02)  # polling the fake's counter, bounded by the deadline
    proc.send_signal(signal.SIGTERM)
    read_until(proc, "finishing in-flight events", within=10)
    code, seconds = signalled(proc)
    assert code == 1
    assert seconds < 5


async def _publish_one(base: dict[str, object], event: dict[str, object]) -> None:
    import nats

    nc = await nats.connect(str(base["nats_url"]))
    try:
        await nc.jetstream().publish(
            str(base["subject"]), json.dumps(event).encode(), headers={"Nats-Msg-Id": str(event["event_id"])}
        )
    finally:
        await nc.close()
