"""Each program in examples/ runs, as a platform would run it, against real services: nats-server,
`pmem worker` (rules extractor) and `pmem serve` on Postgres."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from api.auth import mint_jwt
from store.services.tools import TOOL_NAMES
from tests.api.conftest import SECRET
from tests.api.serve_harness import Served, served_process
from tests.api.worker_harness import WorkerNames, running_worker, wait_until
from worker.embedded import EmbeddedNats

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
USER, PERSONA, TEAM = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


@pytest.fixture(scope="module")
def services(
    new_database: Callable[[], str], nats_server: EmbeddedNats
) -> Iterator[tuple[Served, WorkerNames]]:
    names = WorkerNames.fresh()
    for served in served_process(new_database):
        with running_worker(served.database_url, nats_server.url, names):
            yield served, names


def run(program: str, env: dict[str, str], *args: str) -> str:
    """Run one example; its standard output (fails with its standard error)."""
    command = (
        ["sh", str(EXAMPLES / program)]
        if program.endswith(".sh")
        else [sys.executable, str(EXAMPLES / program)]
    )
    done = subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def context_env(served: Served, **extra: str) -> dict[str, str]:
    return {
        **served.env,
        "PMEM_URL": served.base,
        "PMEM_API_KEY": served.service_key,
        "USER_ID": str(USER),
        "PERSONA_ID": str(PERSONA),
        "TEAM_ID": str(TEAM),
        **extra,
    }


def test_publish_event_reaches_the_worker(
    services: tuple[Served, WorkerNames], nats_server: EmbeddedNats
) -> None:
    served, names = services
    env = context_env(
        served,
        NATS_URL=nats_server.url,
        PMEM_SUBJECT=names.subject,
        USER_NAME="Alice Martin",
        PERSONA_NAME="Chef Remy",
        TEAM_NAME="Acme support",
    )
    ack = json.loads(run("publish_event.py", env))
    assert ack["seq"] >= 1

    def extracted() -> list[tuple[str, str]]:
        with psycopg.connect(served.database_url) as conn:
            rows = conn.execute(
                "SELECT key, status FROM memories WHERE team_id = %s AND (owner_id = %s OR user_id = %s)",
                (TEAM, USER, USER),
            ).fetchall()
        return [(str(key), str(status)) for key, status in rows]

    wait_until(lambda: bool(extracted()), "the worker to write the published event's memories")
    assert {status for _, status in extracted()} == {"pending_review"}
    with psycopg.connect(served.database_url) as conn:
        named = conn.execute("SELECT kind, name FROM directory ORDER BY kind").fetchall()
    assert named == [("persona", "Chef Remy"), ("team", "Acme support"), ("user", "Alice Martin")]


def test_http_tools_with_the_standard_library(services: tuple[Served, WorkerNames]) -> None:
    served, _ = services
    out = run("http_tools.py", context_env(served))
    assert f"tools: {', '.join(TOOL_NAMES)}" in out
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert json.loads(lines["memory_save"])["result"]["saved"] is True
    assert "Loves risotto" in lines["memory_recall"]
    assert "Loves risotto" in json.loads(lines["recall"])


def test_http_tools_with_curl(services: tuple[Served, WorkerNames]) -> None:
    served, _ = services
    out = run("http_tools.sh", context_env(served)).splitlines()
    assert [tool["function"]["name"] for tool in json.loads(out[0])["tools"]][:2] == [
        "memory_save",
        "memory_recall",
    ]
    assert json.loads(out[1])["result"]["key"] == "pet"
    assert json.loads(out[2])["result"]["facts"][0]["value"] == "Has a cat named Miso"
    assert "Has a cat named Miso" in [item.get("value") for item in json.loads(out[3])["items"]]


@pytest.mark.parametrize("who", ["service", "person"])
def test_mcp_client_calls_memory_recall(who: str, services: tuple[Served, WorkerNames]) -> None:
    served, _ = services
    run("http_tools.py", context_env(served))  # something active to recall
    if who == "service":
        env = context_env(served, PMEM_CREDENTIAL=served.service_key)
    else:
        person = mint_jwt(secret=SECRET, subject=USER, teams=(TEAM,))
        env = context_env(served, PMEM_CREDENTIAL=person)
        del env["USER_ID"]  # a person acts for themselves
    out = run("mcp_client.py", env, "favourite food")
    assert "tools: memory_save, memory_recall" in out
    recalled = json.loads(out.split("memory_recall: ", 1)[1])
    assert "Loves risotto" in [memory["value"] for memory in recalled["memories"]]
