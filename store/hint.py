"""The memory hint injected into the system prompt (seed §6): one bullet per memory, highest
priority first, capped at about 1500 tokens (~6000 characters) without cutting a bullet. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from store.types import SCOPE_PRIORITY, Memory, RecallHit

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
