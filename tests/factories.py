"""Model values for tests that care about a few of their fields: the rest take plain defaults, and
keyword arguments set any field."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from store.model import Memory, NewMemory, NewTurn, Turn
from store.rules.keys import is_invisible

AT = datetime(2026, 1, 1, tzinfo=UTC)


def user_fact(owner: uuid.UUID, key: str, value: str, **fields: Any) -> NewMemory:
    """A memory to write about the person `owner` (scope `user`, no separate user)."""
    return replace(NewMemory(scope="user", owner_id=owner, user_id=None, key=key, value=value), **fields)


def stored_fact(key: str, value: str, *, at: datetime = AT, **fields: Any) -> Memory:
    """An active stored `user` memory of a fresh owner, created and last updated `at`."""
    memory = Memory(
        id=uuid.uuid4(),
        scope="user",
        owner_id=uuid.uuid4(),
        user_id=None,
        key=key,
        value=value,
        source_channel_id=None,
        confidence=0.9,
        status="active",
        created_at=at,
        updated_at=at,
    )
    return replace(memory, **fields)


def past_turn(text: str, **fields: Any) -> Turn:
    """The first message of a fresh channel and event, said by a fresh user (no persona, no team)
    at `AT`."""
    turn = Turn(
        id=uuid.uuid4(),
        channel_id=uuid.uuid4(),
        event_id=uuid.uuid4(),
        user_id=uuid.uuid4(),
        persona_id=None,
        team_id=None,
        role="user",
        text=text,
        at=AT,
        position=1,
    )
    return replace(turn, **fields)


def exchange(
    lines: Sequence[str],
    *,
    channel: uuid.UUID,
    user: uuid.UUID,
    persona: uuid.UUID | None,
    team: uuid.UUID | None,
    at: datetime,
    apart: timedelta = timedelta(seconds=1),
) -> list[NewTurn]:
    """One event's turns: `lines` said by the user and the assistant in turn, from `at`, `apart`."""
    return [
        NewTurn(
            channel_id=channel,
            user_id=user,
            persona_id=persona,
            team_id=team,
            role="user" if i % 2 == 0 else "assistant",
            text=text,
            at=at + i * apart,
            position=i + 1,
        )
        for i, text in enumerate(lines)
    ]


# Hostile text for the gate's property tests (every door): secrets the redactor detects and
# characters a reader cannot see, among short plain words. Sampled, never generated: a property
# over every door runs in seconds.
SECRET_SAMPLES = (
    "sk-proj1234567890abcdefABCDEF",  # an OpenAI-style API key
    "AKIAIOSFODNN7EXAMPLE",  # an AWS access key id
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlX29mX3RoZV90b2tlbg",  # a JWT
    "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",  # a GitHub token
    "4111 1111 1111 1111",  # a card number
)
# a bidi override, a zero-width space, a bidi isolate, tag characters, NUL, a byte order mark
INVISIBLE_SAMPLES = ("\u202e", "\u200b", "\u2066", "\U000e0041\U000e007f", "\x00", "\ufeff")
PLAIN_SAMPLES = ("I live in Lisbon", "ok", "thanks", "my key is", "...", "Ana", "vegan since spring")


def _hidden(token: str, invisible: str, at: int) -> str:
    at %= len(token) + 1
    return token[:at] + invisible + token[at:]


# a token, maybe with an invisible character hidden inside it (inside a secret too)
HOSTILE_TOKEN = st.builds(
    _hidden,
    st.sampled_from(PLAIN_SAMPLES + SECRET_SAMPLES),
    st.sampled_from(("", *INVISIBLE_SAMPLES)),
    st.integers(min_value=0, max_value=60),
)
HOSTILE_TEXT = st.lists(HOSTILE_TOKEN, min_size=1, max_size=4).map(" ".join)


def leaks(text: str) -> list[str]:
    """What of the hostile samples `text` still holds: a secret (its first 12 characters are
    enough to tell) or an invisible character. [] for text the gate admitted."""
    found = [f"secret {secret[:6]}…" for secret in SECRET_SAMPLES if secret[:12] in text]
    found += [f"invisible U+{ord(char):04X}" for char in text if is_invisible(char)]
    return found
