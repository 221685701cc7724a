"""A real Prometheus (Debian's `prometheus`) scrapes a real `pmem worker` and a real `pmem serve` on
loopback while the worker handles events (processed, retried after LLM errors, dead-lettered), and
every query of every Grafana panel in deploy/grafana answers with at least one series.

The scrape targets are one table (`SCRAPE_TARGETS` in the test): another process that serves
/metrics is one more line there."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.embedded import EmbeddedNats, free_port, stop_process
from testkit.fake_openai import FakeOpenAI, Reply
from tests.deploy.deploy_files import dashboard_queries, prometheus_tool
from tests.fakes.fixtures import fake_openai  # noqa: F401  (fixture)
from tests.worker.worker_harness import base_settings, conversation

pytestmark = pytest.mark.slow


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_until(check: Any, *, within: float, what: str) -> Any:
    """Poll `check()` until it returns something truthy; fail naming `what` (and the last value)."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            last = check()
            if last:
                return last
        time.sleep(0.25)
    raise AssertionError(f"timed out after {within:.0f}s waiting for {what}; last: {last!r}")


@contextlib.contextmanager
def running(
    command: list[str], *, name: str, ready_url: str, logs: Path, env: Mapping[str, str] | None = None
) -> Iterator[None]:
    """`command` running, its output in `logs`, from when GET `ready_url` answers 200; stopped after."""
    log = logs.open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"{name} exited: {logs.read_text()[-3000:]}")
            with urllib.request.urlopen(ready_url, timeout=2) as response:
                return bool(response.status == 200)

        wait_until(ready, within=60, what=f"{name} to be ready")
        yield
    finally:
        stop_process(process, timeout_s=30)
        log.close()


@contextlib.contextmanager
def running_pmem(args: list[str], env: Mapping[str, str], *, port: int, logs: Path) -> Iterator[str]:
    """A `pmem ARGS` process whose /metrics is on `port`; yields its scrape address when /readyz
    answers 200."""
    address = f"127.0.0.1:{port}"
    with running(
        [sys.executable, "-m", "cli.main", *args],
        name=f"pmem {' '.join(args)}",
        ready_url=f"http://{address}/readyz",
        logs=logs,
        env={**os.environ, **env},
    ):
        yield address


@contextlib.contextmanager
def running_prometheus(targets: Mapping[str, str], workdir: Path) -> Iterator[str]:
    """Prometheus scraping `targets` ({job: host:port}) every second; yields its base URL."""
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [address]}]} for job, address in targets.items()
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        prometheus_tool("prometheus"),
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with running(command, name="Prometheus", ready_url=f"{url}/-/ready", logs=workdir / "prometheus.log"):
        yield url


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    answer = http_json(f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def publish(nats_url: str, subject: str, bodies: list[bytes]) -> None:
    """Publish with the nats-py client in a short-lived event loop of its own."""
    import asyncio

    import nats

    async def go() -> None:
        nc = await nats.connect(nats_url)
        try:
            js = nc.jetstream()
            for body in bodies:
                await js.publish(subject, body, timeout=10)
        finally:
            await nc.close()

    asyncio.run(go())


def api_env(env: Mapping[str, str], port: int) -> dict[str, str]:
    """`pmem serve` on `port`, with the worker's database and a test signing secret."""
    return {
        **env,
        "PMEM_API_PORT": str(port),
        "PMEM_AUTH_JWT_SECRET": "prometheus-scrape-test-secret-0123456789",
    }


def test_every_dashboard_query_returns_a_series_from_a_real_scrape(
    nats_server: EmbeddedNats,
    database_url: str,
    fake_openai: FakeOpenAI,  # noqa: F811
    tmp_path: Path,
) -> None:
    settings = base_settings(
        nats_url=nats_server.url, database_url=database_url, llm_url=fake_openai.base_url
    )
    worker_port, api_port = free_port(), free_port()
    env = {
        **{
            f"PMEM_{k.upper()}": str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in settings.items()
        },
        "PMEM_HTTP_PORT": str(worker_port),
        "PMEM_LOG_JSON": "false",
        "PMEM_CONCURRENCY": "1",  # one event at a time: the scripted LLM errors hit the first event
    }
    # migrated with the worker's own settings (the schema records the embedding model)
    subprocess.run(
        [sys.executable, "-m", "cli.main", "migrate"],
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
    # one kept memory and one below the minimum confidence (a dropped candidate) per event
    fake_openai.set_extraction(
        {
            "memories": [
                {"key": "diet preference", "value": "Is vegetarian", "confidence": 0.9, "scope": "user"},
                {"key": "current mood", "value": "Was tired", "confidence": 0.1, "scope": "user"},
            ]
        }
    )
    # the first event's LLM calls fail twice: one in-process LLM retry, then the event is retried
    fake_openai.script_chat(Reply.server_error(), Reply.server_error())
    queries = dashboard_queries()
    assert len(queries) >= 10

    with contextlib.ExitStack() as stack:
        SCRAPE_TARGETS = {
            "pmem-worker": stack.enter_context(
                running_pmem(["worker"], env, port=worker_port, logs=tmp_path / "worker.log")
            ),
            "pmem-api": stack.enter_context(
                running_pmem(["serve"], api_env(env, api_port), port=api_port, logs=tmp_path / "api.log")
            ),
        }
        prometheus = stack.enter_context(running_prometheus(SCRAPE_TARGETS, tmp_path))
        # API requests besides Prometheus's scrapes and the readiness checks: refused ones (401) on a
        # FastAPI route and on the MCP endpoint
        api = f"http://{SCRAPE_TARGETS['pmem-api']}"
        for method, path in (("GET", "/v1/me/memories"), ("POST", "/mcp")):
            request = urllib.request.Request(f"{api}{path}", method=method, data=b"{}")
            with contextlib.suppress(urllib.error.HTTPError):
                urllib.request.urlopen(request, timeout=10).close()
        events = [json.dumps(conversation("I'm vegetarian.", "Noted!")).encode() for _ in range(3)]
        publish(nats_server.url, settings["subject"], [*events, b"this is not json"])

        def scraped_everything() -> bool:
            processed = query(prometheus, 'sum(pmem_events_total{outcome="processed"})')
            dlq = query(prometheus, "sum(pmem_dlq_total)")
            retried = query(prometheus, "sum(pmem_retries_total)")
            return bool(
                processed
                and float(processed[0]["value"][1]) >= 3
                and dlq
                and float(dlq[0]["value"][1]) >= 1
                and retried
            )

        wait_until(
            scraped_everything, within=90, what="Prometheus to see 3 processed, 1 retried, 1 dead-lettered"
        )

        def every_target_up() -> list[str]:
            return sorted(series["metric"]["job"] for series in query(prometheus, "up == 1"))

        wait_until(
            lambda: every_target_up() == sorted(SCRAPE_TARGETS), within=60, what="every target scraped and up"
        )

        def empty_panels() -> list[str]:
            return [f"{q.label}: {q.expr}" for q in queries if not query(prometheus, q.expr)]

        # rate() needs two samples after the change: wait until every panel has its series
        def all_answer() -> bool:
            return not empty_panels()

        with contextlib.suppress(AssertionError):
            wait_until(all_answer, within=30, what="every dashboard query to answer")
        assert empty_panels() == []
        # the MCP endpoint is a route of its own, not "unmatched"
        assert query(prometheus, 'pmem_api_requests_total{route="/mcp", status="401"}')
