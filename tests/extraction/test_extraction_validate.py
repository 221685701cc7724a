"""LLM output contract: parsing, per-item validation, key normalisation, the JSON schema."""

from __future__ import annotations

import json

import pytest

from extraction.types import Candidate
from extraction.validate import (
    MalformedOutputError,
    ValidationLimits,
    merge_candidates,
    normalise_key,
    output_json_schema,
    parse_output,
    validate_items,
)


def item(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "key": "home city",
        "value": "Lives in Lyon",
        "confidence": 0.9,
        "scope": "user",
    }
    base.update(overrides)
    return base


def test_valid_reply_becomes_normalised_candidates_and_extra_fields_are_ignored() -> None:
    content = json.dumps(
        {
            "memories": [
                item(key="  Home_City ", owner_id="someone-else", user_id="x"),
                item(key="Diet  Preference", value="  Is   vegetarian ", confidence=1, scope="persona_user"),
            ],
            "note": "ignored",
        }
    )
    candidates, rejections = parse_output(content, ("user", "persona_user"))
    assert rejections == []
    assert candidates == [
        Candidate(key="home city", value="Lives in Lyon", confidence=0.9, scope="user"),
        Candidate(key="diet preference", value="Is vegetarian", confidence=1.0, scope="persona_user"),
    ]


@pytest.mark.parametrize(
    ("overrides", "reason_part"),
    [
        ({"key": " ".join(["word"] * 200)}, "200 words"),
        ({"key": "diet"}, "1 words"),
        ({"key": "one two three four five six seven"}, "7 words"),
        ({"key": "x" * 81 + " y"}, "longer than 80"),
        ({"key": 42}, "key missing"),
        ({"value": "   "}, "value missing"),
        ({"value": "v" * 501}, "value longer"),
        ({"value": None}, "value missing"),
        ({"confidence": 1.5}, "outside 0–1"),
        ({"confidence": -0.1}, "outside 0–1"),
        ({"confidence": True}, "not a number"),
        ({"confidence": "0.9"}, "not a number"),
        ({"confidence": float("nan")}, "outside 0–1"),
        ({"scope": "persona"}, "not allowed"),
        ({"scope": "admin"}, "unknown scope"),
    ],
)
def test_bad_items_are_rejected_with_a_reason(overrides: dict[str, object], reason_part: str) -> None:
    candidates, rejections = validate_items([item(**overrides), item(key="job title")], ("user",))
    assert [c.key for c in candidates] == ["job title"]
    assert len(rejections) == 1
    assert reason_part in rejections[0].reason


def test_no_persona_means_user_scope_only() -> None:
    candidates, rejections = validate_items(
        [item(scope="user"), item(key="a b", scope="persona_user"), item(key="c d", scope="persona")],
        ("user",),
    )
    assert [c.scope for c in candidates] == ["user"]
    assert len(rejections) == 2


@pytest.mark.parametrize(
    "content",
    [
        None,
        "",
        "   ",
        "not json",
        '{"memories": [',
        "[]",
        '"memories"',
        "{}",
        '{"memories": null}',
        '{"memories": {}}',
    ],
)
def test_malformed_replies_raise(content: str | None) -> None:
    with pytest.raises(MalformedOutputError):
        parse_output(content, ("user",))


def test_code_fenced_json_is_accepted() -> None:
    content = "```json\n" + json.dumps({"memories": [item()]}) + "\n```"
    candidates, _ = parse_output(content, ("user",))
    assert [c.key for c in candidates] == ["home city"]


def test_non_object_items_are_rejections_not_a_malformed_reply() -> None:
    candidates, rejections = parse_output(json.dumps({"memories": ["text", 3, item()]}), ("user",))
    assert len(candidates) == 1
    assert [r.reason for r in rejections] == ["item is not an object", "item is not an object"]


def test_runaway_replies_are_capped() -> None:
    items = [item(key=f"fact number {i}") for i in range(12)]
    candidates, rejections = validate_items(items, ("user",), limits=ValidationLimits(max_items=10))
    assert len(candidates) == 10
    assert len(rejections) == 2


def test_rejected_raw_text_is_redacted_and_bounded() -> None:
    secret = "sk-proj-" + "a1B2c3D4" * 5
    _, rejections = validate_items([item(key=" ".join(["w"] * 50), value=f"key {secret}")], ("user",))
    assert secret not in rejections[0].raw
    assert len(rejections[0].raw) <= 300


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Home City", "home city"),
        ("home_city", "home city"),
        ('"favorite   food".', "favorite food"),
        ("  Job\tTitle\n", "job title"),
        ("e-mail address", "e-mail address"),
    ],
)
def test_normalise_key(raw: str, expected: str) -> None:
    assert normalise_key(raw) == expected


def test_merge_keeps_the_later_value_at_the_first_position() -> None:
    a1 = Candidate(key="home city", value="Lives in Lyon", confidence=0.9, scope="user")
    b = Candidate(key="job title", value="Is a nurse", confidence=0.9, scope="user")
    a2 = Candidate(key="home city", value="Lives in Paris", confidence=0.8, scope="user")
    other_scope = Candidate(key="home city", value="x y", confidence=0.8, scope="persona_user")
    assert merge_candidates([a1, b, a2, other_scope]) == [a2, b, other_scope]


def test_json_schema_is_strict_and_lists_only_allowed_scopes() -> None:
    schema = output_json_schema(("user", "persona_user"))
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["memories"]
    entry = schema["properties"]["memories"]["items"]
    assert entry["additionalProperties"] is False
    assert sorted(entry["required"]) == sorted(entry["properties"])
    assert entry["properties"]["scope"]["enum"] == ["user", "persona_user"]
