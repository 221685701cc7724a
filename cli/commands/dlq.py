"""`pmem dlq …`: the dead letters on PMEM_DLQ_SUBJECT (kept in PMEM_OUTPUT_STREAM). `list` shows
them (id, when, reason, event, team, size), `show ID` one with its body, `replay ID|--all
[--reason R]` publishes the original events again on PMEM_SUBJECT once their cause is fixed (and
removes the dead letters JetStream stored them from), `purge --older-than 7d` deletes old ones.
The decisions live in `worker.dlq`; this is the shell around the stream."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import nats
import nats.errors
import nats.js.errors

from cli.commands.errors import ServiceUnreachable, UsageError
from config import Settings, load_settings, parse_duration
from worker.dlq import (
    SUMMARY_HEADER,
    DlqEntry,
    cutoff_for,
    entry_json,
    matches_reason,
    older_than,
    parse_entry,
    replay_of,
    show_text,
    summary_line,
)

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient
    from nats.js.manager import JetStreamManager

# every NATS request of the command waits at most this long
REQUEST_TIMEOUT_S = 10.0


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def register(parser: argparse.ArgumentParser) -> None:
    """Add `list`, `show`, `replay` and `purge` under `pmem dlq`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--nats-url", help="NATS server (default: PMEM_NATS_URL)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="the dead letters, oldest first")
    listing.add_argument("--reason", help="only this reason label (e.g. unknown_persona) or words of it")
    listing.add_argument("--json", action="store_true", help="print JSON, one object per dead letter")
    show = actions.add_parser("show", parents=[common], help="one dead letter with its body")
    show.add_argument("id", type=int, metavar="ID", help="the id `pmem dlq list` shows")
    show.add_argument("--json", action="store_true", help="print JSON")
    replay = actions.add_parser(
        "replay", parents=[common], help="publish dead-lettered events again (after fixing the cause)"
    )
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("id", type=int, nargs="?", metavar="ID", help="the id `pmem dlq list` shows")
    which.add_argument("--all", action="store_true", help="every dead letter (see --reason)")
    replay.add_argument("--reason", help="with --all: only this reason label or words of it")
    purge = actions.add_parser("purge", parents=[common], help="delete old dead letters")
    purge.add_argument(
        "--older-than",
        type=_duration,
        required=True,
        metavar="DURATION",
        help="dead letters that failed longer ago than this (90s, 30m, 12h, 7d, 2w)",
    )
    parser.set_defaults(run=run)


async def entries(jsm: JetStreamManager, settings: Settings) -> AsyncIterator[DlqEntry]:
    """Every message on the DLQ subject of the output stream, oldest first."""
    seq = 1
    while True:
        try:
            msg = await jsm.get_msg(settings.output_stream, seq=seq, subject=settings.dlq_subject, next=True)
        except nats.js.errors.NotFoundError:
            return
        if msg.seq is None:
            return
        yield parse_entry(msg.seq, msg.data or b"", msg.headers, msg.time)
        seq = msg.seq + 1


async def entry(jsm: JetStreamManager, settings: Settings, seq: int) -> DlqEntry | None:
    """The dead letter with id `seq`, or None (gone, or another subject's message)."""
    try:
        msg = await jsm.get_msg(settings.output_stream, seq=seq)
    except nats.js.errors.NotFoundError:
        return None
    if msg.subject != settings.dlq_subject:
        return None
    return parse_entry(seq, msg.data or b"", msg.headers, msg.time)


async def _original(jsm: JetStreamManager, found: DlqEntry) -> bytes | None:
    """The whole event of a truncated record, from the event stream while it keeps it."""
    record = found.record
    if record is None or not record.stream or not record.stream_sequence:
        return None
    try:
        msg = await jsm.get_msg(record.stream, seq=record.stream_sequence)
    except nats.js.errors.NotFoundError:
        return None
    return msg.data


