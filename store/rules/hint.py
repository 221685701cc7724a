"""The memory hint injected into the system prompt: one bullet per memory, highest priority first,
capped at about 1500 tokens (~6000 characters) without cutting a bullet; pinned facts first, in
every hint; with conversation memory, a second section of the few most relevant earlier turns
(`build_hint`). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from store.model import SCOPE_PRIORITY, Memory, RecallHit, RecallItem, Turn
from store.rules.evidence import evidence_lines

DEFAULT_MAX_CHARS = 6000


def _one_line(text: str) -> str:
    # a value with newlines would break the bullet list the model reads
    return " ".join(text.split())


def bullet(memory: Memory) -> str:
    """`- key: value` on one line."""
    return f"- {_one_line(memory.key)}: {_one_line(memory.value)}"


def _ranked(items: Sequence[RecallHit | Memory]) -> list[Memory]:
    hits = [item for item in items if isinstance(item, RecallHit)]
    memories = [item for item in items if isinstance(item, Memory)]
    # recall hits carry their rank as a score; bare memories rank by scope, then confidence, then recency
    ordered_hits = sorted(hits, key=lambda h: -h.score)
    ordered_memories = sorted(
        memories,
        key=lambda m: (SCOPE_PRIORITY[m.scope], -m.confidence, -m.updated_at.timestamp()),
    )
    return [h.memory for h in ordered_hits] + ordered_memories


def build_memory_hint(items: Sequence[RecallHit | Memory], max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Bullets for the given recall hits or memories within `max_chars`; "" when there are none.

    A bullet that does not fit is skipped whole, and later (smaller) ones may still fit."""
    lines: list[str] = []
    used = 0
    seen: set[str] = set()
    for memory in _ranked(items):
        line = bullet(memory)
        if line in seen:
            continue
        cost = len(line) + (1 if lines else 0)  # the newline joining it to the previous bullet
        if used + cost > max_chars:
            continue
        lines.append(line)
        seen.add(line)
        used += cost
    return "\n".join(lines)


# the hint's two sections: what is known (facts), and what was said before (turns)
KNOWN_HEADER = "What is known:"
EARLIER_HEADER = "From earlier conversations:"
# at most this many turns, each at most this long, within at most this share of the budget
HINT_TURNS = 5
HINT_TURN_CHARS = 300
HINT_TURN_SHARE = 0.35
# a fact's line quotes the messages it comes from, at most this long
HINT_QUOTE_CHARS = 200


def said_on(moment: datetime) -> str:
    """A day as the hint writes it, `8 May 2023`: the words a question about "when" is answered
    in (English month names whatever the locale)."""
    return f"{moment.day} {_MONTHS[moment.month - 1]} {moment.year}"


_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def evidence_said(evidence: str | None) -> tuple[str, ...]:
    """The texts of the messages a memory's evidence quotes, each on one line."""
    return tuple(_one_line(line.text) for line in evidence_lines(evidence))


def dated_bullet(memory: Memory) -> str:
    """`- key: value (said 8 May 2023) — "what was said"`: the date it was said, when known (what a
    question about "when" or "lately" needs), and the messages it comes from, clipped to
    `HINT_QUOTE_CHARS` (the words a question is asked in are often the speaker's, not the fact's)."""
    line = bullet(memory)
    if memory.observed_at:
        line = f"{line} (said {said_on(memory.observed_at)})"
    quote = " / ".join(evidence_said(memory.evidence))
    if quote:
        if len(quote) > HINT_QUOTE_CHARS:
            quote = quote[: HINT_QUOTE_CHARS - 1].rstrip() + "…"
        line = f'{line} — "{quote}"'
    return line


def turn_line(turn: Turn) -> str:
    """`speaker: text` on one line (the role when the speaker is not known), the text clipped to
    `HINT_TURN_CHARS`."""
    text = _one_line(turn.text)
    if len(text) > HINT_TURN_CHARS:
        text = text[: HINT_TURN_CHARS - 1].rstrip() + "…"
    return f"{_one_line(turn.said_by)}: {text}"


def dated_turn_line(turn: Turn) -> str:
    """`[8 May 2023] speaker: text`: the turn with the day it was said (`said_on`, `turn_line`)."""
    return f"[{said_on(turn.at)}] {turn_line(turn)}"


def turn_bullet(turn: Turn) -> str:
    """`- [8 May 2023] speaker: text` on one line (`dated_turn_line`)."""
    return f"- {dated_turn_line(turn)}"


def _fit(lines: Sequence[str], budget: int) -> list[str]:
    kept: list[str] = []
    used = 0
    for line in dict.fromkeys(lines):
        cost = len(line) + 1
        if used + cost <= budget:
            kept.append(line)
            used += cost
    return kept


def pinned_first(pinned: Sequence[Memory], recalled: Sequence[Memory]) -> list[Memory]:
    """The facts a hint states, in order: the active pinned ones, then the recalled ones not
    already among them. A pinned fact that is pending or archived is left out: pinning never
    shows a fact nobody approved."""
    shown = [memory for memory in pinned if memory.status == "active"]
    ids = {memory.id for memory in shown}
    return shown + [memory for memory in recalled if memory.id not in ids]


def build_hint(
    items: Sequence[RecallItem], max_chars: int = DEFAULT_MAX_CHARS, *, pinned: Sequence[Memory] = ()
) -> str:
    """The prompt hint of a recall over memories and turns, within `max_chars`: "What is known"
    (the `pinned` facts, then the recalled ones best first, dated when known) and "From earlier
    conversations" (the few best turns, dated, given at most `HINT_TURN_SHARE` of the budget; what
    they leave goes to the facts). A line that does not fit is skipped whole; "" when there is
    nothing to say."""
    recalled = [item.memory for item in items if item.kind == "memory" and item.memory is not None]
    memories = pinned_first(pinned, recalled)
    turns = [item.turn for item in items if item.kind == "turn" and item.turn is not None]
    turn_lines: list[str] = []
    if turns:
        budget = int(max_chars * HINT_TURN_SHARE) - len(EARLIER_HEADER) - 2
        turn_lines = _fit([turn_bullet(t) for t in turns[:HINT_TURNS]], max(0, budget))
    turn_cost = len(EARLIER_HEADER) + 2 + sum(len(line) + 1 for line in turn_lines) if turn_lines else 0
    fact_budget = max_chars - turn_cost - len(KNOWN_HEADER) - 1
    fact_lines = _fit([dated_bullet(m) for m in memories], max(0, fact_budget))
    sections = []
    if fact_lines:
        sections.append("\n".join([KNOWN_HEADER, *fact_lines]))
    if turn_lines:
        sections.append("\n".join([EARLIER_HEADER, *turn_lines]))
    return "\n\n".join(sections)
