"""The client examples end to end on real services: `pmem serve`, `pmem worker` on a real
nats-server, and the fake OpenAI-compatible server as the chat model. The Python chat handler asks
for the hint, calls the model with it and publishes `conversation.ended`; the worker extracts; the
reviewer script approves; the next hint has the fact. Then the same with the Node examples."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from api.auth import mint_jwt
from cli.embedded import EmbeddedNats
from testkit.fake_openai import FakeOpenAI
from tests.api.conftest import SECRET
from tests.api.serve_harness import Served, served_process
from tests.api.worker_harness import WorkerNames, running_worker
from tests.database_role import clean_environment
from tests.fakes.fixtures import fake_openai  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
NODE_EXAMPLES = REPO / "examples" / "node"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(new_database: Callable[[], str]) -> Iterator[Served]:
    yield from served_process(new_database)


def run(command: list[str], env: dict[str, str], cwd: Path = REPO) -> dict[str, object]:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("language", ["python", "node"])
def test_chat_handler_then_reviewer_then_the_hint_has_the_fact(
    language: str,
    served: Served,
    nats_server: EmbeddedNats,
    fake_openai: FakeOpenAI,  # noqa: F811
) -> None:
    if language == "node" and not (NODE_EXAMPLES / "node_modules" / "nats").exists():
        node = shutil.which("node") or "absent"
        why = f"node ({node}) and `npm ci` in clients/typescript and examples/node are needed"
        if os.environ.get("PMEM_REQUIRE_NODE") == "1":
            pytest.fail(why)
        pytest.skip(why)
    names = WorkerNames.fresh()
    user, team = uuid.uuid4(), uuid.UUID(int=0xA)
    fake_openai.set_chat_responder(lambda body: "Try a mushroom risotto.")
    env = {
        **clean_environment(),
        "PYTHONPATH": str(REPO),
        "PMEM_URL": served.base,
        "PMEM_API_KEY": served.service_key,
        "PMEM_NATS_URL": nats_server.url,
        "PMEM_SUBJECT": names.subject,
        "PMEM_USER_ID": str(user),
        "PMEM_TEAM_ID": str(team),
        "OPENAI_BASE_URL": fake_openai.base_url,
        "OPENAI_API_KEY": "test",
        "PMEM_REVIEWER_TOKEN": mint_jwt(secret=SECRET, subject=uuid.uuid4(), role="admin"),
    }
    python, node = [sys.executable], ["node"]
    with running_worker(served.database_url, nats_server.url, names):
        if language == "python":
            chat = run([*python, "examples/chat_handler.py", "I am vegetarian and I live in Lisbon."], env)
            approved = run([*python, "examples/review_pending.py"], env)
        else:
            chat = run(
                [*node, "chat_handler.mjs", "I am vegetarian and I live in Lisbon."], env, NODE_EXAMPLES
            )
            approved = run([*node, "review_pending.mjs"], env, NODE_EXAMPLES)
    assert chat["reply"] == "Try a mushroom risotto." and chat["hint"] == ""
    assert approved["status"] == "active"
    second = (
        run([*python, "examples/chat_handler.py", "What should I cook?"], env)
        if language == "python"
        else None
    )
    if second is not None:
        assert str(approved["value"]) in str(second["hint"])
        system = fake_openai.chat_requests()[-1]["messages"][0]["content"]
        assert str(approved["value"]) in system
