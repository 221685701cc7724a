"""The TypeScript client: its committed OpenAPI document and generated types match the app's, and
its own tests (Node's test runner) pass against a running `pmem serve`. Without Node they are
skipped, saying so, unless PMEM_REQUIRE_NODE=1 (CI) makes that a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from api.auth import mint_jwt
from api.openapi_document import openapi_document, render
from tests.api.conftest import SECRET
from tests.api.serve_harness import Served

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
REGENERATE = (
    "python -m api.openapi_document clients/typescript/openapi.json"
    " && (cd clients/typescript && npm run generate)"
)


def node_or_skip() -> str:
    """The path of `node` with the package's modules installed; skips (or fails in CI) without."""
    node = shutil.which("node")
    ready = node is not None and (PACKAGE / "node_modules" / ".bin" / "openapi-typescript").exists()
    if not ready:
        why = "node (>= 20) and `npm ci` in clients/typescript are needed for the TypeScript client's tests"
        if os.environ.get("PMEM_REQUIRE_NODE") == "1":
            pytest.fail(why)
        pytest.skip(why)
    assert node is not None
    return node


def test_the_committed_openapi_document_is_the_apps() -> None:
    committed = (PACKAGE / "openapi.json").read_text(encoding="utf-8")
    assert committed == render(openapi_document()), f"the API changed: regenerate with {REGENERATE}"


def test_the_committed_types_are_generated_from_the_document(tmp_path: Path) -> None:
    node_or_skip()
    fresh = tmp_path / "schema.d.ts"
    document = tmp_path / "openapi.json"
    document.write_text(render(openapi_document()), encoding="utf-8")
    done = subprocess.run(
        [
            str(PACKAGE / "node_modules" / ".bin" / "openapi-typescript"),
            str(document),
            "--output",
            str(fresh),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    committed = (PACKAGE / "src" / "schema.d.ts").read_text(encoding="utf-8")
    assert committed == fresh.read_text(encoding="utf-8"), f"regenerate with {REGENERATE}"


def test_the_typescript_clients_tests_pass_against_a_running_server(served: Served) -> None:
    node = node_or_skip()
    build = subprocess.run(
        [str(PACKAGE / "node_modules" / ".bin" / "tsc"), "-p", "tsconfig.json"],
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    user, team = uuid.uuid4(), uuid.UUID(int=0xA)
    env = {
        **os.environ,
        "PMEM_TEST_URL": served.base,
        "PMEM_TEST_SERVICE_KEY": served.service_key,
        "PMEM_TEST_ADMIN_TOKEN": mint_jwt(secret=SECRET, subject=uuid.uuid4(), role="admin"),
        "PMEM_TEST_USER_TOKEN": mint_jwt(secret=SECRET, subject=user, teams=(team,)),
        "PMEM_TEST_USER_ID": str(user),
        "PMEM_TEST_TEAM_ID": str(team),
    }
    done = subprocess.run(
        [node, "--test", "test/"],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout and "# skipped 0" in done.stdout, done.stdout[-2000:]
