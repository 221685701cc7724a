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

import bisect
import itertools
import re
import unicodedata
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


# Letters of other scripts that look like Latin ones, read as those for detection only.
_CONFUSABLES = dict(
    zip(
        "авсеһіјкмнорѕтухԁԛԝӏАВСЕНІЈКМОРЅТХУαικνορτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧ‐‑‒–—―−",
        "abcehijkmhopstyxdqwlABCEHIJKMOPSTXYaiknoptuxABEZHIKMNOPTYX-------",
        strict=True,
    )
)


class _FoldTable(dict[int, int]):
    """`str.translate` table, filled on first sight of each character: the character NFKC makes of
    it when that is one character (full-width and other compatibility forms), else a look-alike
    Latin letter (`_CONFUSABLES`), else the character itself. One character for one character, so
    offsets found in the folded text hold in the original."""

    def __missing__(self, code: int) -> int:
        char = chr(code)
        normal = unicodedata.normalize("NFKC", char)
        if len(normal) == 1:
            char = normal
        folded = ord(_CONFUSABLES.get(char, char))
        if len(self) < _FOLD_CACHE_LIMIT:  # text of ever new characters must not grow it without end
            self[code] = folded
        return folded


_FOLD_CACHE_LIMIT = 1 << 17
_FOLD = _FoldTable()


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One detected secret: its kind and where it was in the input (never the secret itself)."""

    kind: str
    start: int
    end: int


_PASSWORD_PREFIX = (
    r"(?i)\b(?:password|passwd|passcode|passphrase|pass phrase|pin(?: code| number)?|pwd|pw)"
    r"(?:\s++(?:for|to|of|on)(?:\s++[\w'’-]++){1,4}?)?"
    r"(?:[\"']?\s*+[:=]\s*+|\s++(?:is|was|will be|should be|=)\s*+:?\s*+)"
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
            # the body in chunks between dashes: the end marker is looked for at dashes only
            r"-----BEGIN (?:[A-Z0-9]++ ){0,4}PRIVATE KEY(?: BLOCK)?-----(?:[^-]++|-)*?"
            r"(?:-----END (?:[A-Z0-9]++ ){0,4}PRIVATE KEY(?: BLOCK)?-----|\Z)",
        ),
        0,
        ("-----begin",),
    ),
    # a failed "eyJ…" consumes the rest of its run (second branch, group 1 empty): a later "eyJ"
    # inside the same run would fail at the same place
    (
        "jwt",
        re.compile(
            r"\b(eyJ[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]{5,}+)|\beyJ[A-Za-z0-9_-]*+"
        ),
        1,
        ("eyj",),
    ),
    ("api_key", re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{16,}+"), 0, ("sk-",)),
    (
        "api_key",
        re.compile(r"(?<![A-Za-z0-9])(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}+"),
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
        re.compile(r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{20,}+"),
        0,
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ),
    ("github_token", re.compile(r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{20,}+"), 0, ("github_pat_",)),
    ("slack_token", re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}+"), 0, ("xox",)),
    ("api_key", re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{30,}+"), 0, ("aiza",)),
    ("bearer_token", re.compile(r"(?i)\bbearer\s++([A-Za-z0-9._~+/-]{12,}+=*+)"), 1, ("bearer",)),
    # key=value / key: value assignments of credentials (config snippets pasted into a chat)
    (
        "credential",
        re.compile(
            r"(?i)\b(?:api[_ -]?key|apikey|secret[_ -]?key|client[_ -]?secret|access[_ -]?token|"
            r"auth[_ -]?token|refresh[_ -]?token|private[_ -]?token|aws_secret_access_key|token|secret)"
            r"\s*+[:=]\s*+[\"']?([A-Za-z0-9_\-./+=]{8,}+)"
        ),
        1,
        ("key", "secret", "token"),
    ),
    # natural language: "my api key is abc123…", "the token was …" — only token-looking values
    (
        "credential",
        re.compile(
            r"(?i)\b(?:api key|secret key|access key|access token|auth token|token|secret)\s++"
            r"(?:is|was|=)\s++[\"']?((?=[A-Za-z_\-./+=]*+\d)[A-Za-z0-9_\-./+=]{8,}+|[A-Za-z0-9_\-./+=]{20,}+)"
        ),
        1,
        ("key", "secret", "token"),
    ),
    # "my password is hunter2", "the wifi password is 'two words'", "password: x", "PIN: 1234"
    ("password", re.compile(_PASSWORD_PREFIX + r"[\"'“‘`]([^\"'”’`\n]{1,200}+)[\"'”’`]"), 1, _PASSWORD_WORDS),
    (
        "password",
        re.compile(_PASSWORD_PREFIX + r"[\"'“‘`]?(?!(?-i:\[REDACTED:password\])(?:[\s.,;!?]|$))(\S++)"),
        1,
        _PASSWORD_WORDS,
    ),
    (
        "password",
        re.compile(
            r"(?i)\b(?:changed|set|reset|updated|change|set up)\s++(?:my\s++|the\s++|our\s++)?"
            r"(?:[\w'’-]++\s++){0,3}?(?:password|passcode|passphrase|pin)\s++to\s++[\"'“‘`]?([^\s\"'”’`]++)"
        ),
        1,
        ("pass", "pin"),
    ),
)

# A card number as people write it: groups of four or more digits (the last may be shorter),
# separated by up to three spaces or one dash. Every quantifier is possessive and a shorter group
# ends a run, so the scan never restarts inside a run it has read (a run starts at a group's first
# digit: a start inside a group of four or more would have matched at its first digit).
_CARD_RUN = re.compile(
    r"[0-9]{4,}+(?:(?:[ \t]{1,3}+|[ \t]?+-[ \t]?+)[0-9]{4,}+)*+"
    r"(?:(?:[ \t]{1,3}+|[ \t]?+-[ \t]?+)[0-9]{1,3}+(?![0-9]))?+"
)
_DIGITS = re.compile(r"[0-9]++")
_NOT_DIGIT = re.compile(r"[^0-9]++")
_HAS_DIGIT = re.compile(r"\d")
# the greedy part gives back at most 30 characters: a bounded window per start
_IBAN = re.compile(r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}\b")
# each digit's value, and its value doubled with its digits summed (Luhn), as bytes
_LUHN_PLAIN = bytes.maketrans(b"0123456789", bytes(range(10)))
_LUHN_DOUBLED = bytes.maketrans(b"0123456789", bytes([0, 2, 4, 6, 8, 1, 3, 5, 7, 9]))
# IBAN check digits: each letter stands for its number (A = 10 … Z = 35)
_IBAN_NUMBERS = {ord(char): str(value) for value, char in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZ", start=10)}


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
    return int(rearranged.translate(_IBAN_NUMBERS)) % 97 == 1


def _luhn_prefix_sums(digits: str) -> tuple[list[int], list[int]]:
    """Prefix sums of Luhn contributions for both parities, so any window's checksum costs O(1):
    the window [a, b) doubles the digits at indices k with k % 2 == b % 2, and its sum is
    sums[b % 2][b] - sums[b % 2][a]."""
    raw = digits.encode("ascii")
    plain = raw.translate(_LUHN_PLAIN)
    doubled = raw.translate(_LUHN_DOUBLED)
    even = bytearray(plain)
    even[0::2] = doubled[0::2]
    odd = bytearray(plain)
    odd[1::2] = doubled[1::2]
    return list(itertools.accumulate(even, initial=0)), list(itertools.accumulate(odd, initial=0))


def _card_spans(text: str) -> list[tuple[int, int]]:
    """Spans of Luhn-valid 13–19 digit numbers written as one run of digit groups (`_CARD_RUN`).

    A run like "ref 7 4111 1111 1111 1111" holds the card as a window of whole groups, so every
    window of consecutive groups with 13–19 digits is checked; from each start the shortest valid
    window is extended to the longest valid one. At most seven windows per start, each O(1).
    """
    spans: list[tuple[int, int]] = []
    for run in _CARD_RUN.finditer(text):
        found = run.group()
        digits = _NOT_DIGIT.sub("", found)
        if len(digits) < 13:
            continue
        even, odd = _luhn_prefix_sums(digits)
        groups = [group.span() for group in _DIGITS.finditer(found)]
        # before[i]: how many digits the groups before group i hold (before[-1]: all of them)
        before = list(itertools.accumulate((end - start for start, end in groups), initial=0))
        base = run.start()
        taken_until = -1
        for first, (group_start, _) in enumerate(groups):
            if group_start < taken_until:
                continue
            begin = before[first]
            # windows ending after group `last - 1` hold before[last] - begin digits: 13 to 19
            best = 0
            for last in range(
                bisect.bisect_left(before, begin + 13), bisect.bisect_right(before, begin + 19)
            ):
                end = before[last]
                sums = odd if end % 2 else even
                if (sums[end] - sums[begin]) % 10 == 0:
                    best = last
            if best:
                spans.append((base + group_start, base + groups[best - 1][1]))
                taken_until = groups[best - 1][1]
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
    # one character for one: the findings' offsets hold in `text` as given
    folded = text if text.isascii() else text.translate(_FOLD)
    findings: list[Finding] = []
    for kind, pattern, group in _patterns_for(folded):
        for match in pattern.finditer(folded):
            start, end = match.span(group)
            if start < end and not MARKER_RE.fullmatch(folded, start, end):
                findings.append(Finding(kind=kind, start=start, end=end))
    if not _HAS_DIGIT.search(folded):  # card numbers and IBANs hold digits
        return _merge_overlaps(findings)
    findings.extend(Finding(kind="card_number", start=s, end=e) for s, e in _card_spans(folded))
    for match in _IBAN.finditer(folded):
        # the greedy match may run into a following capitalised word: shrink at spaces until valid
        candidate = match.group()
        while len(candidate) >= 15:
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
    """True when a memory key names a secret (e.g. "password", "work api key", "credit card"),
    read as the redactor reads text: full-width and look-alike letters as Latin, any spacing."""
    words = key.translate(_FOLD).lower().replace("_", " ").replace("-", " ")
    return bool(SECRET_WORDS.search(" ".join(words.split())))
