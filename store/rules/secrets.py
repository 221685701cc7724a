"""Secret detection and redaction (pure): the part of the admission gate (`store.rules.admission`)
that finds secrets, shared by the worker (the transcript is redacted before it is sent to the LLM;
candidates are screened in `extraction.redact`) and every door that stores or shows text.

Detected: "my password is …" style phrases (also pin/passcode/passphrase, "password: …"), OpenAI /
Anthropic style `sk-…` keys, AWS access key ids (`AKIA…`/`ASIA…`), GitHub tokens (`ghp_…`,
`github_pat_…`), Slack tokens (`xox…`), Google API keys (`AIza…`), Stripe keys, JWTs, bearer
tokens, `api_key=…`-style assignments, PEM private keys, card numbers (13–19 digits, Luhn-checked,
spaces or dashes allowed) and IBANs (mod-97 checked). Each is replaced by `[REDACTED:<kind>]`;
findings never carry the secret itself. Redacting redacted text changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "MARKER_RE",
    "REDACTION_MARKER",
    "SECRET_WORDS",
    "Finding",
    "is_secret_key",
    "luhn_valid",
    "redact",
]

REDACTION_MARKER = "[REDACTED:{kind}]"
KINDS = (
    "private_key",
    "jwt",
    "api_key",
    "aws_key",
    "github_token",
    "slack_token",
    "bearer_token",
    "credential",
    "password",
    "card_number",
    "iban",
)
# Only our own markers: a "secret" that merely looks like a marker is still redacted.
MARKER_RE = re.compile(r"\[REDACTED:(?:" + "|".join(KINDS) + r")\]")


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One detected secret: its kind and where it was in the input (never the secret itself)."""

    kind: str
    start: int
    end: int


_PASSWORD_PREFIX = (
    r"(?i)\b(?:password|passwd|passcode|passphrase|pass phrase|pin(?: code| number)?|pwd|pw)"
    r"(?:\s+(?:for|to|of|on)(?:\s+[\w'’-]+){1,4}?)?"
    r"(?:[\"']?\s*[:=]\s*|\s+(?:is|was|will be|should be|=)\s*:?\s*)"
)

# (kind, pattern, group holding the secret — 0 for the whole match)
# (kind, pattern, group of the secret, trigger words): in ASCII text a pattern can match only
# where one of its lower-case trigger words occurs (`_patterns_for`)
# every word `_PASSWORD_PREFIX` starts with contains one of these
_PASSWORD_WORDS = ("pass", "pin", "pw")

