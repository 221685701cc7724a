"""LLM output contract: parsing, per-item validation, key normalisation, the JSON schema."""

from __future__ import annotations

import json

import pytest

from extraction.types import Candidate
from extraction.validate import (
    MalformedOutputError,
    ValidationLimits,
    bound_schema,
    contract_schema,
    merge_candidates,
    normalize_key,
    output_json_schema,
    parse_output,
    reply_chars,
    reply_tokens,
    validate_items,
    without_string_lengths,
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
    ("overrides", "code", "reason_part"),
    [
        ({"key": " ".join(["word"] * 200)}, "key_too_many_words", "200 words"),
        ({"key": "one two three four five six seven"}, "key_too_many_words", "7 words"),
        ({"key": "x" * 81}, "key_too_long", "longer than 80"),
        ({"key": 42}, "key_missing", "key missing"),
        ({"key": " _ . "}, "key_empty", "key is empty"),
        ({"key": "\x00"}, "key_empty", "key is empty"),
        ({"value": "   "}, "value_empty", "value missing"),
        ({"value": "\x00\ud800"}, "value_empty", "value missing"),
        ({"value": "v" * 501}, "value_too_long", "value longer"),
        ({"value": None}, "value_empty", "value missing"),
        ({"confidence": 1.5}, "confidence_invalid", "outside 0–1"),
        ({"confidence": -0.1}, "confidence_invalid", "outside 0–1"),
        ({"confidence": True}, "confidence_invalid", "not a number"),
        ({"confidence": "0.9"}, "confidence_invalid", "not a number"),
        ({"confidence": float("nan")}, "confidence_invalid", "outside 0–1"),
        ({"scope": "persona"}, "scope_not_allowed", "not allowed"),
        ({"scope": "admin"}, "scope_unknown", "unknown scope"),
    ],
)
def test_bad_items_are_rejected_with_a_code_and_a_reason(
    overrides: dict[str, object], code: str, reason_part: str
) -> None:
    candidates, rejections = validate_items([item(**overrides), item(key="job title")], ("user",))
    assert [c.key for c in candidates] == ["job title"]
    assert len(rejections) == 1
    assert rejections[0].code == code
    assert reason_part in rejections[0].reason


@pytest.mark.parametrize("key", ["diet", "Hometown", "pet", "editor", "EDITOR."])
def test_one_word_keys_are_valid(key: str) -> None:
    candidates, rejections = validate_items([item(key=key, value="Is vegetarian")], ("user",))
    assert rejections == []
    assert [c.key for c in candidates] == [key.lower().strip(".")]


def test_nul_and_lone_surrogates_are_removed_from_keys_and_values() -> None:
    content = '{"memories": [{"key": "fav\\u0000 tea", "value": "Likes\\u0000 green \\ud800tea",'
    content += ' "confidence": 0.9, "scope": "user"}]}'
    candidates, rejections = parse_output(content, ("user",))
    assert rejections == []
    assert candidates == [Candidate(key="fav tea", value="Likes green tea", confidence=0.9, scope="user")]
    assert "\x00" not in candidates[0].value and "\ud800" not in candidates[0].value


def test_rejected_raw_text_carries_no_nul() -> None:
    _, rejections = validate_items([item(key="a " * 10, value="x\x00y")], ("user",))
    assert rejections[0].code == "key_too_many_words"
    assert "\x00" not in rejections[0].raw


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
def test_normalize_key(raw: str, expected: str) -> None:
    assert normalize_key(raw) == expected


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


def test_the_schema_bounds_every_string_array_and_integer_by_the_validation_limits() -> None:
    limits = ValidationLimits(max_key_chars=40, max_value_chars=120, max_items=7)
    schema = output_json_schema(("user",), limits)
    memories = schema["properties"]["memories"]
    entry = memories["items"]["properties"]
    assert memories["maxItems"] == 7
    assert entry["key"]["maxLength"] == 40 and entry["value"]["maxLength"] == 120
    assert (entry["confidence"]["minimum"], entry["confidence"]["maximum"]) == (0, 1)
    assert "maxLength" not in entry["scope"]  # an enum is bounded by its values


def test_an_array_or_integer_added_to_the_contract_gets_a_bound_without_naming_it() -> None:
    limits = ValidationLimits(max_list_items=5, max_integer=300)
    contract = contract_schema(("user",))
    item = contract["properties"]["memories"]["items"]
    item["properties"]["pages"] = {"type": "array", "items": {"type": "integer", "minimum": 1}}
    bounded = bound_schema(contract, limits)
    properties = bounded["properties"]["memories"]["items"]["properties"]
    assert properties["pages"]["maxItems"] == 5
    assert properties["pages"]["items"] == {"type": "integer", "minimum": 1, "maximum": 300}
    assert "maxItems" not in item["properties"]["pages"]  # the input is not modified
    # the contract's own evidence array is bounded by its own limit
    assert properties["evidence"]["maxItems"] == limits.max_evidence


def test_reply_chars_is_the_longest_reply_the_bounded_schema_allows() -> None:
    limits = ValidationLimits(max_key_chars=3, max_value_chars=4, max_items=2)
    schema = output_json_schema(("user",), limits)
    longest = {
        "memories": [
            {
                "key": "k" * 3,
                "value": "v" * 4,
                "confidence": -1.2345678901234567e-100,
                "scope": "user",
                "evidence": [limits.max_integer] * limits.max_evidence,
            }
        ]
        * 2
    }
    assert reply_chars(schema) == len(json.dumps(longest, separators=(",", ":")))


def test_the_array_bound_is_lowered_until_a_complete_reply_fits_the_output_budget() -> None:
    for budget in (300, 1024, 4096):
        schema = output_json_schema(("user", "persona_user"), max_reply_tokens=budget)
        assert reply_tokens(schema) <= budget
        one_more = dict(schema)
        memories = schema["properties"]["memories"]
        one_more["properties"] = {"memories": {**memories, "maxItems": memories["maxItems"] + 1}}
        assert reply_tokens(one_more) > budget
    tiny = output_json_schema(("user",), max_reply_tokens=10)
    assert tiny["properties"]["memories"]["maxItems"] == 1  # never zero: a reply can hold one fact


def test_without_string_lengths_keeps_every_other_bound() -> None:
    schema = without_string_lengths(output_json_schema(("user",)))
    entry = schema["properties"]["memories"]["items"]["properties"]
    assert "maxLength" not in entry["key"] and "maxLength" not in entry["value"]
    assert schema["properties"]["memories"]["maxItems"] == 100
    assert entry["confidence"]["maximum"] == 1
