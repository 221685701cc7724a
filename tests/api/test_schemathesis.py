"""The OpenAPI document and the server agree: Schemathesis (coverage, fuzzing and stateful phases,
every check) against a real `pmem serve` on a throwaway database, as an admin and as a service,
finds nothing. Bounded: a few examples per operation, a fixed seed, a time limit on the whole run."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from api.auth import mint_jwt
from tests.api.conftest import SECRET
from tests.api.serve_harness import Served, served_process

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
# generated requests per operation and phase: a bounded run in CI (a few hundred requests a caller)
MAX_EXAMPLES = 15
RUN_TIMEOUT_S = 240

# What a schema cannot say, told to Schemathesis:
# - `cursor` is opaque: only a `next_cursor` the server issued continues a list (any other text is
#   refused, 422), so the run pages from the start;
# - a tool call runs the model's arguments through the tool, which may refuse them (422, "the
#   tool's error", documented): the arguments' shape depends on the tool named;
# - a display name needs a letter, digit or emoji of any script (422 otherwise, documented): no
#   pattern says so alike in the document's regular expressions and the server's.
CONFIG = """
[parameters]
"query.cursor" = ""

[[operations]]
include-path = "/v1/tools/call"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]

[[operations]]
include-path-regex = "^/v1/directory/"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]
"""


@pytest.fixture(scope="module")
def served(new_database: Callable[[], str]) -> Iterator[Served]:
    """A server of its own: the run changes settings, names and erases at random."""
    yield from served_process(new_database)


def schemathesis_run(served: Served, credential: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    config = workdir / "schemathesis.toml"
    config.write_text(CONFIG)
    command = [
        str(SCHEMATHESIS),
        "--config-file",
        str(config),
        "run",
        f"{served.base}/openapi.json",
        "--header",
        f"Authorization: Bearer {credential}",
        "--phases",
        "coverage,fuzzing,stateful",
        "--checks",
        "all",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        "1",
        "--workers",
        "1",
        "--generation-database",
        "none",
        "--request-timeout",
        "10",
        "--no-color",
    ]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False, cwd=workdir
    )


@pytest.mark.slow
@pytest.mark.parametrize("caller", ["admin", "service"])
def test_schemathesis_finds_nothing(caller: str, served: Served, tmp_path: Path) -> None:
    credential = (
        mint_jwt(secret=SECRET, subject=uuid.uuid4(), role="admin")
        if caller == "admin"
        else served.service_key
    )
    run = schemathesis_run(served, credential, tmp_path)
    summary = run.stdout[run.stdout.find("SUMMARY") :]
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    # every generated request passed (a run that generated nothing would not say so)
    assert re.search(r"(\d+) generated, \1 passed", summary), summary
