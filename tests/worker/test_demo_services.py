"""`pmem demo --keep-running` as a user runs it: no warning or NOTICE noise, a database URL that
works when pasted, a second demo on the same data directory refused, Ctrl-C stops it cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

REPO = Path(__file__).resolve().parents[2]


def demo_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMEM_", "OPENAI_", "XDG_RUNTIME_DIR"))}
    return {**env, "PMEM_EMBEDDING_PROVIDER": "hashing"}


@pytest.mark.slow
def test_demo_keeps_its_services_reachable_and_refuses_a_second_demo(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo"
    command = [sys.executable, "-m", "worker.cli", "demo", "--data-dir", str(data_dir)]
    first = subprocess.Popen(
        [*command, "--keep-running"],
        cwd=REPO,
        env=demo_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
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
        assert lines and lines[-1].strip() == "ready", output
        [url] = re.findall(r"psql '([^']+)'", output)
        with psycopg.connect(url) as conn:  # the printed URL, as pasted
            assert conn.execute("SELECT count(*) FROM memories").fetchone() is not None

        second = subprocess.run(command, cwd=REPO, env=demo_env(), capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert second.stderr.strip() == (
            f"pmem demo: another pmem demo (pid {first.pid}) is running on {data_dir}; stop it (Ctrl-C) "
            "or pass --data-dir with another directory"
        )
    finally:
        first.send_signal(signal.SIGINT)
        _, errors = first.communicate(timeout=60)
    assert first.returncode == 0, errors
    assert errors.strip() == "", errors  # no XDG_RUNTIME_DIR warning, no NOTICE from Postgres
