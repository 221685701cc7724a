"""`pmem`: the command-line entry point. Each sub-command lives in `cli/commands/<name>.py`,
imported only when that command is chosen: `pmem --help` names the commands from `COMMANDS` alone,
and a command's module keeps its heavy imports (the LLM client, the web framework, the embedding
model) inside the functions that run it.

Configuration and connection errors end the command with one line naming the variable or flag and
the fix (cli/commands/errors.py has the exit codes); `--debug` shows the traceback instead."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from store.team_scope import platform_scope

# (command, module under cli.commands, one-line help)
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("migrate", "migrate", "create or upgrade the database schema (PMEM_DATABASE_URL)"),
    ("worker", "worker", "consume conversation.ended events and extract memories"),
    ("demo", "demo", "run the embedded demo: nats-server + Postgres in a data directory"),
    ("publish", "publish", "publish conversation.ended events from a JSONL file"),
    ("recall", "recall", "recall memories for a user (and persona)"),
    ("review", "review", "list, approve, reject or edit pending memories"),
    ("eval", "evaluate", "evaluate recall quality (LoCoMo)"),
    ("serve", "serve", "serve the control plane: HTTP API and web UI (PMEM_API_PORT)"),
    ("keys", "keys", "create, list or revoke API keys for services"),
    ("token", "token", "mint a JWT with PMEM_AUTH_JWT_SECRET (development, demo)"),
    ("retention", "retention", "reject old pending memories, erase old archived ones"),
    ("reembed", "reembed", "re-embed every memory with the configured embedding model (resumable)"),
    ("regate", "regate", "pass rows stored before the text gate through it (--dry-run: count only)"),
    ("dlq", "dlq", "list, show, replay or purge dead-lettered events"),
)

# the operator's commands work across teams: the platform scope, logged (`store.team_scope`); the
# worker, the server and the demo set each event's or request's own scope
PLATFORM_COMMANDS = frozenset({"recall", "review", "eval", "retention", "reembed", "regate"})

DEBUG_HELP = "show the full traceback of an error instead of the one-line message"
# the exit code of a process ended by SIGPIPE (128 + 13), as a shell reports `cmd | head -1`
EXIT_BROKEN_PIPE = 141


class CommandParser(argparse.ArgumentParser):
    """The parser of one sub-command: its module is imported, and registers its arguments, only
    when the command line chooses it (argparse hands the chosen parser the rest of the line)."""

    def __init__(self, *args: Any, module_name: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._module_name = module_name
        self._registered = False

    def register_arguments(self) -> None:
        """Import the command's module and add its arguments (once)."""
        if self._registered:
            return
        self._registered = True
        module = importlib.import_module(f"cli.commands.{self._module_name}")
        module.register(self)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Register the command's arguments, then parse as usual."""
        self.register_arguments()
        return super().parse_known_args(args, namespace)

    def add_subparsers(self, **kwargs: Any) -> Any:
        """A command's own actions (`pmem review list`) are plain parsers."""
        kwargs.setdefault("parser_class", argparse.ArgumentParser)
        return super().add_subparsers(**kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: the commands by name and help; each one's arguments once it is chosen."""
    parser = argparse.ArgumentParser(
        prog="pmem",
        description="persona-memory: long-term, persona-scoped memory for chat platforms.",
        epilog="exit codes: 0 done, 1 failed, 2 configuration or usage error, 3 database or NATS "
        "unreachable, 141 output closed early (a pipe's reader such as `head` stopped reading)",
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=CommandParser)
    for name, module_name, help_text in COMMANDS:
        command_parser = sub.add_parser(name, help=help_text, description=help_text, module_name=module_name)
        # also after the command (`pmem migrate --debug`); SUPPRESS keeps a leading --debug
        command_parser.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run the chosen command; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        if args.command in PLATFORM_COMMANDS:
            with platform_scope(f"pmem {args.command}"):
                code = args.run(args)
        else:
            code = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        # the reader went away (`pmem review list | head -1`): nothing is wrong, and nothing more
        # can be written; stdout goes to /dev/null so the interpreter's last flush stays quiet
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as exc:
        if args.debug:
            raise
        from cli.commands.errors import EXIT_FAILED, collapse_whitespace, describe, redact, secrets_in

        nats_url = getattr(args, "nats_url", None) or os.environ.get("PMEM_NATS_URL", "nats://localhost:4222")
        report = describe(exc, nats_url=nats_url)
        secrets = secrets_in(os.environ)
        if report is None:
            message = f"{type(exc).__name__}: {exc} (run with --debug for the traceback)"
            print(f"pmem {args.command}: {redact(collapse_whitespace(message), secrets)}", file=sys.stderr)
            return EXIT_FAILED
        print(f"pmem {args.command}: {redact(collapse_whitespace(report.message), secrets)}", file=sys.stderr)
        return report.exit_code
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
