"""`pmem --help` and `pmem COMMAND --help` stay quick: they import none of the heavy libraries (the
LLM client, the web framework, the NATS framework, the embedding model). Each command line runs in
a fresh interpreter, so what one command imported cannot hide what another does."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import COMMANDS, CommandParser, build_parser

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("openai", "fastapi", "faststream", "torch", "sentence_transformers")

PROBE = """
import contextlib, io, json, sys
from cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as shown:
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
heavy = [name for name in {heavy!r} if name in sys.modules]
print(json.dumps({{"heavy": heavy, "help": shown.getvalue()}}))
"""


def command_lines() -> list[list[str]]:
    """Every command, and every action of a command that has actions (`review list`), to `--help`."""
    lines: list[list[str]] = [[]]
    parser = build_parser()
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        assert isinstance(action, argparse._SubParsersAction)
        for name, command_parser in action.choices.items():
            lines.append([name])
            assert isinstance(command_parser, CommandParser)
            command_parser.register_arguments()
            for inner in command_parser._actions:
                if isinstance(inner, argparse._SubParsersAction):
                    lines.extend([name, sub_name] for sub_name in inner.choices)
    return lines


def help_of(command: list[str]) -> dict[str, object]:
    """What `pmem COMMAND --help` printed, and which heavy libraries it loaded, in a fresh process."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *command, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    shown: dict[str, object] = json.loads(result.stdout)
    return shown


def test_every_command_is_probed() -> None:
    lines = command_lines()
    assert {line[0] for line in lines[1:]} == {name for name, _, _ in COMMANDS}
    assert ["review", "list"] in lines and ["keys", "create"] in lines and ["eval", "locomo"] in lines


@pytest.mark.parametrize("command", command_lines(), ids=lambda line: " ".join(line) or "pmem")
def test_help_imports_no_heavy_library(command: list[str]) -> None:
    shown = help_of(command)
    assert shown["heavy"] == [], f"`pmem {' '.join(command)} --help` imported {shown['heavy']}"
    assert "usage: pmem" in str(shown["help"])
