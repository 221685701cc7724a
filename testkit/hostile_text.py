"""Text shaped to make a secret scanner slow, for tests and benchmarks (pure).

Each shape repeats the start of one secret pattern of `store.rules.secrets` (a JWT's `-eyJ`, a
card number's digit groups, "password is" before a sea of spaces …) so that a scanner which
restarts inside its own run, or backtracks over a run, pays for it quadratically. `hostile_text`
builds one shape at a given length; `benign_text` builds ordinary chat text of the same length.
"""

from __future__ import annotations

__all__ = ["HOSTILE_SHAPES", "benign_text", "hostile_text"]

# shape name → (the text it starts with, the unit repeated after it); the name says which pattern
HOSTILE_SHAPES: dict[str, tuple[str, str]] = {
    "jwt-restart": ("", "-eyJ"),
    "jwt-segments": ("", "eyJabcde."),
    "jwt-two-segments": ("", "eyJabcde.eyJabcde."),
    "api-key-prefix": ("", "sk-"),
    "api-key-short": ("", "sk-abcdefghijklmno "),
    "stripe-prefix": ("", "sk_live_"),
    "github-prefix": ("", "ghp_"),
    "slack-prefix": ("", "xoxb-"),
    "google-prefix": ("", "AIza"),
    "aws-prefix": ("", "AKIA"),
    "private-key-header": ("", "-----BEGIN RSA PRIVATE KEY-----"),
    "private-key-dashes": ("-----BEGIN PRIVATE KEY-----", "-"),
    "bearer-spaces": ("bearer", " "),
    "bearer-words": ("", "bearer "),
    "credential-assignment": ("", "token="),
    "credential-spaces": ("token", " "),
    "credential-sentence": ("", "token is "),
    "credential-no-digit": ("token is ", "a"),
    "password-phrase": ("", "password is "),
    "password-spaces": ("password is", " "),
    "password-colon-spaces": ("password", " : "),
    "password-for-words": ("", "password for a "),
    "password-quote": ("", "password is 'a"),
    "password-changed": ("", "set my "),
    "card-single-digits": ("", "1 "),
    "card-groups-of-four": ("", "1111 "),
    "card-groups-of-three": ("", "123 "),
    "card-dashes": ("", "1-"),
    "card-double-spaces": ("", "4111  "),
    "card-digits": ("", "1"),
    "iban-groups": ("", "GB82 "),
    "iban-word": ("", "GB82WEST"),
    "full-width-password": ("", "ｐａｓｓｗｏｒｄ ｉｓ "),
    "cyrillic-look-alikes": ("", "раѕѕword іѕ "),
    "marker-look-alike": ("", "[REDACTED:password] "),
}

_BENIGN = (
    "We moved to Lyon last spring and I still miss the bakery near our old flat. "
    "My sister visits on Sundays; she teaches piano and likes long walks by the river. "
)


def hostile_text(shape: str, length: int) -> str:
    """`length` characters of the named shape (`HOSTILE_SHAPES`): its start, then its unit
    repeated to fill the length."""
    start, unit = HOSTILE_SHAPES[shape]
    body = unit * ((length - len(start)) // len(unit) + 1)
    return (start + body)[:length]


def benign_text(length: int) -> str:
    """`length` characters of ordinary chat text (no secret, nothing a scanner restarts on)."""
    return (_BENIGN * (length // len(_BENIGN) + 1))[:length]
