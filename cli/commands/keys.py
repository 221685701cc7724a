"""`pmem keys create|list|revoke`: API keys for services (the chat platform's backend)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from cli.commands.errors import run_reporting_database_errors
from cli.commands.store_session import command_settings, opened_store
from config import Settings


def register(parser: argparse.ArgumentParser) -> None:
    """Add `create`, `list` and `revoke` under `pmem keys`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database-url", help="default: PMEM_DATABASE_URL")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser(
        "create", parents=[common], help="create a key; it is printed once, stored hashed"
    )
    create.add_argument("name", help="what uses the key, e.g. chat-backend")
    actions.add_parser("list", parents=[common], help="list keys (names, prefixes, state; never the key)")
    revoke = actions.add_parser("revoke", parents=[common], help="revoke a key by name or id")
    revoke.add_argument("name", help="the key's name or id")
    parser.set_defaults(run=run)


async def _act(settings: Settings, args: argparse.Namespace) -> int:
    async with opened_store(settings) as store:
        if args.action == "create":
            record, key = await store.api_keys.create_api_key(args.name)
            print(key)
            print(
                f"pmem keys: created {record.name!r} ({record.prefix}…). This is the only time the key is "
                "shown; send it as `Authorization: Bearer <key>`.",
                file=sys.stderr,
            )
            return 0
        if args.action == "list":
            records = await store.api_keys.list_api_keys()
            if not records:
                print("(no API keys; create one with `pmem keys create NAME`)")
            for each in records:
                state = f"revoked {each.revoked_at:%Y-%m-%d %H:%M}" if each.revoked_at else "active"
                print(f"{each.name:<24}  {each.prefix}…  created {each.created_at:%Y-%m-%d %H:%M}  {state}")
            return 0
        if await store.api_keys.revoke_api_key(args.name):
            print(f"pmem keys: revoked {args.name!r}", file=sys.stderr)
            return 0
        print(f"pmem keys: no active key named {args.name!r}; see `pmem keys list`", file=sys.stderr)
        return 1


def run(args: argparse.Namespace) -> int:
    """Run one keys action."""
    settings = command_settings(args.database_url)
    from store.errors import StoreError

    return run_reporting_database_errors(
        "keys", lambda: asyncio.run(_act(settings, args)), usage_errors=(StoreError, ValueError)
    )
