"""Forgetting what was said (pure): which stored turns a memory's evidence cites, what is left of an
evidence once lines are forgotten, and how the turns beside an erased one read to search afterwards.

A memory's evidence is the cited messages as `role: text` lines, each message's text with its
whitespace collapsed and cut (`store.rules.evidence`, the worker's `resolve_evidence`). A stored
turn keeps the message's text (redacted, cut at `TURN_MAX_CHARS`), so a line cites a turn of the
same conversation when the role is the same and the line's text is the turn's, read the same way.

A turn the worker stored reads to search (its `search_text`, and its embedding's input) as the up
to `TURN_SEARCH_BEFORE` turns before it, itself and the up to `TURN_SEARCH_AFTER` after it, each
`Speaker said, "text"` (the worker's `plan_turns`): a neighbour of an erased turn holds its words
there, so it is read again from the turns that stay."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from store.rules.evidence import SaidLine, quoted_text

# how a stored turn reads to search: the up to this many turns before it and after it (the worker's
# `plan_turns` reads these)
TURN_SEARCH_BEFORE = 2
TURN_SEARCH_AFTER = 1


def cites(lines: Iterable[SaidLine], role: str, text: str) -> bool:
    """Whether one of the lines is this message (its role and text as a stored turn holds them)."""
    said = quoted_text(text)
    return any(line.role == role and line.text.strip() == said.strip() for line in lines)


def without_lines(evidence: str | None, forgotten: Collection[str]) -> str | None:
    """The evidence without the forgotten lines (None when none is left)."""
    if evidence is None:
        return None
    kept = [line for line in evidence.split("\n") if line not in forgotten]
    return "\n".join(kept) if any(line.strip() for line in kept) else None


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredTurn:
    """What reading a turn to search needs of a stored turn."""

    id: uuid.UUID
    position: int
    role: str
    speaker: str | None
    text: str
    has_search_text: bool
    has_embedding: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnReading:
    """How a turn reads to search: its full text (`search_text`), and the two texts its embedding is
    the mean direction of (`own`: the turn; `around`: the turns before it, then the turn)."""

    search_text: str
    own: str
    around: str


def turn_line(speaker: str | None, role: str, text: str) -> str:
    """A turn as it reads to search: `Speaker said, "text"` (the role when no speaker is named)."""
    return f'{speaker or role} said, "{text}"'


def readings(turns: Sequence[StoredTurn]) -> list[TurnReading]:
    """How each of an event's turns (in order) reads to search beside the others."""
    lines = [turn_line(t.speaker, t.role, t.text) for t in turns]
    out: list[TurnReading] = []
    for i, line in enumerate(lines):
        before = lines[max(0, i - TURN_SEARCH_BEFORE) : i]
        after = lines[i + 1 : i + 1 + TURN_SEARCH_AFTER]
        out.append(
            TurnReading(
                search_text="\n".join([*before, line, *after]),
                own=line,
                around="\n".join([*before, line]),
            )
        )
    return out


def reread_beside(turns: Sequence[StoredTurn], erased: Collection[uuid.UUID]) -> dict[uuid.UUID, TurnReading]:
    """The turns of one event (any order) that stay and whose reading held an erased turn, each with
    its reading among the turns that stay. A turn stored without a search text read nothing around
    it, and stays as it is."""
    ordered = sorted(turns, key=lambda t: t.position)
    gone = [i for i, t in enumerate(ordered) if t.id in erased]
    if not gone:
        return {}
    touched = {
        ordered[j].id
        for i in gone
        for j in range(max(0, i - TURN_SEARCH_AFTER), min(len(ordered), i + TURN_SEARCH_BEFORE + 1))
        if ordered[j].id not in erased and ordered[j].has_search_text
    }
    kept = [t for t in ordered if t.id not in erased]
    return {t.id: reading for t, reading in zip(kept, readings(kept), strict=True) if t.id in touched}
