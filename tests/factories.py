"""Model values for tests that care about a few of their fields: the rest take plain defaults, and
keyword arguments set any field."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from store.model import Memory, NewMemory, NewTurn, Turn

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
