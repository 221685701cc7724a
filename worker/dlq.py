"""Dead letters as `pmem dlq` shows and replays them: one message of the DLQ subject read back from
the output stream (`DlqEntry`, named by its stream sequence), the filters, the summary line, the
JSON form, and what a replay publishes. Pure; the command (`cli/commands/dlq.py`) reads and
writes the stream.

A replay republishes the original body on the events subject with `Nats-Msg-Id: replay:<stream>:<seq>`
(not the event id: inside the event stream's duplicate window JetStream would drop it as the
original's duplicate). The worker then processes it as any event: one that was already processed
is found in `processed_events` and writes nothing."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from worker.events import DLQ_REASON_HEADER, DeadLetter

# the reason as a summary line shows it
SUMMARY_REASON_CHARS = 100


@dataclass(frozen=True, kw_only=True, slots=True)
class DlqEntry:
    """One message of the DLQ subject: its id (stream sequence), size, headers, and the record
    (None when the message is not a readable record: `problem` says why)."""

    seq: int
    size: int
    headers: dict[str, str]
    stored_at: datetime | None
    record: DeadLetter | None
    problem: str | None = None

    @property
    def kind(self) -> str:
        """The bounded reason label (`invalid_schema`, `unknown_persona`, …)."""
        if self.record is not None:
            return self.record.kind
        return self.headers.get("Pmem-Dlq-Label", "unreadable")

    @property
    def reason(self) -> str:
        """Why the event was dead-lettered, for humans."""
        if self.record is not None:
            return self.record.reason
        return self.headers.get(DLQ_REASON_HEADER, self.problem or "")

    @property
    def when(self) -> datetime | None:
        """When the worker gave up on the event (the stream's time when the record is unreadable)."""
        return self.record.failed_at if self.record is not None else self.stored_at

    @property
    def event_ref(self) -> str:
        """The event id, else `sha256:<hash>` of the body, else `-`."""
        record = self.record
        if record is None:
            return "-"
        if record.event_id:
            return record.event_id
        return f"sha256:{record.body_sha256}" if record.body_sha256 else "-"


def parse_entry(
    seq: int, data: bytes, headers: dict[str, str] | None, stored_at: datetime | None = None
) -> DlqEntry:
    """A DLQ message as an entry; never raises (an unreadable record keeps its headers)."""
    try:
        record: DeadLetter | None = DeadLetter.model_validate_json(data)
        problem = None
    except ValidationError as exc:
        record = None
        problem = f"not a dead-letter record ({exc.error_count()} problems)"
    return DlqEntry(
        seq=seq,
        size=len(data),
        headers=dict(headers or {}),
        stored_at=stored_at,
        record=record,
        problem=problem,
    )


def matches_reason(entry: DlqEntry, reason: str | None) -> bool:
    """Whether the entry's label is `reason`, or its reason text contains it (any case);
    everything matches None."""
    if reason is None:
        return True
    wanted = reason.strip().lower()
    return entry.kind.lower() == wanted or wanted in entry.reason.lower()


def older_than(entry: DlqEntry, cutoff: datetime) -> bool:
    """Whether the entry failed before `cutoff` (an entry without a time never is)."""
    when = entry.when
    return when is not None and when < cutoff


def cutoff_for(now: datetime, age_s: float) -> datetime:
    """The moment `age_s` seconds before `now`."""
    return now - timedelta(seconds=age_s)


def human_size(size: int) -> str:
    """Bytes as `812 B`, `14.2 KB`, `1.0 MB`."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def summary_line(entry: DlqEntry) -> str:
    """One line: id, when, label, event, team, size, reason (cut)."""
    when = entry.when.strftime("%Y-%m-%d %H:%M:%S") if entry.when is not None else "-"
    team = entry.record.team_id if entry.record is not None and entry.record.team_id else "-"
    reason = " ".join(entry.reason.split())
    if len(reason) > SUMMARY_REASON_CHARS:
        reason = reason[: SUMMARY_REASON_CHARS - 1] + "…"
    return (
        f"{entry.seq:>6}  {when}  {entry.kind:<22}  {entry.event_ref:<36}  {team:<36}  "
        f"{human_size(entry.size):>8}  {reason}"
    )


SUMMARY_HEADER = (
    f"{'ID':>6}  {'WHEN (UTC)':<19}  {'REASON':<22}  {'EVENT':<36}  {'TEAM':<36}  {'SIZE':>8}  DETAILS"
)


def entry_json(entry: DlqEntry, *, with_body: bool = False) -> dict[str, Any]:
    """The entry as JSON: id, size and the record's fields (the body only `with_body`)."""
    out: dict[str, Any] = {
        "id": entry.seq,
        "size": entry.size,
        "kind": entry.kind,
        "reason": entry.reason,
        "when": entry.when.isoformat() if entry.when is not None else None,
    }
    if entry.record is None:
        out["problem"] = entry.problem
        return out
    record = entry.record.model_dump(mode="json")
    if not with_body:
        record.pop("body_text", None)
        record.pop("body_base64", None)
    return {**out, **record}


def show_text(entry: DlqEntry) -> str:
    """Every field of the entry, then the body (as text when it is UTF-8), for `pmem dlq show`."""
    lines = [f"{key}: {value}" for key, value in entry_json(entry).items() if value is not None]
    record = entry.record
    if record is not None:
        if record.body_text is not None:
            body = record.body_text
            with contextlib.suppress(ValueError, RecursionError):  # JSON indented, other text as is
                body = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
            lines += ["body:", body]
        elif record.body_base64 is not None:
            lines += ["body (base64, not UTF-8):", record.body_base64]
    return "\n".join(lines)


@dataclass(frozen=True, kw_only=True, slots=True)
class Replay:
    """What a replay publishes: the body and its headers, or why the entry cannot be replayed."""

    body: bytes = b""
    headers: dict[str, str] | None = None
    refused: str | None = None


def replay_of(entry: DlqEntry, *, output_stream: str, original: bytes | None = None) -> Replay:
    """What replaying `entry` publishes. A truncated record replays the whole `original` (read
    from the event stream by the caller) when given, else is refused."""
    record = entry.record
    if record is None:
        return Replay(refused=f"dead letter {entry.seq} is not a readable record: {entry.problem}")
    body = record.original_body()
    if record.body_truncated:
        if original is None or len(original) != record.body_size:
            return Replay(
                refused=f"dead letter {entry.seq} keeps only the first {len(body)} of {record.body_size} "
                f"bytes, and the whole event is no longer in stream {record.stream} (sequence "
                f"{record.stream_sequence}); publish it again from its source"
            )
        body = original
    headers = {"Nats-Msg-Id": f"replay:{output_stream}:{entry.seq}", "Content-Type": "application/json"}
    return Replay(body=body, headers=headers)
