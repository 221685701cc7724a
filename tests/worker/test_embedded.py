"""The embedded services: the Postgres settings they write; a nats-server or Postgres left behind by
a killed owner is stopped by the next one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli.embedded import (
    EmbeddedNats,
    EmbeddedPostgres,
    alter_system_sql,
    forget_exited_handles,
    process_running,
    stop_orphaned_server,
)

REPO = Path(__file__).resolve().parents[2]


def test_a_list_setting_gets_one_literal_per_element() -> None:
    sql = alter_system_sql("shared_preload_libraries", ["pg_stat_statements", "auto_explain"])
    assert sql == "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements', 'auto_explain';"


def test_a_string_setting_is_one_literal_even_with_commas_and_quotes() -> None:
    sql = alter_system_sql("log_line_prefix", "%m, %p's ")
    assert sql == "ALTER SYSTEM SET log_line_prefix = '%m, %p''s ';"


@pytest.mark.parametrize(("name", "value"), [("work_mem; DROP TABLE x", "1MB"), ("search_path", [])])
def test_a_bad_name_or_an_empty_list_is_refused(name: str, value: str | list[str]) -> None:
    with pytest.raises(ValueError, match="Postgres setting"):
        alter_system_sql(name, value)


@pytest.mark.slow
def test_a_nats_server_left_by_a_killed_owner_is_stopped_by_the_next_start(tmp_path: Path) -> None:
    store_dir = tmp_path / "nats"
    # an owner that starts the server in its own process group and dies without stopping it
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from cli.embedded import EmbeddedNats; "
            "EmbeddedNats(store_dir=Path(sys.argv[1]), own_process_group=True).start()",
            str(store_dir),
        ],
        cwd=REPO,
        check=True,
        timeout=60,
    )
    orphan = int((store_dir / "nats-server.pid").read_text())
    assert process_running(orphan) and os.getpgid(orphan) == orphan  # a group of its own, still running
    server = EmbeddedNats(store_dir=store_dir).start()
    try:
        assert not process_running(orphan)
        assert (
            server.process is not None
            and int((store_dir / "nats-server.pid").read_text()) == server.process.pid
        )
    finally:
        server.stop()


def test_a_pid_file_naming_another_program_is_left_alone(tmp_path: Path) -> None:
    pid_file = tmp_path / "nats-server.pid"
    pid_file.write_text(str(os.getpid()))
    stop_orphaned_server(pid_file, tmp_path)  # this test's own process: not a nats-server on tmp_path
    assert process_running(os.getpid())


def test_exited_processes_are_dropped_from_the_postgres_handle_list(tmp_path: Path) -> None:
    exited = subprocess.Popen(["true"])
    exited.wait()
    (tmp_path / ".handle_pids.json").write_text(json.dumps([exited.pid, os.getpid()]))
    forget_exited_handles(tmp_path)
    assert json.loads((tmp_path / ".handle_pids.json").read_text()) == [os.getpid()]
    forget_exited_handles(tmp_path / "missing")  # no list yet: nothing to do


def _postgres_on(data_dir: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and process_running(int(entry.name)):
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline[0].endswith(b"postgres") and os.fsencode(data_dir) in cmdline:
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_a_postgres_left_by_a_killed_owner_is_stopped_by_the_next_owner(server_dir: Path) -> None:
    data_dir = server_dir / "pg" / "data"
    # an owner that starts the server and is killed before it can stop it
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal, sys; from pathlib import Path; from cli.embedded import EmbeddedPostgres; "
            "EmbeddedPostgres(data_dir=Path(sys.argv[1])).start(); os.kill(os.getpid(), signal.SIGKILL)",
            str(data_dir),
        ],
        cwd=REPO,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL
    assert _postgres_on(data_dir)
    server = EmbeddedPostgres(data_dir=data_dir).start()
    server.stop()
    deadline = time.monotonic() + 10
    while _postgres_on(data_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _postgres_on(data_dir) == []
