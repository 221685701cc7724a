"""The pure parts of dead letters: what a record carries (event id, body hash, team), how `pmem dlq`
reads, filters, summarises and replays one, and the known-personas rule."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from store.model import MemorySettings
from worker.dlq import (
    cutoff_for,
    entry_json,
    matches_reason,
    older_than,
    parse_entry,
    replay_of,
    show_text,
    summary_line,
)
from worker.events import ConversationEnded, DeadLetter, EventLimits, InvalidEvent, parse_event
from worker.planning import UnknownPersona, decide_failure, unknown_persona

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
TEAM = "7a1f7c9e-9f1b-4c55-8a43-2d7e0f6b1c11"


def body(**changes: Any) -> bytes:
    document: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "type": "conversation.ended",
        "team_id": TEAM,
        "channel_id": str(uuid.uuid4()),
        "user_id": str(uuid.uuid4()),
        "persona_id": str(uuid.uuid4()),
        "messages": [{"role": "user", "content": "I live in Lisbon."}],
        **changes,
    }
    return json.dumps(document).encode()


def record(raw: bytes, *, kind: str = "unknown_persona", max_bytes: int | None = None, **extra: Any) -> bytes:
    return DeadLetter.for_body(
        raw,
        reason=extra.pop("reason", "persona … is not in the directory"),
        kind=kind,
        subject="chat.conversation.ended",
        stream="CHAT",
        stream_sequence=7,
        delivery_count=1,
        failed_at=extra.pop("failed_at", NOW),
        max_bytes=max_bytes,
        **extra,
    ).encode()


def test_an_event_that_is_not_utf8_keeps_its_event_id_and_team() -> None:
    event_id = str(uuid.uuid4())
    raw = body(event_id=event_id).replace(b"Lisbon", b"Lisb\xffn")
    parsed = parse_event(raw, EventLimits())
    assert isinstance(parsed, InvalidEvent) and parsed.kind == "not_utf8"
    assert (parsed.event_id, parsed.team_id) == (event_id, TEAM)


def test_a_record_always_names_its_body_by_hash_and_carries_the_team() -> None:
    raw = b"\xff\xfe not even json"
    entry = parse_entry(3, record(raw, kind="invalid_not_utf8", team_id=TEAM), {})
    assert entry.record is not None and entry.record.event_id is None
    assert entry.record.body_sha256 == hashlib.sha256(raw).hexdigest()
    assert entry.event_ref == f"sha256:{hashlib.sha256(raw).hexdigest()}"
    assert entry.record.team_id == TEAM
    # a truncated record still hashes the whole body
    big = body(messages=[{"role": "user", "content": "x" * 50_000}])
    cut = parse_entry(4, record(big, max_bytes=8_000), {})
    assert cut.record is not None and cut.record.body_truncated
    assert cut.record.body_sha256 == hashlib.sha256(big).hexdigest()


def test_the_summary_line_names_id_when_reason_event_team_and_size() -> None:
    raw = body()
    event_id = json.loads(raw)["event_id"]
    data = record(raw, team_id=TEAM, event_id=event_id, reason="persona x is\nnot known")
    line = summary_line(parse_entry(12, data, {}))
    assert line.split()[:5] == ["12", "2026-12-06", "12:00:00", "unknown_persona", event_id]
    assert TEAM in line and f"{len(data)} B" in line and line.endswith("persona x is not known")
    assert "\n" not in line


def test_an_unreadable_message_is_listed_from_its_headers() -> None:
    entry = parse_entry(5, b"garbage", {"Pmem-Dlq-Label": "invalid_schema", "Pmem-Dlq-Reason": "why"})
    assert (entry.kind, entry.reason, entry.event_ref) == ("invalid_schema", "why", "-")
    assert entry_json(entry)["problem"].startswith("not a dead-letter record")
    assert replay_of(entry, output_stream="PMEM").refused is not None


def test_reason_filters_match_the_label_or_words_of_the_reason() -> None:
    entry = parse_entry(1, record(body(), reason="persona 42 is not in the directory"), {})
    assert matches_reason(entry, None)
    assert matches_reason(entry, "unknown_persona") and matches_reason(entry, "UNKNOWN_PERSONA")
    assert matches_reason(entry, "not in the directory")
    assert not matches_reason(entry, "invalid_schema")


def test_older_than_compares_when_the_event_failed() -> None:
    entry = parse_entry(1, record(body(), failed_at=NOW - timedelta(days=8)), {})
    assert older_than(entry, cutoff_for(NOW, 7 * 86400))
    assert not older_than(entry, cutoff_for(NOW, 9 * 86400))


def test_a_replay_publishes_the_original_body_under_an_id_of_its_own() -> None:
    raw = body()
    replay = replay_of(parse_entry(9, record(raw), {}), output_stream="PMEM")
    assert replay.refused is None and replay.body == raw
    # not the event id: inside the duplicate window JetStream would drop it as the original
    assert replay.headers == {"Nats-Msg-Id": "replay:PMEM:9", "Content-Type": "application/json"}


def test_a_truncated_record_replays_the_whole_original_or_says_why_not() -> None:
    big = body(messages=[{"role": "user", "content": "y" * 50_000}])
    entry = parse_entry(2, record(big, max_bytes=8_000), {})
    refused = replay_of(entry, output_stream="PMEM")
    assert refused.refused is not None and "no longer in stream CHAT (sequence 7)" in refused.refused
    assert replay_of(entry, output_stream="PMEM", original=big[:-1]).refused is not None
    assert replay_of(entry, output_stream="PMEM", original=big).body == big


def test_show_prints_every_field_and_the_body() -> None:
    text = show_text(parse_entry(2, record(body(), team_id=TEAM), {}))
    assert "kind: unknown_persona" in text and f"team_id: {TEAM}" in text
    assert '"content": "I live in Lisbon."' in text
    binary = show_text(parse_entry(2, record(b"\xff\x00"), {}))
    assert "body (base64, not UTF-8):" in binary


def test_known_personas_only_refuses_only_an_unknown_persona_when_on() -> None:
    event = ConversationEnded.model_validate_json(body())
    on, off = MemorySettings(known_personas_only=True), MemorySettings()
    assert unknown_persona(event, off, known=False) is None
    assert unknown_persona(event, on, known=True) is None
    no_persona = event.model_copy(update={"persona_id": None})
    assert unknown_persona(no_persona, on, known=False) is None
    why = unknown_persona(event, on, known=False)
    assert why is not None and str(event.persona_id) in why and TEAM in why
    decision = decide_failure(
        UnknownPersona(why), delivery_count=1, max_deliver=5, retry_delay_s=1, max_retry_delay_s=10
    )
    assert (decision.action, decision.label, decision.reason) == ("dead_letter", "unknown_persona", why)
