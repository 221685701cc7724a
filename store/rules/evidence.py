"""A memory's evidence (pure): the messages it comes from as `role: text` lines, one a message, each
message's text on one line and cut at `EVIDENCE_MESSAGE_CHARS` (the worker writes them,
`worker.planning.resolve_evidence`; the hint quotes them, recall and forgetting match turns by
them)."""

from __future__ import annotations

from dataclasses import dataclass

# what a memory's evidence keeps of each message it cites (its first characters, on one line)
EVIDENCE_MESSAGE_CHARS = 600
_ROLES = ("user", "assistant")


@dataclass(frozen=True, slots=True)
class SaidLine:
    """One line of an evidence: who said it and what (as the evidence holds it)."""

    role: str
    text: str

    @property
    def line(self) -> str:
        """The line as the evidence holds it."""
        return f"{self.role}: {self.text}"


def quoted_text(text: str) -> str:
    """A message's text as an evidence line holds it: whitespace collapsed, cut at
    `EVIDENCE_MESSAGE_CHARS`."""
    return " ".join(text.split())[:EVIDENCE_MESSAGE_CHARS]


def evidence_lines(evidence: str | None) -> list[SaidLine]:
    """The `role: text` lines of an evidence (a line of another shape is skipped)."""
    lines: list[SaidLine] = []
    for raw in (evidence or "").split("\n"):
        role, sep, text = raw.partition(": ")
        if sep and role in _ROLES and text.strip():
            lines.append(SaidLine(role=role, text=text))
    return lines
