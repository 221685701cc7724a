"""`pmem recall --user-id U [--persona-id P] [QUERY]`: what the store recalls for a user (and
persona), as a table or, with --json, a list of objects."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Sequence

from store.context_recall import hit_record, recall_in_context
from store.factory import open_store
from store.recall import RETRIEVERS
from store.types import RecallHit, Retriever
from worker.commands.errors import run_reporting_database_errors
from worker.settings import Settings, load_settings


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
    parser.add_argument("--limit", type=int, default=20, help="maximum results (default 20)")
    parser.add_argument(
        "--retriever",
        choices=RETRIEVERS,
        default="hybrid",
        help="hybrid (default), or one branch alone: vector or keyword",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.add_argument("--database-url", help="default: PMEM_DATABASE_URL")
    parser.set_defaults(run=run)


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def format_table(hits: Sequence[RecallHit]) -> str:
    """A plain-text table of hits, best first."""
    if not hits:
        return "(no memories)"
    header = f"{'#':>3}  {'score':>7}  {'scope':<12}  {'conf':>4}  {'key':<24}  {'value':<48}  id"
    lines = [header, "-" * len(header)]
    for i, hit in enumerate(hits, start=1):
        m = hit.memory
        lines.append(
            f"{i:>3}  {hit.score:>7.4f}  {m.scope:<12}  {m.confidence:>4.2f}  {_clip(m.key, 24):<24}  "
            f"{_clip(m.value, 48):<48}  {m.id}"
        )
    return "\n".join(lines)


async def recall_hits(
    settings: Settings,
    *,
    user_id: uuid.UUID,
    persona_id: uuid.UUID | None,
    team_id: uuid.UUID | None = None,
    query: str,
    limit: int,
    retriever: Retriever,
) -> list[RecallHit]:
    """Open the configured store and embedder, recall, close both."""
    from extraction.embeddings import build_embedder, close_embedder

    embedder = build_embedder(settings)
    try:
        store = await open_store(
            settings.database_url, embedder, settings_defaults=settings.memory_defaults()
        )
        try:
            return await recall_in_context(
                store,
                user_id=user_id,
                persona_id=persona_id,
                team_id=team_id,
                query=query,
                limit=limit,
                retriever=retriever,
            )
        finally:
            await store.close()
    finally:
        await close_embedder(embedder)


def run(args: argparse.Namespace) -> int:
    """Print the recall for the given user/persona/query."""
    overrides: dict[str, object] = {"database_url": args.database_url} if args.database_url else {}
    settings = load_settings(**overrides)
    if args.limit < 1:
        print("pmem recall: --limit must be at least 1", file=sys.stderr)
        return 2
    hits: list[RecallHit] = []

    def recall() -> int:
        hits.extend(
            asyncio.run(
                recall_hits(
                    settings,
                    user_id=args.user_id,
                    persona_id=args.persona_id,
                    team_id=args.team_id,
                    query=" ".join(args.query),
                    limit=args.limit,
                    retriever=args.retriever,
                )
            )
        )
        return 0

    code = run_reporting_database_errors("recall", recall)
    if code:
        return code
    if args.json:
        print(json.dumps([hit_record(h) for h in hits], indent=2, ensure_ascii=False))
    else:
        print(format_table(hits))
    return 0
