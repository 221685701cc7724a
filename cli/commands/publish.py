"""`pmem publish FILE.jsonl`: publish conversation.ended events, one JSON object per line.

Each event is validated like the worker does (invalid lines are reported with their line number and
not published, unless --no-validate), published with `Nats-Msg-Id: <event_id>` so JetStream drops
re-publishes inside its duplicate window, and confirmed by a JetStream ack. Exits 1 if any line
was invalid or failed to publish.

NATS refuses a message over the server's `max_payload` (1 MB by default) at publish
(`MaxPayloadError`): such a line fails here and never reaches the worker. Raise it in the
server's configuration (`max_payload: 8MB`, at most 64 MB) when conversations are that large.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import nats

from cli.commands.errors import ServiceUnreachable, UsageError
from config import Settings, load_settings
from worker.events import EventLimits, InvalidEvent, parse_event
from worker.streams import ConfigurationError, ensure_stream

# Publishes in flight at once: JetStream acks are pipelined, one round trip per window.
WINDOW = 256


@dataclass(frozen=True, kw_only=True, slots=True)
class Line:
    """One line of the input: its number, body and event id (if it has one)."""

    number: int
    body: bytes
    event_id: str | None


@dataclass(kw_only=True)
class Tally:
    """Counts for the progress line and the summary."""

    total: int
    published: int = 0
    duplicates: int = 0
    failed: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)

    def line(self) -> str:
        """The one-line progress/summary text."""
        done = self.published + self.duplicates + len(self.failed) + len(self.invalid)
        return (
            f"{done}/{self.total}: {self.published} published, {self.duplicates} duplicates, "
            f"{len(self.invalid)} invalid, {len(self.failed)} failed"
        )


def read_lines(path: Path, limits: EventLimits, *, validate: bool) -> Iterator[Line | str]:
    """Yield each non-blank line as a `Line`, or an error string naming the line number. Pure
    apart from reading the file."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            body = raw.strip()
            if not body:
                continue
            if validate:
                parsed = parse_event(body, limits)
                if isinstance(parsed, InvalidEvent):
                    yield f"line {number}: invalid event ({parsed.kind}): {parsed.reason}"
                    continue
                yield Line(number=number, body=body, event_id=str(parsed.event_id))
            else:
                yield Line(number=number, body=body, event_id=_best_effort_id(body))


def _best_effort_id(body: bytes) -> str | None:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    event_id = document.get("event_id") if isinstance(document, dict) else None
    return event_id if isinstance(event_id, str) else None


async def _report_at_the_end(exc: Exception) -> None:
    """nats-py's default logs every failed attempt with a traceback; the command reports once."""


async def publish_file(
    path: Path, settings: Settings, *, validate: bool = True, progress: TextIO | None = None
) -> Tally:
    """Publish every line of `path` to `settings.subject`; return the tally."""
    items = list(read_lines(path, EventLimits.from_settings(settings), validate=validate))
    tally = Tally(total=len(items))
    tally.invalid.extend(item for item in items if isinstance(item, str))
    lines = [item for item in items if isinstance(item, Line)]
    connection = await nats.connect(
        settings.nats_url, connect_timeout=5, max_reconnect_attempts=3, error_cb=_report_at_the_end
    )
    try:
        await ensure_stream(
            connection.jsm(),
            settings.stream,
            [settings.subject],
            create=settings.create_stream,
            max_age_s=settings.stream_max_age,  # the worker's: no false "retention differs" warning
        )
        js = connection.jetstream()

        async def one(line: Line) -> None:
            headers = {"Nats-Msg-Id": line.event_id} if line.event_id else None
            try:
                ack = await js.publish(settings.subject, line.body, headers=headers, timeout=10)
            except nats.errors.MaxPayloadError:
                tally.failed.append(
                    f"line {line.number}: {len(line.body)} bytes, over the NATS server's max_payload "
                    f"of {connection.max_payload} bytes; raise `max_payload` in its configuration"
                )
                return
            except Exception as exc:
                tally.failed.append(f"line {line.number}: publish failed: {type(exc).__name__}: {exc}")
                return
            if ack.duplicate:
                tally.duplicates += 1
            else:
                tally.published += 1

        # a progress line rewritten in place only on a terminal: in a file or a pipe, the "\r"
        # does not rewrite, and the summary would show again after the last progress line
        live = progress is not None and progress.isatty()
        last_shown = 0.0
        for start in range(0, len(lines), WINDOW):
            await asyncio.gather(*(one(line) for line in lines[start : start + WINDOW]))
            if live and progress is not None and time.monotonic() - last_shown > 0.2:
                progress.write("\r" + tally.line())
                progress.flush()
                last_shown = time.monotonic()
    finally:
        await connection.close()
    if progress is not None:
        progress.write(("\r" if live else "") + tally.line() + "\n")
    return tally


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of `pmem publish`."""
    parser.add_argument("file", type=Path, help="JSONL file, one conversation.ended event per line")
    parser.add_argument("--nats-url", help="NATS server (default: PMEM_NATS_URL)")
    parser.add_argument("--subject", help="subject to publish on (default: PMEM_SUBJECT)")
    parser.add_argument("--stream", help="stream capturing the subject (default: PMEM_STREAM)")
    parser.add_argument(
        "--no-validate",
        action="store_true",
        help="publish lines as they are, even invalid ones (to exercise the worker's DLQ)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Publish the file; exit 1 if any line was invalid or not published."""
    overrides = {
        name: value
        for name, value in (("nats_url", args.nats_url), ("subject", args.subject), ("stream", args.stream))
        if value
    }
    settings = load_settings(**overrides)
    if not args.file.exists():
        raise UsageError(f"{args.file} does not exist; pass the path of a JSONL file of events")
    try:
        tally = asyncio.run(
            publish_file(args.file, settings, validate=not args.no_validate, progress=sys.stderr)
        )
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from exc
    except (OSError, nats.errors.Error) as exc:
        raise ServiceUnreachable(
            f"cannot reach NATS at {settings.nats_url} ({type(exc).__name__}: {exc}); start "
            "nats-server -js or set PMEM_NATS_URL (or --nats-url)"
        ) from exc
    for problem in tally.invalid + tally.failed:
        print(problem, file=sys.stderr)
    return 1 if tally.invalid or tally.failed else 0
