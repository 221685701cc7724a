"""The one gate for text (`store.rules.admission`, pure): invisible characters removed and secrets
redacted in one pass, what was removed reported, admitted text admitted again unchanged, and the
rule for text without content."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings

from store.model import NewTurn
from store.rules.admission import admit, admit_memory, admit_turns, has_content, refusal
from store.rules.keys import is_invisible
from tests.factories import HOSTILE_TEXT, INVISIBLE_SAMPLES, SECRET_SAMPLES, leaks, user_fact

API_KEY = "sk-proj1234567890abcdefABCDEF"


def test_invisible_characters_go_and_secrets_are_redacted_in_one_pass() -> None:
    admitted = admit(f"my key\u200b is {API_KEY}\u202e and I live in Lis\U000e0041bon")
    assert admitted.text == "my key is [REDACTED:api_key] and I live in Lisbon"
    assert admitted.secrets == ("api_key",)
    assert admitted.invisible == 3 and admitted.removed


def test_an_invisible_character_inside_a_secret_does_not_hide_it() -> None:
    smuggled = "sk-proj1234\u200b567890abcdef\u2066ABCDEF"
    assert admit(f"key {smuggled}").text == "key [REDACTED:api_key]"


def test_plain_text_passes_unchanged_and_reports_nothing() -> None:
    text = "Café 東京 مرحبا 👍 naïve — “quoted”\ttab\nline"
    admitted = admit(text)
    assert admitted.text == text and admitted.secrets == () and admitted.invisible == 0
    assert not admitted.removed


def test_one_line_folds_whitespace_and_trims() -> None:
    assert admit("  two\n\nlines\u2028and\u00a0spaces \u200b ", one_line=True).text == "two lines and spaces"
    assert admit("  two\n\nlines  ").text == "  two\n\nlines  "


@settings(max_examples=25, deadline=None)
@given(text=HOSTILE_TEXT)
def test_admitted_text_holds_no_secret_and_no_invisible_character_and_is_admitted_unchanged(
    text: str,
) -> None:
    for one_line in (False, True):
        admitted = admit(text, one_line=one_line)
        assert leaks(admitted.text) == []
        assert admit(admitted.text, one_line=one_line).text == admitted.text


def test_the_samples_are_what_the_gate_catches() -> None:
    for secret in SECRET_SAMPLES:
        assert admit(f"here: {secret} ok").secrets, secret
    assert all(is_invisible(char) for sample in INVISIBLE_SAMPLES for char in sample)


@pytest.mark.parametrize("text", ["ok", "thanks", "5", "👍", "東京", "Ja.", "[REDACTED:jwt] is mine"])
def test_a_word_a_number_or_an_emoji_is_content(text: str) -> None:
    assert has_content(text)


NO_CONTENT = ["", "   ", "...", "?!", " - ", "[REDACTED:password]", "[REDACTED:api_key] ."]


@pytest.mark.parametrize("text", NO_CONTENT)
def test_nothing_but_markers_whitespace_or_punctuation_is_no_content(text: str) -> None:
    assert not has_content(text)


def test_a_value_holding_only_a_secret_is_refused_with_the_fix() -> None:
    assert refusal("value", admit(f" {API_KEY} ", one_line=True)) == (
        "value: holds only a secret (api key); secrets are not stored — save the fact without it"
    )
    assert refusal("value", admit("\u200b...", one_line=True)) == (
        "value: has no words (only invisible characters, whitespace or punctuation); write it in words"
    )
    assert refusal("value", admit(f"my key is {API_KEY}", one_line=True)) is None


def test_a_memory_is_admitted_key_value_and_evidence() -> None:
    owner = uuid.uuid4()
    memory = user_fact(
        owner,
        "work\u200b setup note",
        f"Uses {API_KEY} at work\u202e",
        evidence=f"user: my key is {API_KEY}\nassistant: \u2066noted",
        embedding=[1.0, 0.0],
    )
    admitted = admit_memory(memory)
    assert admitted.key == "work setup note"
    assert admitted.value == "Uses [REDACTED:api_key] at work"
    assert admitted.evidence == "user: my key is [REDACTED:api_key]\nassistant: noted"
    assert admitted.embedding is None  # of the text as given: the store embeds the admitted one
    clean = user_fact(owner, "city", "Lives in Lisbon", evidence="user: I live in Lisbon", embedding=[1.0])
    assert admit_memory(clean) is clean
    with pytest.raises(ValueError, match="value: holds only a secret"):
        admit_memory(user_fact(owner, "work key", API_KEY))


def test_turns_are_admitted_and_those_without_content_are_left_out() -> None:
    def turn(position: int, text: str) -> NewTurn:
        return NewTurn(
            channel_id=uuid.uuid4(),
            user_id=uuid.uuid4(),
            persona_id=None,
            team_id=None,
            role="user",
            text=text,
            at=datetime(2026, 1, 1, tzinfo=UTC),
            position=position,
            speaker="Ana\u202e",
            search_text=f'Ana said, "{text}"',
        )

    kept, refused = admit_turns([turn(1, f"key {API_KEY}\u200b"), turn(2, f"{API_KEY} ..."), turn(3, "ok")])
    assert [(t.position, t.text, t.speaker) for t in kept] == [
        (1, "key [REDACTED:api_key]", "Ana"),
        (3, "ok", "Ana"),
    ]
    assert kept[0].search_text == 'Ana said, "key [REDACTED:api_key]"'
    assert [position for position, _ in refused] == [2]
