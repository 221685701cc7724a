"""A one-line progress bar for long evaluation runs."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class Progress:
    """A one-line progress bar on a stream (redrawn with \\r on a terminal, a line per 10% otherwise)."""

    total: int
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    width: int = 30
    done: int = 0
    label: str = ""
    _last_draw: float = 0.0
    _last_decile: int = -1

    def update(self, n: int = 1, label: str | None = None) -> None:
        """Advance by `n` (and optionally relabel); redraws at most every 0.1 s."""
        self.done = min(self.total, self.done + n)
        if label is not None:
            self.label = label
        now = time.monotonic()
        if self.stream.isatty():
            if now - self._last_draw >= 0.1 or self.done == self.total:
                self._last_draw = now
                self.stream.write("\r" + self.render())
                self.stream.flush()
        else:
            decile = (10 * self.done) // max(1, self.total)
            if decile != self._last_decile:
                self._last_decile = decile
                self.stream.write(self.render() + "\n")
                self.stream.flush()

    def render(self) -> str:
        """`[#######.......]  42% 1234/2900 label`."""
        fraction = self.done / self.total if self.total else 1.0
        filled = int(self.width * fraction)
        bar = "#" * filled + "." * (self.width - filled)
        return f"[{bar}] {100 * fraction:3.0f}% {self.done}/{self.total} {self.label}"[:160].ljust(100)

    def close(self) -> None:
        """Finish the line on a terminal."""
        if self.stream.isatty():
            self.stream.write("\r" + self.render() + "\n")
            self.stream.flush()
