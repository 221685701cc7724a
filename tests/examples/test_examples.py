"""Each program in examples/ runs as `pmem demo --keep-running` prints it, against the demo's
services (nats-server, the worker, the API on Postgres): the demo's `export` lines pasted, then each
printed command run as is by a shell."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from api.auth import mint_jwt
from cli.commands.demo_integration import parse_export_line
from cli.embedded import free_port
from store.services.tools import TOOL_NAMES
from tests.database_role import clean_environment
from tests.server_directory import server_directory

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@dataclass(frozen=True, slots=True)
class Demo:
    """A running `pmem demo --keep-running`: what it printed, its exported variables, its commands."""

    printed: str
    env: dict[str, str]
    commands: dict[str, str]  # example file name -> the command line printed for it


def clean_env() -> dict[str, str]:
    """This environment without any PMEM_* or OPENAI_* configuration, as in a fresh shell."""
    return clean_environment()


def read_until_ready(process: subprocess.Popen[str], timeout_s: float) -> str:
    """Everything the demo printed up to its `ready` line (fails when it exits or takes too long)."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.strip() == "ready":
            return "".join(lines)
    raise AssertionError(f"the demo did not get ready:\n{''.join(lines)}")


def printed_commands(printed: str) -> dict[str, str]:
    """The commands the demo prints after the export lines, by the example each runs."""
    section = printed.split("then, for example:\n", 1)[1]
    commands: dict[str, str] = {}
    for line in section.splitlines():
        for name in ("publish_event.py", "http_tools.py", "http_tools.sh", "mcp_client.py"):
            if f"examples/{name}" in line:
                commands[name] = line.strip()
        if " recall --user-id " in line:
            commands["pmem recall"] = line.strip()
    return commands


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    # its Postgres runs as its own OS user: a home outside pytest's base directory
    with server_directory("pmem-test-demo-") as home:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "demo", "--keep-running"],
            cwd=home,  # the default data directory, .pmem/demo, under it
            env={
                **clean_env(),
                "PMEM_EMBEDDING_PROVIDER": "hashing",
                "PMEM_API_PORT": str(free_port()),
                "PMEM_DEMO_NATS_PORT": str(free_port()),
                "PYTHONPATH": str(REPO),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            printed = read_until_ready(process, timeout_s=240)
            env = clean_env()
            for line in printed.splitlines():
                if line.strip().startswith("export "):
                    env.update(parse_export_line(line.strip()))
            yield Demo(printed=printed, env=env, commands=printed_commands(printed))
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                rest, errors = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                raise
        assert process.returncode == 0, errors
        assert rest.strip().endswith("stopped"), rest


def run_printed(demo: Demo, name: str, **extra: str) -> str:
    """Run the command the demo printed for `name` through a shell, with the exported variables (and
    `extra`); its standard output (fails with its standard error)."""
    done = subprocess.run(
        demo.commands[name],
        shell=True,
        env={**demo.env, **extra},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_the_demo_prints_every_variable_the_examples_read_and_a_command_for_each(demo: Demo) -> None:
    assert {"PMEM_URL", "PMEM_API_KEY", "PMEM_NATS_URL", "PMEM_DATABASE_URL", "PMEM_AUTH_JWT_SECRET"} <= set(
        demo.env
    )
    assert {"PMEM_USER_ID", "PMEM_PERSONA_ID", "PMEM_TEAM_ID"} <= set(demo.env)
    assert set(demo.commands) == {
        "publish_event.py",
        "http_tools.py",
        "http_tools.sh",
        "mcp_client.py",
        "pmem recall",
    }
    # the client examples run in tests/examples/test_client_examples.py on their own services
    for program in (REPO / "examples").iterdir():
        own = program.name in ("chat_handler.py", "review_pending.py")
        assert own or program.name in demo.commands or program.suffix not in (".py", ".sh"), program


def test_publish_event_reaches_the_demos_worker(demo: Demo) -> None:
    ack = json.loads(run_printed(demo, "publish_event.py"))
    assert ack["stream"] == "CHAT" and ack["seq"] >= 1

    def processed() -> bool:
        with psycopg.connect(demo.env["PMEM_DATABASE_URL"]) as conn:
            row = conn.execute(
                "SELECT 1 FROM processed_events WHERE event_id = %s", (uuid.UUID(ack["event_id"]),)
            ).fetchone()
        return row is not None

    wait_until(processed, "the demo's worker to process the published event")

    # a new user with display names: the worker records them for the web UI
    newcomer = uuid.uuid4()
    run_printed(
        demo,
        "publish_event.py",
        PMEM_USER_ID=str(newcomer),
        PMEM_USER_NAME="Priya Natarajan",
        PMEM_PERSONA_NAME="Chef",
    )

    def named() -> list[tuple[str, str]]:
        with psycopg.connect(demo.env["PMEM_DATABASE_URL"]) as conn:
            rows = conn.execute("SELECT kind, name FROM directory WHERE id = %s", (newcomer,)).fetchall()
        return [(str(kind), str(name)) for kind, name in rows]

    wait_until(lambda: bool(named()), "the newcomer's name in the directory")
    assert named() == [("user", "Priya Natarajan")]


def test_http_tools_with_the_standard_library(demo: Demo) -> None:
    out = run_printed(demo, "http_tools.py")
    assert f"tools: {', '.join(TOOL_NAMES)}" in out
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert json.loads(lines["memory_save"])["result"]["saved"] is True
    assert "Loves risotto" in lines["memory_recall"]
    recalled = json.loads(lines["recall"])
    assert len(recalled) == 5 + 3  # `limit` memories, then `turn_limit` turns
    assert "Is allergic to peanuts" in recalled  # what the demo approved for its user


def test_http_tools_with_curl(demo: Demo) -> None:
    out = run_printed(demo, "http_tools.sh").splitlines()
    assert [tool["function"]["name"] for tool in json.loads(out[0])["tools"]][:2] == [
        "memory_save",
        "memory_recall",
    ]
    assert json.loads(out[1])["result"]["key"] == "pet"
    assert json.loads(out[2])["result"]["facts"][0]["value"] == "Has a cat named Miso"
    assert "Has a cat named Miso" in [item.get("value") for item in json.loads(out[3])["items"]]


@pytest.mark.parametrize("who", ["service", "person"])
def test_mcp_client_calls_memory_recall(who: str, demo: Demo) -> None:
    extra: dict[str, str] = {}
    if who == "person":  # the demo's user with a JWT signed with the printed secret
        extra["PMEM_CREDENTIAL"] = mint_jwt(
            secret=demo.env["PMEM_AUTH_JWT_SECRET"],
            subject=uuid.UUID(demo.env["PMEM_USER_ID"]),
            teams=(uuid.UUID(demo.env["PMEM_TEAM_ID"]),),
        )
    out = run_printed(demo, "mcp_client.py", **extra)
    assert "tools: memory_save, memory_recall" in out
    recalled = json.loads(out.split("memory_recall: ", 1)[1])
    assert "Is vegetarian" in [memory["value"] for memory in recalled["memories"]]


def test_pmem_recall_as_printed(demo: Demo) -> None:
    out = run_printed(demo, "pmem recall")
    assert "Is vegetarian" in out and "Is allergic to peanuts" in out
