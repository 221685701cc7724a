"""Every row of the troubleshooting table (docs/operations.md): the mistake, run as a user would (a `pmem`
process), gives exactly one line on stderr naming the variable or flag and the fix, the documented
exit code, and never the password or key that was configured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from cli.commands.errors import (
    EXIT_CONFIGURATION,
    EXIT_UNREACHABLE,
    describe,
    describe_validation,
    is_secret,
    redact,
    secrets_in,
)
from config import Settings
from tests.database_role import clean_environment

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "s3cret-pw"
KEY = "sk-test-very-secret"
UNREACHABLE_DB = f"postgresql://pmem:{PASSWORD}@127.0.0.1:1/pmem"
USER = "7a1c0000-0000-4000-8000-000000000000"


def pmem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = clean_environment()
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO,
        env={**base, "PMEM_LLM_API_KEY": KEY, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def single_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    output = result.stdout + result.stderr
    assert PASSWORD not in output and KEY not in output
    return lines[0]


def test_a_bad_pmem_value_names_the_variable_not_the_field() -> None:
    result = pmem("migrate", PMEM_CONCURRENCY="many")
    assert single_line(result) == (
        'pmem migrate: PMEM_CONCURRENCY: expected a whole number, got "many". Fix the value or unset the '
        "variable to use the default (docs/configuration.md)"
    )
    assert result.returncode == EXIT_CONFIGURATION


def test_a_database_url_of_another_kind_is_named_without_its_password() -> None:
    result = pmem("migrate", PMEM_DATABASE_URL=f"mysql://pmem:{PASSWORD}@db/pmem")
    assert single_line(result).startswith(
        "pmem migrate: PMEM_DATABASE_URL: expected a URL starting with postgresql:// or sqlite://, got a "
        "value that is not shown (it holds a secret). Fix the value"
    )
    assert result.returncode == EXIT_CONFIGURATION


@pytest.mark.parametrize(
    "args",
    [
        ["migrate"],
        ["review", "list"],
        ["recall", "--user-id", USER, "coffee"],
        ["eval", "locomo", str(REPO / "tests/eval/locomo_tiny.json"), "--embedding-provider", "hashing"],
    ],
    ids=["migrate", "review", "recall", "eval"],
)
def test_an_unreachable_database_is_one_line_naming_pmem_database_url(args: list[str]) -> None:
    result = pmem(*args, PMEM_DATABASE_URL=UNREACHABLE_DB, PMEM_EMBEDDING_PROVIDER="hashing")
    line = single_line(result)
    assert line.startswith(f"pmem {args[0]}: cannot reach the database (")
    assert line.endswith("check PMEM_DATABASE_URL (or --database-url) and that Postgres is running")
    assert result.returncode == EXIT_UNREACHABLE


def test_an_unreachable_nats_is_one_line_naming_pmem_nats_url() -> None:
    result = pmem(
        "publish", str(REPO / "cli/samples/conversations.jsonl"), PMEM_NATS_URL="nats://127.0.0.1:1"
    )
    line = single_line(result)
    assert line.startswith("pmem publish: cannot reach NATS at nats://127.0.0.1:1 (")
    assert line.endswith("start nats-server -js or set PMEM_NATS_URL (or --nats-url)")
    assert result.returncode == EXIT_UNREACHABLE


def test_a_port_that_is_not_a_number_in_a_url() -> None:
    result = pmem("migrate", PMEM_DATABASE_URL=f"postgresql://pmem:{PASSWORD}@127.0.0.1:5432x/pmem")
    assert single_line(result) == (
        "pmem migrate: a port is not a number (invalid literal for int() with base 10: '5432x'); check "
        "the port in PMEM_DATABASE_URL and PMEM_NATS_URL (host:PORT, digits only)"
    )
    assert result.returncode == EXIT_CONFIGURATION


def test_a_port_variable_that_is_not_a_number() -> None:
    result = pmem("worker", PMEM_HTTP_PORT="94x4")
    assert single_line(result).startswith('pmem worker: PMEM_HTTP_PORT: expected a whole number, got "94x4".')
    assert result.returncode == EXIT_CONFIGURATION


def test_a_missing_api_key_names_the_variables_that_provide_one(tmp_path: Path) -> None:
    result = pmem(
        "recall",
        "--user-id",
        USER,
        "coffee",
        PMEM_LLM_API_KEY="",
        PMEM_EMBEDDING_PROVIDER="openai",
        PMEM_DATABASE_URL=f"sqlite:///{tmp_path / 'm.db'}",
    )
    assert single_line(result) == (
        "pmem recall: the openai embedder needs PMEM_EMBEDDING_API_KEY (or PMEM_LLM_API_KEY / "
        "OPENAI_API_KEY) for api.openai.com, or PMEM_EMBEDDING_BASE_URL for a local server; or set "
        "PMEM_EMBEDDING_PROVIDER=local or hashing"
    )
    assert result.returncode == EXIT_CONFIGURATION


def test_a_missing_optional_extra_names_the_pip_install() -> None:
    missing = ModuleNotFoundError("No module named 'sentence_transformers'", name="sentence_transformers")
    report = describe(missing)
    assert report is not None
    assert report.message == "the Python package 'sentence_transformers' is not installed: " + (
        "pip install 'persona-memory[local]'"
    )
    assert report.exit_code == EXIT_CONFIGURATION


def test_debug_shows_the_traceback() -> None:
    result = pmem("--debug", "migrate", PMEM_DATABASE_URL=UNREACHABLE_DB)
    assert "Traceback (most recent call last)" in result.stderr
    assert result.returncode != 0


def test_secrets_are_masked_wherever_they_appear() -> None:
    environ = {"PMEM_DATABASE_URL": UNREACHABLE_DB, "PMEM_LLM_API_KEY": KEY, "HOME": "/root"}
    text = f"failed {UNREACHABLE_DB} with key {KEY} and host=x password={PASSWORD}"
    masked = redact(text, secrets_in(environ))
    assert PASSWORD not in masked and KEY not in masked
    assert "postgresql://pmem:***@127.0.0.1:1/pmem" in masked


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("PMEM_CONCURRENCY", "many", 'PMEM_CONCURRENCY: expected a whole number, got "many"'),
        ("PMEM_CONCURRENCY", "0", 'PMEM_CONCURRENCY: must be at least 1, got "0"'),
        ("PMEM_READ_MAX_LAG_S", "soon", 'PMEM_READ_MAX_LAG_S: expected a number, got "soon"'),
        ("PMEM_LOG_JSON", "maybe", 'PMEM_LOG_JSON: expected true or false, got "maybe"'),
        (
            "PMEM_EMBEDDING_PROVIDER",
            "remote",
            'PMEM_EMBEDDING_PROVIDER: expected one of: openai, local, hashing, got "remote"',
        ),
        (
            "PMEM_DATABASE_URL",
            "mysql://db/pmem",
            'PMEM_DATABASE_URL: expected a URL starting with postgresql:// or sqlite://, got "mysql://db/pmem"',
        ),
        (
            "PMEM_STREAM_MAX_AGE",
            "a week",
            "PMEM_STREAM_MAX_AGE: expected a duration (seconds, or a number with s, m, h, d or w: 90s, "
            '30m, 12h, 7d), got "a week"',
        ),
        (
            "PMEM_DATABASE_READ_URL",
            "replica-host",
            "PMEM_DATABASE_READ_URL: must be postgresql://… URLs of read replicas, comma-separated, got a "
            "value that is not a URL",
        ),
        (
            "PMEM_AUTH_JWT_SECRET",
            "short-secret",
            "PMEM_AUTH_JWT_SECRET: must be at least 32 bytes",
        ),
    ],
)
def test_a_bad_variable_names_the_kind_of_value_in_plain_words(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    for name in os.environ:
        if name.startswith(("PMEM_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    said = describe_validation(caught.value)
    assert said.startswith(expected), said
    assert "Input should" not in said and "Value error" not in said, said
    assert value not in said or not is_secret(variable, value), said


def test_a_secret_value_is_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PMEM_DATABASE_URL", f"mysql://pmem:{PASSWORD}@db/pmem")
    with pytest.raises(ValidationError) as caught:
        Settings()
    said = describe_validation(caught.value)
    assert PASSWORD not in said and "mysql" not in said, said
    assert said.startswith(
        "PMEM_DATABASE_URL: expected a URL starting with postgresql:// or sqlite://, "
        "got a value that is not shown (it holds a secret)"
    )


@pytest.mark.parametrize(
    ("variable", "value", "secret"),
    [
        ("PMEM_LLM_API_KEY", "sk-1", True),
        ("PMEM_AUTH_JWT_SECRET", "x", True),
        ("PMEM_SOME_TOKEN", "x", True),
        ("PMEM_DATABASE_URL", f"postgresql://pmem:{PASSWORD}@db/pmem", True),
        ("PMEM_DATABASE_URL", f"host=db password={PASSWORD}", True),
        ("PMEM_DATABASE_URL", "postgresql://pmem@db/pmem", False),
        ("PMEM_CONCURRENCY", "many", False),
    ],
)
def test_which_values_are_secret(variable: str, value: str, secret: bool) -> None:
    assert is_secret(variable, value) is secret


def test_a_check_across_variables_is_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PMEM_DATABASE_URL", "sqlite:///m.db")
    monkeypatch.setenv("PMEM_DATABASE_READ_URL", "postgresql://r@replica/db")
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert describe_validation(caught.value).startswith(
        "PMEM_DATABASE_READ_URL names Postgres read replicas, but PMEM_DATABASE_URL is a SQLite file"
    )
