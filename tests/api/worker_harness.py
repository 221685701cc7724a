"""`pmem worker` as a real process (rules extractor, hashing embeddings) on a real nats-server and
Postgres, with stream, subjects and consumer of its own so tests sharing the server never meet."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

from cli.embedded import free_port, stop_process
from tests.database_role import clean_environment

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, kw_only=True)
class WorkerNames:
    """The NATS names one test's worker uses."""

    subject: str
    stream: str

    @classmethod
    def fresh(cls) -> WorkerNames:
        """Names no other test uses."""
        tag = uuid.uuid4().hex[:8]
        return cls(subject=f"t{tag}.conversation.ended", stream=f"CHAT_{tag}")


def worker_process(env: dict[str, str], log: int | IO[str] = subprocess.PIPE) -> subprocess.Popen[str]:
    """`pmem worker` started in the repository with `env`; its log on `log` (the stderr pipe: for
    a process read to its end; a long-lived one logs to a file, as a pipe nobody reads would block
    it, event loop included, once the log outgrows the pipe's buffer)."""
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "worker"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
    )


@contextmanager
def running_worker(
    database_url: str, nats_url: str, names: WorkerNames, timeout_s: float = 180.0
) -> Iterator[None]:
    """`pmem worker` consuming `names.subject`, ready (its /readyz answers 200) when this yields."""
    tag = names.stream.removeprefix("CHAT_")
    port = free_port()
    env = clean_environment()
    env.update(
        PMEM_DATABASE_URL=database_url,
        PMEM_NATS_URL=nats_url,
        PMEM_SUBJECT=names.subject,
        PMEM_STREAM=names.stream,
        PMEM_DURABLE=f"pmem-{tag}",
        PMEM_OUTPUT_STREAM=f"PMEM_{tag}",
        PMEM_EXTRACTED_SUBJECT=f"t{tag}.memory.extracted",
        PMEM_DLQ_SUBJECT=f"t{tag}.dlq",
        PMEM_EXTRACTOR="rules",
        PMEM_EMBEDDING_PROVIDER="hashing",
        PMEM_EMBEDDING_DIM="384",
        PMEM_HTTP_HOST="127.0.0.1",
        PMEM_HTTP_PORT=str(port),
        PMEM_SETTINGS_CACHE_S="0",
        PYTHONPATH=str(REPO),
    )
    with tempfile.TemporaryFile(mode="w+") as log:
        process = worker_process(env, log)
        try:
            _wait_ready(process, port, log, timeout_s)
            yield
        finally:
            stop_process(process, timeout_s=15)


def _wait_ready(process: subprocess.Popen[str], port: int, log: IO[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
            if answer.status_code == 200:
                return
            last = f"{answer.status_code} {answer.text.strip()}"
        except httpx.TransportError as exc:
            last = f"{type(exc).__name__}: {exc}"
        exited = process.poll()
        if exited is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            log.seek(0)
            what = (
                f"exited with code {exited} before it was ready"
                if exited is not None
                else f"was not ready within {timeout_s:.0f} s"
            )
            raise AssertionError(f"pmem worker {what} (/readyz: {last}): {log.read()[-3000:]}")
        time.sleep(0.2)


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Poll `condition` until it holds; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)
