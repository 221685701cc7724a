"""parse_event: the contract, the limits, and a fuzz test that it never raises."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.events import (
    ConversationEnded,
    DeadLetter,
    EventLimits,
    InvalidEvent,
    MemoryExtracted,
    event_fingerprint,
    parse_event,
)
from worker.pipeline import reused_event_id

LIMITS = EventLimits(max_messages=5, max_message_chars=100, max_total_chars=250)


def event(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "type": "conversation.ended",
        "occurred_at": "2026-11-29T19:00:00Z",
        "team_id": str(uuid.uuid4()),
        "channel_id": str(uuid.uuid4()),
        "user_id": str(uuid.uuid4()),
        "persona_id": None,
        "messages": [
            {"role": "user", "content": "I am vegetarian", "at": "2026-11-29T18:59:00Z"},
            {"role": "assistant", "content": "Noted."},
        ],
    }
    base.update(changes)
    return base


def encode(document: object) -> bytes:
    return json.dumps(document).encode()


def test_valid_event_parses_with_and_without_persona() -> None:
    doc = event()
    parsed = parse_event(encode(doc), LIMITS)
    assert isinstance(parsed, ConversationEnded)
    assert str(parsed.event_id) == doc["event_id"]
    assert parsed.persona_id is None
    assert [m.role for m in parsed.messages] == ["user", "assistant"]

    persona = str(uuid.uuid4())
    with_persona = parse_event(encode(event(persona_id=persona, extra_field="ignored")), LIMITS)
    assert isinstance(with_persona, ConversationEnded)
    assert str(with_persona.persona_id) == persona


@pytest.mark.parametrize(
    ("body", "kind", "fragment"),
    [
        (b"not json at all", "not_json", "not JSON"),
        (b"\xff\xfe", "not_utf8", "UTF-8"),
        (b"[1, 2]", "schema", "event: expected a JSON object, got an array"),
        (encode({k: v for k, v in event().items() if k != "user_id"}), "schema", "user_id: required"),
        (encode(event(channel_id="general")), "schema", "channel_id: expected a UUID string"),
        (encode(event(user_id=42)), "schema", "user_id: expected a UUID string, got an integer"),
        (encode(event(type="conversation.started")), "schema", "type: expected one of 'conversation.ended'"),
        (encode(event(messages=[])), "schema", "messages: must not be an empty array"),
        (encode(event(messages="hello")), "schema", "messages: expected an array, got a string"),
        (
            encode(event(messages=[{"role": "robot", "content": "x"}])),
            "schema",
            "messages[0].role: expected one of",
        ),
        (
            encode(event(messages=[{"role": "user", "content": 5}])),
            "schema",
            "messages[0].content: expected a string, got an integer",
        ),
        (encode(event(messages=[{"role": "user", "content": "   "}])), "empty", "blank"),
        (encode(event(messages=[{"role": "user", "content": "a\u0000b"}])), "schema", "NUL"),
        (
            encode(event(messages=[{"role": "user", "content": "x" * 101}])),
            "oversized",
            "PMEM_MAX_MESSAGE_CHARS",
        ),
        (encode(event(messages=[{"role": "user", "content": "x"}] * 6)), "oversized", "PMEM_MAX_MESSAGES"),
        (
            encode(event(messages=[{"role": "user", "content": "x" * 90}] * 3)),
            "oversized",
            "PMEM_MAX_TOTAL_CHARS",
        ),
        (b"{" + b" " * 10_000_000 + b"}", "oversized", "bytes"),
    ],
)
def test_invalid_events_say_why(body: bytes, kind: str, fragment: str) -> None:
    parsed = parse_event(body, LIMITS)
    assert isinstance(parsed, InvalidEvent)
    assert parsed.kind == kind
    assert fragment in parsed.reason
    # the caller's words: JSON types, never Python's
    assert not any(
        word in parsed.reason for word in ("tuple", "Input should", "dict", "NoneType", "be a valid")
    )


def test_unpaired_surrogate_is_rejected() -> None:
    body = b'{"x": 1}'.replace(b'{"x": 1}', encode(event()).replace(b"I am vegetarian", b"\\ud800"))
    parsed = parse_event(body, LIMITS)
    assert isinstance(parsed, InvalidEvent)
    assert "surrogate" in parsed.reason


def test_invalid_event_keeps_the_event_id_for_the_dlq() -> None:
    doc = event(messages=[])
    parsed = parse_event(encode(doc), LIMITS)
    assert isinstance(parsed, InvalidEvent)
    assert parsed.event_id == doc["event_id"]


def test_deeply_nested_json_does_not_raise() -> None:
    parsed = parse_event(b"[" * 50_000 + b"]" * 50_000, EventLimits())
    assert isinstance(parsed, InvalidEvent)


# -- fuzz -----------------------------------------------------------------------------------------

json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
json_value = st.recursive(
    json_leaf,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
uuid_text = st.uuids().map(str)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system", "tool", "bot"]),
        "content": st.text(max_size=120),
    },
    optional={"at": st.sampled_from(["2026-11-29T18:59:00Z", "yesterday", 5])},
)
# Mostly well-formed events with one field at a time replaced by anything, so the validator's
# branches are exercised and not only "not JSON".
near_valid = st.fixed_dictionaries(
    {
        "event_id": uuid_text | json_value,
        "type": st.just("conversation.ended") | st.text(max_size=20),
        "channel_id": uuid_text | json_value,
        "user_id": uuid_text,
        "messages": st.lists(message, max_size=7) | json_value,
    },
    optional={"persona_id": st.none() | uuid_text | json_value, "team_id": uuid_text | st.integers()},
)


def check_total(body: bytes) -> None:
    parsed = parse_event(body, LIMITS)
    assert isinstance(parsed, ConversationEnded | InvalidEvent)
    if isinstance(parsed, ConversationEnded):
        # only valid events come out as models: re-check the contract independently
        document = json.loads(body)
        assert document["type"] == "conversation.ended"
        assert uuid.UUID(document["event_id"]) == parsed.event_id
        assert uuid.UUID(document["user_id"]) == parsed.user_id
        assert 1 <= len(parsed.messages) <= LIMITS.max_messages
        assert all(len(m.content) <= LIMITS.max_message_chars for m in parsed.messages)
        assert sum(len(m.content) for m in parsed.messages) <= LIMITS.max_total_chars
        assert any(m.content.strip() for m in parsed.messages)
    else:
        assert parsed.reason


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_valid)
def test_fuzz_near_valid_events(document: dict[str, Any]) -> None:
    check_total(json.dumps(document).encode())


@settings(max_examples=300, deadline=None)
@given(json_value)
def test_fuzz_any_json(document: object) -> None:
    check_total(json.dumps(document).encode())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_any_bytes(body: bytes) -> None:
    check_total(body)


# -- outgoing payloads ----------------------------------------------------------------------------


def test_dead_letter_keeps_the_body_byte_exact() -> None:
    now = datetime.now(UTC)
    text = DeadLetter.for_body(
        b'{"a": 1}', reason="r", kind="k", subject="s", delivery_count=1, failed_at=now
    )
    assert text.body_text == '{"a": 1}' and text.body_base64 is None
    binary = DeadLetter.for_body(
        b"\xff\x00", reason="r", kind="k", subject="s", delivery_count=3, failed_at=now
    )
    assert binary.body_text is None
    assert binary.body_base64 == base64.b64encode(b"\xff\x00").decode()
    restored = DeadLetter.model_validate_json(binary.model_dump_json())
    assert restored.original_body() == b"\xff\x00"


def test_memory_extracted_round_trips() -> None:
    ids = [uuid.uuid4() for _ in range(4)]
    payload = MemoryExtracted.model_validate(
        {
            "event_id": ids[0],
            "channel_id": ids[1],
            "user_id": ids[2],
            "persona_id": None,
            "memories": [{"id": ids[3], "action": "created", "scope": "user", "key": "diet"}],
        }
    )
    assert MemoryExtracted.model_validate_json(payload.model_dump_json()) == payload


@pytest.mark.parametrize(
    "body",
    [
        b"x" * 1_200_000,
        b'"' * 600_000,  # every byte doubles when escaped in JSON
        b"\x01" * 400_000,  # every byte becomes \u0001
        "é".encode() * 500_000,  # a prefix may end inside a two-byte character
        b"\xff" * 900_000,  # binary: base64 grows it by a third
    ],
)
def test_dead_letter_record_fits_the_limit_and_says_it_was_cut(body: bytes) -> None:
    limit = 1_000_000
    record = DeadLetter.for_body(
        body,
        reason="r" * 10_000,
        kind="invalid_oversized",
        subject="s",
        stream="CHAT",
        stream_sequence=42,
        delivery_count=1,
        failed_at=datetime.now(UTC),
        max_bytes=limit,
    )
    assert len(record.encode()) <= limit
    assert record.body_truncated and record.body_size == len(body)
    assert record.stream_sequence == 42 and record.stream == "CHAT"
    assert len(record.reason) <= 2000
    prefix = record.original_body()
    assert len(prefix) > limit // 8  # cut to fit, not emptied
    assert body.startswith(prefix)


def test_dead_letter_record_under_the_limit_is_whole() -> None:
    body = b'{"event_id": "x"}'
    record = DeadLetter.for_body(
        body,
        reason="r",
        kind="k",
        subject="s",
        delivery_count=1,
        failed_at=datetime.now(UTC),
        max_bytes=10_000,
    )
    assert not record.body_truncated and record.body_size == len(body)
    assert record.original_body() == body


def test_the_fingerprint_is_the_content_not_the_spelling() -> None:
    document = event()
    spelled_otherwise = json.dumps(dict(reversed(list(document.items()))), indent=2).encode()
    first, second = parse_event(encode(document), LIMITS), parse_event(spelled_otherwise, LIMITS)
    assert isinstance(first, ConversationEnded) and isinstance(second, ConversationEnded)
    assert event_fingerprint(first) == event_fingerprint(second)
    changed = parse_event(encode({**document, "messages": document["messages"][:1]}), LIMITS)
    assert isinstance(changed, ConversationEnded)
    assert event_fingerprint(changed) != event_fingerprint(first)


def test_a_reused_event_id_is_told_from_a_true_duplicate() -> None:
    parsed = parse_event(encode(event()), LIMITS)
    assert isinstance(parsed, ConversationEnded)
    ours = event_fingerprint(parsed)
    assert reused_event_id(parsed, ours, ours) is None
    assert reused_event_id(parsed, ours, None) is None  # written before hashes were kept
    said = reused_event_id(parsed, ours, "a" * 64)
    assert said is not None and str(parsed.event_id) in said and "a" * 16 in said and ours[:16] in said
