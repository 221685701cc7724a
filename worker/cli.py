"""`pmem`: the command-line entry point. Each sub-command lives in `worker/commands/<name>.py`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# (command, module under worker.commands, one-line help)
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
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser; sub-commands register their own arguments."""
    parser = argparse.ArgumentParser(
        prog="pmem", description="persona-memory: long-term, persona-scoped memory for chat platforms."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name, help_text in COMMANDS:
        try:
            module = importlib.import_module(f"worker.commands.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"worker.commands.{module_name}":
                raise
            continue
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.register(command_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run the chosen command; returns the process exit code."""
    args = build_parser().parse_args(argv)
    code = args.run(args)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
