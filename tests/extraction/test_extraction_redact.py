"""Secret detection: redaction of text and screening of candidates (incl. property tests)."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from extraction.redact import is_secret_key, luhn_valid, redact, screen_candidate
from extraction.types import Candidate, Rejection

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        ("my password is hunter2.", "hunter2", "password"),
        ("My Password: s3cr3t!", "s3cr3t!", "password"),
        ("the wifi password for the office is 'correct horse battery'", "correct horse battery", "password"),
        ("I changed my password to Tr0ub4dor&3", "Tr0ub4dor&3", "password"),
        ("my pin is 4921", "4921", "password"),
        ("use sk-proj-AbCdEf0123456789XyZ_abc for prod", "sk-proj-AbCdEf0123456789XyZ_abc", "api_key"),
        ("stripe sk_live_51Habcdefghijk", "sk_live_51Habcdefghijk", "api_key"),
        ("aws AKIAIOSFODNN7EXAMPLE ok", "AKIAIOSFODNN7EXAMPLE", "aws_key"),
        (
            "token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "github_token",
        ),
        ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij", "slack_token"),
        (f"here: {JWT}", JWT, "jwt"),
        ("Authorization: Bearer abcdef0123456789ghij", "abcdef0123456789ghij", "bearer_token"),
        ("API_KEY=abcd1234efgh5678", "abcd1234efgh5678", "credential"),
        ("my api key is abc123def456", "abc123def456", "credential"),
        ("card 4111 1111 1111 1111 exp 12/26", "4111 1111 1111 1111", "card_number"),
        ("card 4111-1111-1111-1111", "4111-1111-1111-1111", "card_number"),
        ("ref 7 4111111111111111 thanks", "4111111111111111", "card_number"),
        ("iban DE89 3704 0044 0532 0130 00 please", "DE89 3704 0044 0532 0130 00", "iban"),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----",
            "b3BlbnNzaC1rZXktdjEAAAA",
            "private_key",
        ),
    ],
)
def test_secrets_are_redacted(text: str, secret: str, kind: str) -> None:
    redacted, findings = redact(text)
    assert secret not in redacted
    assert f"[REDACTED:{kind}]" in redacted
    assert kind in {f.kind for f in findings}


@pytest.mark.parametrize(
    "text",
    [
        "my secret is that I love cats",
        "call me at 555 123 4567",
        "order 1234567890123 shipped",  # 13 digits, not Luhn-valid
        "the token system in the game is fun",
        "I forgot my password yesterday",
        "I live in Lyon and work as a nurse",
        "version 1.2.3 released on 2024-01-02",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == (text, [])


def test_finding_offsets_point_into_the_input() -> None:
    text = "a sk-abcdefghijklmnopqrstuv b"
    _, findings = redact(text)
    assert [text[f.start : f.end] for f in findings] == ["sk-abcdefghijklmnopqrstuv"]


def test_redaction_is_idempotent() -> None:
    once, _ = redact("my password is hunter2 and card 4111 1111 1111 1111")
    assert redact(once) == (once, [])


def _luhn_complete(body: str) -> str:
    for check in "0123456789":
        if luhn_valid(body + check):
            return body + check
    raise AssertionError("unreachable")


card_numbers = st.builds(
    _luhn_complete, st.text(alphabet="0123456789", min_size=12, max_size=18).filter(lambda s: s[0] != "0")
)
filler = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


def _grouped(number: str, separator: str) -> str:
    return separator.join(number[i : i + 4] for i in range(0, len(number), 4))


@given(number=card_numbers, before=filler, after=filler, separator=st.sampled_from(["", " ", "-"]))
def test_a_generated_card_number_never_survives(number: str, before: str, after: str, separator: str) -> None:
    shown = _grouped(number, separator) if separator else number
    text = f"{before} {shown} {after}"
    redacted, _ = redact(text)
    assert shown not in redacted
    outcome = screen_candidate(
        Candidate(key="payment details", value=f"Paid with {shown} last week", confidence=0.9, scope="user")
    )
    assert isinstance(outcome, Rejection) or shown not in outcome.value


token_body = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", min_size=36, max_size=60
)


@given(
    prefix=st.sampled_from(["sk-", "sk-proj-", "ghp_", "github_pat_", "xoxb-", "sk_live_"]),
    body=token_body,
    before=filler,
    after=filler,
)
def test_a_generated_api_key_never_survives(prefix: str, body: str, before: str, after: str) -> None:
    assume(body not in before + after)
    key = prefix + body
    redacted, _ = redact(f"{before} {key} {after}")
    assert key not in redacted
    assert body not in redacted


@given(body=st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", min_size=16, max_size=16), before=filler)
def test_a_generated_aws_key_never_survives(body: str, before: str) -> None:
    key = "AKIA" + body
    assert key not in redact(f"{before} {key}.")[0]


@given(
    password=st.text(
        alphabet=st.characters(codec="ascii", categories=("L", "N", "P", "S")), min_size=4, max_size=30
    )
)
def test_a_stated_password_never_survives(password: str) -> None:
    assume(password not in "btw my password is [REDACTED:password] ok")
    redacted, _ = redact(f"btw my password is {password} ok")
    assert password not in redacted


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "wifi password",
        "work api key",
        "credit card",
        "card number",
        "github token",
        "iban",
        "pin",
    ],
)
def test_keys_about_secrets_are_detected(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["home city", "favorite pinball machine", "job title", "diet preference"])
def test_ordinary_keys_are_not_secret(key: str) -> None:
    assert not is_secret_key(key)


def test_screen_drops_candidates_about_secrets() -> None:
    outcome = screen_candidate(
        Candidate(key="wifi password", value="Is hunter2", confidence=0.9, scope="user")
    )
    assert isinstance(outcome, Rejection)
    assert "secret" in outcome.reason
    assert "hunter2" not in outcome.raw


def test_screen_drops_values_that_would_be_nothing_but_the_secret() -> None:
    outcome = screen_candidate(
        Candidate(key="work setup", value="Uses sk-abcdefghijklmnopqrstuv", confidence=0.9, scope="user")
    )
    assert isinstance(outcome, Rejection)
    assert "sk-abcdefghijklmnopqrstuv" not in outcome.raw


def test_screen_drops_values_already_redacted_upstream() -> None:
    outcome = screen_candidate(
        Candidate(key="login details", value="[REDACTED:password]", confidence=0.9, scope="user")
    )
    assert isinstance(outcome, Rejection)


def test_screen_redacts_a_secret_inside_an_otherwise_useful_value() -> None:
    outcome = screen_candidate(
        Candidate(
            key="deployment setup",
            value="Deploys with Kubernetes and Traefik, pasted ghp_abcdefghijklmnopqrstuvwxyz0123456789 once",
            confidence=0.8,
            scope="user",
        )
    )
    assert isinstance(outcome, Candidate)
    assert "ghp_" not in outcome.value
    assert "Kubernetes and Traefik" in outcome.value


def test_screen_passes_ordinary_candidates_unchanged() -> None:
    candidate = Candidate(key="home city", value="Lives in Lyon", confidence=0.9, scope="user")
    assert screen_candidate(candidate) is candidate


def test_every_detector_kind_has_a_known_marker() -> None:
    from store.rules import secrets as module

    kinds = {kind for kind, _, _, _ in module._TOKEN_PATTERNS} | {"card_number", "iban"}
    assert kinds == set(module.KINDS)


def test_text_that_merely_looks_like_a_marker_is_still_redacted() -> None:
    redacted, _ = redact("my password is [REDACTED:_] ok")
    assert redacted == "my password is [REDACTED:password] ok"


_SECRET_TEXTS = [
    "my password is hunter2.",
    "I changed my PIN to 4921",
    "use sk-proj-AbCdEf0123456789XyZ_abc for prod",
    "stripe sk_live_51Habcdefghijk",
    "aws AKIAIOSFODNN7EXAMPLE ok",
    "token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "slack xoxb-1234567890-abcdefghij",
    f"here: {JWT}",
    "Authorization: Bearer abcdef0123456789ghij",
    "API_KEY=abcd1234efgh5678",
    "my api key is abc123def456",
    "card 4111 1111 1111 1111 exp 12/26",
    "iban DE89 3704 0044 0532 0130 00 please",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
    "I live in Lyon and work as a nurse",
    "PA\u017f\u017fWORD is hunter2",  # long s: matches "s" under IGNORECASE, lower() keeps it
    "api \u212aey: abcdefgh1234",  # Kelvin sign: matches "k" under IGNORECASE
    "ma cl\u00e9 secret = zzzzzzzz9",
    "\u0665\u0666\u0667 digits",
]


@given(
    st.lists(
        st.tuples(st.sampled_from(_SECRET_TEXTS), st.sampled_from(["lower", "upper", "swapcase", "same"])),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from([" ", "\n", ". ", ""]),
)
def test_the_pattern_pre_screen_finds_what_a_full_scan_finds(
    parts: list[tuple[str, str]], separator: str
) -> None:
    import store.rules.secrets as module

    text = separator.join(getattr(part, case)() if case != "same" else part for part, case in parts)
    screened = redact(text)
    every_pattern = [(kind, pattern, group) for kind, pattern, group, _ in module._TOKEN_PATTERNS]
    original_screen, original_digit = module._patterns_for, module._HAS_DIGIT
    try:
        module._patterns_for = lambda _text: every_pattern  # type: ignore[assignment]
        module._HAS_DIGIT = re.compile("")  # type: ignore[assignment]
        assert redact(text) == screened
    finally:
        module._patterns_for, module._HAS_DIGIT = original_screen, original_digit