_TOKEN_PATTERNS: tuple[tuple[str, re.Pattern[str], int, tuple[str, ...]], ...] = (
    (
        "private_key",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
        0,
        ("-----begin",),
    ),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"), 0, ("eyj",)),
    ("api_key", re.compile(r"(?<![A-Za-z0-9])sk-(?:[A-Za-z0-9_-]){16,}"), 0, ("sk-",)),
    (
        "api_key",
        re.compile(r"(?<![A-Za-z0-9])(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}"),
        0,
        ("_live_", "_test_"),
    ),
    (
        "aws_key",
        re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}(?![A-Z0-9])"),
        0,
        ("akia", "asia", "agpa", "aida", "aroa"),
    ),
    (
        "github_token",
        re.compile(r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{20,}"),
        0,
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ),
    ("github_token", re.compile(r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{20,}"), 0, ("github_pat_",)),
    ("slack_token", re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}"), 0, ("xox",)),
    ("api_key", re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{30,}"), 0, ("aiza",)),
    ("bearer_token", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{12,}=*)"), 1, ("bearer",)),
    # key=value / key: value assignments of credentials (config snippets pasted into a chat)
    (
        "credential",
        re.compile(
            r"(?i)\b(?:api[_ -]?key|apikey|secret[_ -]?key|client[_ -]?secret|access[_ -]?token|"
            r"auth[_ -]?token|refresh[_ -]?token|private[_ -]?token|aws_secret_access_key|token|secret)"
            r"\s*[:=]\s*[\"']?([A-Za-z0-9_\-./+=]{8,})"
        ),
        1,
        ("key", "secret", "token"),
    ),
    # natural language: "my api key is abc123…", "the token was …" — only token-looking values
    (
        "credential",
        re.compile(
            r"(?i)\b(?:api key|secret key|access key|access token|auth token|token|secret)\s+"
            r"(?:is|was|=)\s+[\"']?((?=[A-Za-z0-9_\-./+=]*\d)[A-Za-z0-9_\-./+=]{8,}|[A-Za-z0-9_\-./+=]{20,})"
        ),
        1,
        ("key", "secret", "token"),
    ),
    # "my password is hunter2", "the wifi password is 'two words'", "password: x", "PIN: 1234"
    ("password", re.compile(_PASSWORD_PREFIX + r"[\"'“‘`]([^\"'”’`\n]{1,200})[\"'”’`]"), 1, _PASSWORD_WORDS),
    (
        "password",
        re.compile(_PASSWORD_PREFIX + r"[\"'“‘`]?(?!(?-i:\[REDACTED:password\])(?:[\s.,;!?]|$))(\S+)"),
        1,
        _PASSWORD_WORDS,
    ),
    (
        "password",
        re.compile(
            r"(?i)\b(?:changed|set|reset|updated|change|set up)\s+(?:my\s+|the\s+|our\s+)?"
            r"(?:[\w'’-]+\s+){0,3}?(?:password|passcode|passphrase|pin)\s+to\s+[\"'“‘`]?([^\s\"'”’`]+)"
        ),
        1,
        ("pass", "pin"),
    ),
)

_DIGIT_RUN = re.compile(r"\d+(?:[ -]\d+)*")
_HAS_DIGIT = re.compile(r"\d")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")


def luhn_valid(digits: str) -> bool:
    """True when the digit string passes the Luhn checksum (card numbers)."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _iban_valid(text: str) -> bool:
    compact = text.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    numeric = "".join(str(int(char, 36)) for char in rearranged)
    return int(numeric) % 97 == 1


def _card_spans(text: str) -> list[tuple[int, int]]:
    """Spans of Luhn-valid 13–19 digit numbers, allowing single space/dash group separators.

    A run like "ref 7 4111 1111 1111 1111" holds the card as a window of whole digit groups, so
    every window of consecutive groups with 13–19 digits is checked, not only the whole run.
    """
    spans: list[tuple[int, int]] = []
    for run in _DIGIT_RUN.finditer(text):
        groups = [(m.start() + run.start(), m.end() + run.start()) for m in re.finditer(r"\d+", run.group())]
        taken_until = -1
        for first in range(len(groups)):
            if groups[first][0] < taken_until:
                continue
            digits = ""
            for last in range(first, len(groups)):
                digits += text[groups[last][0] : groups[last][1]]
                if len(digits) > 19:
                    break
                if len(digits) >= 13 and luhn_valid(digits):
                    best = (groups[first][0], groups[last][1])
                    # keep extending: a longer valid window covers more of the same number
                    for longer in range(last + 1, len(groups)):
                        extra = digits + "".join(text[g[0] : g[1]] for g in groups[last + 1 : longer + 1])
                        if len(extra) > 19:
                            break
                        if luhn_valid(extra):
                            best = (groups[first][0], groups[longer][1])
                    spans.append(best)
                    taken_until = best[1]
                    break
    return spans


def _patterns_for(text: str) -> list[tuple[str, re.Pattern[str], int]]:
    """The token patterns that can match `text`. A redaction pass runs on every message of every
    conversation and most hold no secret: ruling patterns out by a substring test costs ~1 µs
    each, scanning with one ~10-50 µs. Only ASCII text is screened: under IGNORECASE some
    non-ASCII letters (the Kelvin sign, the long s) match ASCII ones, which `lower()` does not map."""
    if not text.isascii():
        return [(kind, pattern, group) for kind, pattern, group, _ in _TOKEN_PATTERNS]
    lowered = text.lower()
    return [
        (kind, pattern, group)
        for kind, pattern, group, triggers in _TOKEN_PATTERNS
        if any(trigger in lowered for trigger in triggers)
    ]


def _detect(text: str) -> list[Finding]:
    findings: list[Finding] = []
    for kind, pattern, group in _patterns_for(text):
        for match in pattern.finditer(text):
            start, end = match.span(group)
            if start < end and not MARKER_RE.fullmatch(text[start:end]):
                findings.append(Finding(kind=kind, start=start, end=end))
    if not _HAS_DIGIT.search(text):  # card numbers and IBANs hold digits
        return _merge_overlaps(findings)
    findings.extend(Finding(kind="card_number", start=s, end=e) for s, e in _card_spans(text))
    for match in _IBAN.finditer(text):
        # the greedy match may run into a following capitalised word: shrink at spaces until valid
        candidate = match.group()
        while candidate:
            if _iban_valid(candidate):
                findings.append(Finding(kind="iban", start=match.start(), end=match.start() + len(candidate)))
                break
            candidate = candidate.rpartition(" ")[0]
    return _merge_overlaps(findings)


def _merge_overlaps(findings: list[Finding]) -> list[Finding]:
    """Sort by position and fold overlapping spans into one (the first kind wins)."""
    merged: list[Finding] = []
    for finding in sorted(findings, key=lambda f: (f.start, -f.end)):
        if merged and finding.start < merged[-1].end:
            last = merged[-1]
            merged[-1] = Finding(kind=last.kind, start=last.start, end=max(last.end, finding.end))
        else:
            merged.append(finding)
    return merged


def redact(text: str) -> tuple[str, list[Finding]]:
    """Replace every detected secret with `[REDACTED:<kind>]`; returns the new text and the findings.

    Finding offsets refer to the input text; overlapping detections are merged into one.
    """
    findings = _detect(text)
    if not findings:
        return text, []
    pieces: list[str] = []
    cursor = 0
    for finding in findings:
        pieces.append(text[cursor : finding.start])
        pieces.append(REDACTION_MARKER.format(kind=finding.kind))
        cursor = finding.end
    pieces.append(text[cursor:])
    return "".join(pieces), findings


# words that name a secret ("password", "api key", "card number" …), in lower-case text
SECRET_WORDS = re.compile(
    r"\b(?:password|passwords|passwd|passcode|passphrase|pass phrase|pwd|pin|pin code|pin number|"
    r"api key|api keys|apikey|access key|secret key|private key|ssh key|"
    r"(?:access|auth|api|bearer|refresh|github|slack|session) token|token|tokens|"
    r"credential|credentials|login details|card number|credit card|debit card|card details|cvv|cvc|"
    r"security code|iban|bank account number|account number|seed phrase|recovery phrase|mnemonic)\b"
)


def is_secret_key(key: str) -> bool:
    """True when a memory key names a secret (e.g. "password", "work api key", "credit card")."""
    return bool(SECRET_WORDS.search(key.lower().replace("_", " ").replace("-", " ")))
