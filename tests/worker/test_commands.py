"""The worker's CLI commands as a user runs them: `pmem demo`, `pmem publish`, `pmem worker --help`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from cli.commands.publish import publish_file, read_lines
from cli.main import main
from tests.database_role import clean_environment
from tests.worker.worker_harness import Harness, conversation
from worker.events import EventLimits

REPO = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any PMEM_*/OPENAI_* configuration (offline demo), plus `extra`."""
    env = clean_environment()
    return {**env, **extra}


@pytest.mark.slow
def test_demo_runs_offline_and_exits_zero(server_dir: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "demo", "--data-dir", str(server_dir / "demo")],
        cwd=REPO,
        env=clean_env(PMEM_EMBEDDING_PROVIDER="hashing"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "extractor    rules" in out
    assert "processed all 6" in out
    assert "Name is Alice Martin" in out and "[persona_user] Chef × Alice Martin" in out
    assert "[persona] Chef" in out  # the scripted offline persona learner
    assert "demo --keep-running --data-dir" in out  # how to integrate against it, as pasted
    recall = out.split("recall for Alice Martin", 1)[1].split("prompt hint", 1)[0]
    assert "[persona_user]" in recall or "[user]" in recall
    assert "Bob" not in recall and "Carla" not in recall and "pork" not in recall  # other users' memories
    assert "hunter2" not in out and "sk-proj" not in out


async def test_publish_reports_invalid_lines_and_dedups(harness: Harness, tmp_path: Path) -> None:
    h = harness
    good = conversation("I live in Rome.", "Ok.")
    lines = [json.dumps(good), "", "{not json", json.dumps(conversation()), json.dumps(good)]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    settings = h.settings()
    tally = await publish_file(path, settings)
    assert tally.published == 1 and tally.duplicates == 1  # same event id twice: Nats-Msg-Id dedup
    assert [problem.split(":")[0] for problem in tally.invalid] == ["line 3", "line 4"]
    message = await h.nc.jsm().get_last_msg(settings.stream, settings.subject)
    assert message.headers is not None and message.headers["Nats-Msg-Id"] == good["event_id"]
    # --no-validate publishes everything (to exercise the DLQ); lines without an id get no Nats-Msg-Id
    raw = await publish_file(path, settings, validate=False)
    assert raw.invalid == [] and raw.published == 2 and raw.duplicates == 2


def test_publish_command_exit_codes(harness: Harness, tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(conversation("I'm from Quito.", "Ok.", event_id=uuid.uuid4())) + "\n")
    flags = ["--nats-url", harness.base["nats_url"], "--subject", harness.base["subject"]]
    flags += ["--stream", harness.base["stream"]]
    assert main(["publish", str(path), *flags]) == 0
    path.write_text("not json\n")
    assert main(["publish", str(path), *flags]) == 1
    assert main(["publish", str(tmp_path / "missing.jsonl"), *flags]) == 2


@pytest.mark.parametrize("command", ["worker", "publish", "demo"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: pmem " + command in capsys.readouterr().out


async def test_publish_prints_its_summary_once_where_nothing_rewrites_a_line(
    harness: Harness, tmp_path: Path
) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(conversation("I live in Rome.")) for _ in range(3)) + "\n")
    progress = io.StringIO()  # a file or a pipe, not a terminal
    tally = await publish_file(path, harness.settings(), progress=progress)
    assert progress.getvalue() == tally.line() + "\n"
    assert tally.line().startswith("3/3: 3 published")


def test_a_timestamp_that_does_not_parse_is_shown_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    event = conversation("I live in Rome.")
    event["occurred_at"] = "last tuesday"
    path.write_text(json.dumps(event) + "\n")
    (problem,) = list(read_lines(path, EventLimits(), validate=True))
    assert isinstance(problem, str)
    assert "occurred_at: expected an ISO 8601 date-time string" in problem
    assert problem.endswith('got "last tuesday"')


def test_a_closed_pipe_ends_a_listing_quietly(tmp_path: Path) -> None:
    # `pmem review list | head -1`: the reader is gone before the listing is written
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "cli.main", "review", "list", "--json"],
            cwd=REPO,
            env=clean_env(
                PMEM_DATABASE_URL=f"sqlite:///{tmp_path}/pmem.db", PMEM_EMBEDDING_PROVIDER="hashing"
            ),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert result.stderr == ""
    assert result.returncode == 141


def test_logging_keeps_alembics_plugin_set_up_out_of_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from alembic.runtime.plugins import Plugin

    from worker.logs import configure_logging

    configure_logging("INFO", json_format=True)
    plugin = Plugin(f"pmem.test.{uuid.uuid4().hex}")
    plugin.remove()
    logging.getLogger("pmem.worker").info("consuming")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["message"] for line in lines] == ["consuming"]