async def replay_one(nc: NatsClient, settings: Settings, found: DlqEntry) -> str | None:
    """Publish the dead letter's event on the events subject and delete the dead letter; None when
    done, else why not."""
    jsm = nc.jsm()
    original = await _original(jsm, found) if found.record and found.record.body_truncated else None
    replay = replay_of(found, output_stream=settings.output_stream, original=original)
    if replay.refused is not None:
        return replay.refused
    ack = await nc.jetstream().publish(
        settings.subject, replay.body, headers=replay.headers, timeout=REQUEST_TIMEOUT_S
    )
    # stored (or already stored by an earlier replay of this record): the dead letter is done
    await jsm.delete_msg(settings.output_stream, found.seq)
    print(
        f"replayed {found.seq} (event {found.event_ref}) as {settings.stream} sequence {ack.seq}"
        + (" (already replayed)" if ack.duplicate else "")
    )
    return None


async def _run(settings: Settings, args: argparse.Namespace) -> int:
    nc = await nats.connect(
        settings.nats_url,
        connect_timeout=5,
        max_reconnect_attempts=1,
        allow_reconnect=False,
        error_cb=_quiet,
    )
    try:
        jsm = nc.jsm(timeout=REQUEST_TIMEOUT_S)
        try:
            await jsm.stream_info(settings.output_stream)
        except nats.js.errors.NotFoundError:
            raise UsageError(
                f"JetStream stream {settings.output_stream!r} does not exist: no worker has run with "
                "this PMEM_OUTPUT_STREAM yet (or set it to the stream that keeps the dead letters)"
            ) from None
        return await _act(nc, jsm, settings, args)
    finally:
        await nc.close()


async def _quiet(exc: Exception) -> None:
    """nats-py's default logs every failed attempt with a traceback; the command reports once."""


async def _act(nc: NatsClient, jsm: JetStreamManager, settings: Settings, args: argparse.Namespace) -> int:
    if args.action == "list":
        found = [e async for e in entries(jsm, settings) if matches_reason(e, args.reason)]
        if args.json:
            for each in found:
                print(json.dumps(entry_json(each), ensure_ascii=False))
            return 0
        print(SUMMARY_HEADER)
        for each in found:
            print(summary_line(each))
        print(f"{len(found)} dead letters", file=sys.stderr)
        return 0
    if args.action == "show":
        one = await entry(jsm, settings, args.id)
        if one is None:
            print(f"pmem dlq show: no dead letter with id {args.id}", file=sys.stderr)
            return 1
        print(json.dumps(entry_json(one, with_body=True), indent=2) if args.json else show_text(one))
        return 0
    if args.action == "replay":
        if args.id is not None:
            if args.reason:
                raise UsageError("--reason selects dead letters for --all; an id names one already")
            one = await entry(jsm, settings, args.id)
            if one is None:
                print(f"pmem dlq replay: no dead letter with id {args.id}", file=sys.stderr)
                return 1
            chosen = [one]
        else:
            chosen = [e async for e in entries(jsm, settings) if matches_reason(e, args.reason)]
        refused = 0
        for each in chosen:
            problem = await replay_one(nc, settings, each)
            if problem is not None:
                refused += 1
                print(f"pmem dlq replay: {problem}", file=sys.stderr)
        print(f"{len(chosen) - refused} replayed, {refused} not replayed", file=sys.stderr)
        return 1 if refused else 0
    cutoff = cutoff_for(datetime.now(UTC), args.older_than)
    old = [e async for e in entries(jsm, settings) if older_than(e, cutoff)]
    for each in old:
        await jsm.delete_msg(settings.output_stream, each.seq)
    print(f"purged {len(old)} dead letters that failed before {cutoff:%Y-%m-%d %H:%M:%S} UTC")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run one `pmem dlq` action."""
    overrides: dict[str, object] = {"nats_url": args.nats_url} if args.nats_url else {}
    settings = load_settings(**overrides)
    try:
        return asyncio.run(_run(settings, args))
    except (OSError, nats.errors.NoServersError, nats.errors.TimeoutError) as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        raise ServiceUnreachable(
            f"cannot reach NATS at {settings.nats_url} ({type(exc).__name__}: {exc}); start "
            "nats-server -js or set PMEM_NATS_URL (or --nats-url)"
        ) from exc
