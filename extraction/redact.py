"""Secret screening of extracted candidates (pure). Detection and redaction themselves live in
`store.rules.secrets` (re-exported here), the part of the one admission gate for text
(`store.rules.admission`) that every door shares.

Two places in the worker use them:

1. The transcript is redacted BEFORE it is sent to the LLM. A secret typed into a chat must not
   leave our process for a third-party API, and the LLM cannot store what it never saw. The cost is
   that the LLM sees `[REDACTED:kind]` markers instead; that is the point.
2. Every candidate is screened before storage (`screen_candidate`): a candidate *about* a secret
   (key "password", "api key", "card number" …) is dropped; a candidate whose value contains a
   secret is redacted, or dropped when little would be left but the marker.
"""

from __future__ import annotations

from collections.abc import Callable

from extraction.types import Candidate, Rejection
from store.rules.admission import admit, secret_key_refusal
from store.rules.secrets import (
    MARKER_RE,
    REDACTION_MARKER,
    SECRET_WORDS,
    Finding,
    is_secret_key,
    luhn_valid,
    redact,
)

__all__ = [
    "REDACTION_MARKER",
    "Finding",
    "is_secret_key",
    "luhn_valid",
    "redact",
    "screen_candidate",
]

# Fewer remaining words than this after removing redaction markers: the memory would be useless.
_MIN_WORDS_LEFT = 4


def screen_candidate(
    candidate: Candidate, *, redactor: Callable[[str], tuple[str, list[Finding]]] = redact
) -> Candidate | Rejection:
    """Drop a candidate about a secret, redact one that merely mentions one, pass the rest unchanged."""
    # the key as the store will write it (`admit_memory`), so the two never disagree
    if secret_key_refusal(admit(candidate.key, one_line=True).text) is not None:
        return Rejection(code="secret", reason="secret: key names a credential", raw=candidate.key)
    key, key_findings = redactor(candidate.key)
    if key_findings or MARKER_RE.search(key):
        return Rejection(code="secret", reason="secret: key contains a secret", raw=key)
    value, findings = redactor(candidate.value)
    if not findings and not MARKER_RE.search(value):
        return candidate
    remaining = MARKER_RE.sub(" ", value).split()
    if len(remaining) < _MIN_WORDS_LEFT or _mentions_secret(value):
        kinds = sorted({f.kind for f in findings}) or ["redacted"]
        return Rejection(
            code="secret", reason=f"secret: value contains {', '.join(kinds)}", raw=f"{key}: {value}"
        )
    return Candidate(
        key=candidate.key,
        value=value,
        confidence=candidate.confidence,
        scope=candidate.scope,
        evidence=candidate.evidence,
    )


def _mentions_secret(value: str) -> bool:
    # "Their password is [REDACTED:password]" carries nothing worth remembering except the secret.
    return bool(SECRET_WORDS.search(MARKER_RE.sub(" ", value).lower()))
