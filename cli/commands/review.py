"""`pmem review …`: the admin review queue. `list` shows pending memories and proposed changes to
active ones; `approve`, `reject`, `edit`, `pin` and `unpin` act on one memory by id and are audited
with --actor."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
import uuid
from typing import TYPE_CHECKING, Any

from cli.commands.errors import run_reporting_database_errors
from cli.commands.recall import uuid_arg
from cli.commands.store_session import command_settings, opened_store
from config import Settings
from store.model import SCOPES, STATUSES, Memory, MemoryFilter, Revision
from store.services.json_shapes import memory_json, revision_json

if TYPE_CHECKING:
    from store.factory import Store


def _default_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def register(parser: argparse.ArgumentParser) -> None:
    """Add `list`, `approve`, `reject`, `edit`, `pin` and `unpin` under `pmem review`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database-url", help="default: PMEM_DATABASE_URL")
    common.add_argument("--actor", default=_default_actor(), help="who is reviewing (audit trail)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="pending memories and proposed changes")
    listing.add_argument(
        "--status",
        choices=(*STATUSES, "all"),
        default="pending_review",
        help="memory status to list (default pending_review; proposed changes are listed with it)",
    )
    listing.add_argument("--owner-id", type=uuid_arg, help="only this owner (user or persona UUID)")
    listing.add_argument("--scope", choices=SCOPES, help="only this scope")
    listing.add_argument("--limit", type=int, default=100, help="maximum memories (default 100)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    for name, help_text in (
        ("approve", "activate a pending memory, or apply its proposed change"),
        ("reject", "archive a pending memory, or discard its proposed change"),
        ("pin", "pin a memory: while active, it is in every hint of its user"),
        ("unpin", "unpin a memory: it is hinted only when relevant"),
    ):
        sub = actions.add_parser(name, parents=[common], help=help_text)
        sub.add_argument("memory_id", type=uuid_arg, metavar="ID")
        if name == "reject":
            sub.add_argument(
                "--forget",
                action="store_true",
                help="also erase what was said that it comes from (the turns its evidence cites)",
            )
    edit = actions.add_parser("edit", parents=[common], help="set a memory's value (re-embedded)")
    edit.add_argument("memory_id", type=uuid_arg, metavar="ID")
    edit.add_argument("value", help="the new value")
    parser.set_defaults(run=run)


def proposed_change_json(revision: Revision, memory: Memory) -> dict[str, Any]:
    """A proposed change as JSON, with the key, scope and owner of the memory it changes."""
    return {
        **revision_json(revision),
        "key": memory.key,
        "scope": memory.scope,
        "owner_id": str(memory.owner_id),
    }


async def _list(store: Store, args: argparse.Namespace) -> dict[str, Any]:
    flt = MemoryFilter(
        scope=args.scope,
        owner_id=args.owner_id,
        status=None if args.status == "all" else args.status,
        limit=args.limit,
    )
    memories = await store.listing.list_memories(flt)
    revisions: list[dict[str, Any]] = []
    if args.status in ("pending_review", "all"):
        for revision in await store.review.pending_revisions():
            memory = await store.listing.get_by_id(revision.memory_id)
            if memory is None or (args.owner_id and memory.owner_id != args.owner_id):
                continue
            if args.scope and memory.scope != args.scope:
                continue
            revisions.append(proposed_change_json(revision, memory))
    return {"memories": [memory_json(m) for m in memories], "proposed_changes": revisions}


def _print_listing(listing: dict[str, Any]) -> None:
    memories, changes = listing["memories"], listing["proposed_changes"]
    print(f"{len(memories)} memories")
    for m in memories:
        owner = m["owner_id"] + (f"/{m['user_id']}" if m["user_id"] else "")
        print(f"  {m['id']}  [{m['status']}] {m['scope']} {owner}  conf {m['confidence']:.2f}")
        print(f"      {m['key']}: {m['value']}")
    if changes:
        print(f"{len(changes)} proposed changes to active memories (approve/reject by memory id)")
        for c in changes:
            print(f"  {c['memory_id']}  {c['scope']} {c['owner_id']}  {c['key']}")
            print(f"      - {c['old_value']}")
            print(f"      + {c['new_value']}")


async def _act(settings: Settings, args: argparse.Namespace) -> int:
    async with opened_store(settings) as store:
        return await _act_on(store, args)


async def _act_on(store: Store, args: argparse.Namespace) -> int:
    if args.action == "list":
        listing = await _list(store, args)
        if args.json:
            print(json.dumps(listing, indent=2, ensure_ascii=False))
        else:
            _print_listing(listing)
        return 0
    memory_id: uuid.UUID = args.memory_id
    before = await store.listing.get_by_id(memory_id)
    if before is None:
        print(f"pmem review {args.action}: no memory with id {memory_id}", file=sys.stderr)
        return 1
    if args.action in ("pin", "unpin"):
        after = await store.pinning.set_pinned(memory_id, args.action == "pin", actor=args.actor)
    elif args.action == "approve":
        after = await store.review.approve(memory_id, actor=args.actor)
    elif args.action == "reject" and args.forget:
        rejection = await store.forgetting.reject_memory(memory_id, actor=args.actor, forget=True)
        after = None if rejection is None else rejection.memory
        if rejection is not None:
            print(f"forgot {rejection.forgotten_turns} conversation turns", file=sys.stderr)
    elif args.action == "reject":
        after = await store.review.reject(memory_id, actor=args.actor)
    else:
        try:
            after = await store.review.edit(memory_id, args.value, actor=args.actor)
        except ValueError as exc:  # an empty value, or one that holds only a secret: the fix named
            print(f"pmem review edit: {exc}", file=sys.stderr)
            return 1
    if after is None:
        print(
            f"pmem review {args.action}: memory {memory_id} is {before.status} with no proposed change; "
            "nothing to do",
            file=sys.stderr,
        )
        return 1
    pinned = " pinned" if after.pinned else ""
    print(f"{args.action}: {after.id} [{after.status}{pinned}] {after.key}: {after.value}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run one review action."""
    settings = command_settings(args.database_url)
    return run_reporting_database_errors(
        "review", lambda: asyncio.run(_act(settings, args)), usage_errors=(ValueError,)
    )
