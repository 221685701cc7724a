"""`pmem recall --user-id U [--persona-id P] [--include memories|turns …] [--hint] [QUERY]`: what the
store recalls for a user (and persona): memories by relevance, then the earlier conversations'
turns that add something new, as a table or, with --json, a list of objects (each with its
`kind`); with --hint, the prompt hint for QUERY as the next message."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Sequence

from cli.commands.errors import run_reporting_database_errors
from cli.commands.store_session import command_settings, opened_store
from config import Settings
from store.model import INCLUDE_ALL, RecallItem
from store.rules.recall import RETRIEVERS
from store.rules.turn_recall import parse_include
from store.services.context_recall import (
    DEFAULT_TURN_LIMIT,
    ContextRecall,
    hint_in_context,
    items_in_context,
)
from store.services.json_shapes import recall_item_json


def uuid_arg(value: str) -> uuid.UUID:
    """argparse type: a UUID, with an error that says so."""
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a UUID: {value!r}") from exc


def register(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of `pmem recall`."""
    parser.add_argument("query", nargs="*", help="what to look for (empty: top memories by confidence)")
    parser.add_argument("--user-id", type=uuid_arg, required=True, help="the user (UUID)")
    parser.add_argument("--persona-id", type=uuid_arg, help="the active persona (UUID), if any")
    parser.add_argument(
        "--team-id",
        type=uuid_arg,
        help="the conversation's team (UUID): its memories and team-less ones",
    )
    parser.add_argument("--limit", type=int, default=20, help="how many memories (default 20)")
    parser.add_argument(
        "--turn-limit",
        type=int,
        default=DEFAULT_TURN_LIMIT,
        help=f"how many turns of earlier conversations after them (default {DEFAULT_TURN_LIMIT}; 0: none)",
    )
    parser.add_argument(
        "--hint",
        action="store_true",
        help="print the prompt hint for QUERY as the next message instead (at most --max-tokens)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        help="the hint's size in tokens (default and largest: PMEM_HINT_MAX_TOKENS)",
    )
    parser.add_argument(
        "--retriever",
        choices=RETRIEVERS,
        default="hybrid",
        help="hybrid (default), or one branch alone: vector or keyword",
    )
    parser.add_argument(
        "--include",
        action="append",
        choices=INCLUDE_ALL,
        help="what to recall: memories or turns (of earlier conversations); repeat for both (the default)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.add_argument("--database-url", help="default: PMEM_DATABASE_URL")
    parser.set_defaults(run=run)


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def format_table(items: Sequence[RecallItem]) -> str:
    """A plain-text table of recalled memories and turns, best first."""
    if not items:
        return "(nothing recalled)"
    header = (
        f"{'#':>3}  {'score':>7}  {'kind':<6}  {'scope/who':<12}  {'key/date':<24}  {'value/text':<48}  id"
    )
    lines = [header, "-" * len(header)]
    for i, item in enumerate(items, start=1):
        who: str
        if item.memory is not None:
            m = item.memory
            who, what, text, item_id = m.scope, m.key, m.value, m.id
        elif item.turn is not None:
            t = item.turn
            who, what, text, item_id = t.said_by, t.at.date().isoformat(), t.text, t.id
        else:
            continue
        lines.append(
            f"{i:>3}  {item.score:>7.4f}  {item.kind:<6}  {_clip(who, 12):<12}  {_clip(what, 24):<24}  "
            f"{_clip(text, 48):<48}  {item_id}"
        )
    return "\n".join(lines)


async def recall_items(settings: Settings, asked: ContextRecall) -> list[RecallItem]:
    """Open the configured store and embedder, recall memories and turns, close both."""
    async with opened_store(settings) as store:
        return await items_in_context(store, asked)


async def recall_hint(settings: Settings, asked: ContextRecall, max_tokens: int) -> str:
    """Open the configured store and embedder, build the prompt hint, close both."""
    async with opened_store(settings) as store:
        return await hint_in_context(store, asked, max_tokens=max_tokens)


def run(args: argparse.Namespace) -> int:
    """Print the recall for the given user/persona/query."""
    settings = command_settings(args.database_url)
    if args.limit < 1:
        print("pmem recall: --limit must be at least 1", file=sys.stderr)
        return 2
    if args.turn_limit < 0:
        print("pmem recall: --turn-limit must be 0 or more", file=sys.stderr)
        return 2
    if args.max_tokens is not None and args.max_tokens < 1:
        print("pmem recall: --max-tokens must be at least 1", file=sys.stderr)
        return 2
    asked = ContextRecall(
        user_id=args.user_id,
        persona_id=args.persona_id,
        team_id=args.team_id,
        query=" ".join(args.query),
        limit=args.limit,
        turn_limit=args.turn_limit,
        retriever=args.retriever,
        include=parse_include(args.include),
    )
    items: list[RecallItem] = []
    hint: list[str] = []
    most = settings.hint_max_tokens
    budget = most if args.max_tokens is None else min(args.max_tokens, most)

    def recall() -> int:
        if args.hint:
            hint.append(asyncio.run(recall_hint(settings, asked, budget)))
        else:
            items.extend(asyncio.run(recall_items(settings, asked)))
        return 0

    code = run_reporting_database_errors("recall", recall)
    if code:
        return code
    if args.hint:
        print(hint[0] or "(nothing to hint)")
        return 0
    if args.json:
        print(json.dumps([recall_item_json(item) for item in items], indent=2, ensure_ascii=False))
    else:
        print(format_table(items))
    return 0
