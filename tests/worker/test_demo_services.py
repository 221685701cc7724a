"""`pmem demo --keep-running` as a user runs it: no warning or NOTICE noise, a database URL and an
API key that work when pasted, a second demo on the same data directory refused, Ctrl-C (to the whole process
group, as a terminal sends it) stops it and its services cleanly."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg
import pytest

from cli.commands.demo_integration import parse_export_line
from cli.embedded import free_port
from tests.database_role import clean_environment

REPO = Path(__file__).resolve().parents[2]


def demo_env() -> dict[str, str]:
    env = clean_environment(("PMEM_", "OPENAI_", "XDG_RUNTIME_DIR"))
    return {**env, "PMEM_EMBEDDING_PROVIDER": "hashing"}


def start_demo(data_dir: Path, *options: str) -> subprocess.Popen[str]:
    """`pmem demo --data-dir DATA_DIR OPTIONS…` with piped, text output, in a process group of its
    own like a terminal's foreground job (`ctrl_c` signals the whole group, as a terminal does)."""
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "demo", "--data-dir", str(data_dir), *options],
        cwd=REPO,
        env=demo_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,
    )


def ctrl_c(demo: subprocess.Popen[str]) -> None:
    """SIGINT to the demo's process group: what Ctrl-C in its terminal sends."""
    os.killpg(demo.pid, signal.SIGINT)


@pytest.mark.slow
def test_demo_keeps_its_services_reachable_and_refuses_a_second_demo(server_dir: Path) -> None:
    data_dir = server_dir / "demo"
    command = [sys.executable, "-m", "cli.main", "demo", "--data-dir", str(data_dir)]
    ports = ("--port", str(free_port()), "--nats-port", str(free_port()))
    first = start_demo(data_dir, "--keep-running", *ports)
    try:
        assert first.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = first.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.strip() == "ready":
                break
        output = "".join(lines)
        if first.poll() is not None and first.stderr is not None:  # it exited: say why
            output += first.stderr.read()
        assert lines and lines[-1].strip() == "ready", output
        exported: dict[str, str] = {}
        for line in output.splitlines():
            if line.strip().startswith("export "):
                exported.update(parse_export_line(line.strip()))
        with psycopg.connect(exported["PMEM_DATABASE_URL"]) as conn:  # the printed URL, as pasted
            assert conn.execute("SELECT count(*) FROM memories").fetchone() is not None
        tools = urllib.request.Request(
            exported["PMEM_URL"] + "/v1/tools",
            headers={"Authorization": f"Bearer {exported['PMEM_API_KEY']}"},
        )
        with urllib.request.urlopen(tools, timeout=10) as answer:  # the API, with the printed key
            assert answer.status == 200
        event_id = str(uuid.uuid4())
        asyncio.run(_publish(exported["PMEM_NATS_URL"], event_id, exported["PMEM_USER_ID"]))

        second = subprocess.run(command, cwd=REPO, env=demo_env(), capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert second.stderr.strip() == (
            f"pmem demo: another pmem demo (pid {first.pid}) is running on {data_dir}; stop it (Ctrl-C) "
            "or pass --data-dir with another directory"
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the demo says so once the worker processed it
            line = first.stdout.readline()
            if not line or line.startswith(f"event {event_id} processed (Alice Martin)"):
                break
        assert line.startswith(f"event {event_id} processed (Alice Martin): "), line
    finally:
        ctrl_c(first)
        _, errors = first.communicate(timeout=60)
    assert first.returncode == 0, errors
    # no XDG_RUNTIME_DIR warning, no NOTICE from Postgres, no broken NATS connection on Ctrl-C
    assert errors.strip() == "", errors
    assert _processes_using(data_dir) == []


async def _publish(nats_url: str, event_id: str, user_id: str) -> None:
    """One conversation.ended event, as a platform publishes it against the demo."""
    import nats

    event = {
        "event_id": event_id,
        "type": "conversation.ended",
        "channel_id": str(uuid.uuid4()),
        "user_id": user_id,
        "messages": [{"role": "user", "content": "I live in Porto now."}],
    }
    connection = await nats.connect(nats_url)
    try:
        await connection.jetstream().publish(
            "chat.conversation.ended",
            json.dumps(event).encode(),
            headers={"Nats-Msg-Id": event_id},
            timeout=10,
        )
    finally:
        await connection.close()


def _processes_using(path: Path) -> list[str]:
    """Command lines of the running processes that name `path` (the demo's nats-server, Postgres)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(path) in cmdline:
                found.append(cmdline)
    return found


@pytest.mark.slow
def test_ctrl_c_while_the_demo_processes_its_samples_ends_it_promptly(server_dir: Path) -> None:
    data_dir = server_dir / "demo"
    demo = start_demo(data_dir)
    try:
        assert demo.stdout is not None
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = demo.stdout.readline()
            if not line or line.startswith("published"):
                break
        assert line.startswith("published"), line
        ctrl_c(demo)  # the samples are being processed
        interrupted = time.monotonic()
        _, errors = demo.communicate(timeout=60)
        took = time.monotonic() - interrupted
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 130, errors
    assert "interrupted" in errors
    assert took < 10, f"the demo took {took:.1f}s to stop after Ctrl-C"
    assert _processes_using(data_dir) == []  # its nats-server and Postgres stopped with it
