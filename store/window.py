"""The short-term conversation window: the last N messages of a room, passed
to the LLM as history. Pure and immutable; persistence is `HistoryStore` (append, last N)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from store.model import ChatMessage


@dataclass(frozen=True, kw_only=True, slots=True)
class Window:
    """The last `max_size` messages of one room, oldest first."""

    room_id: str
    messages: tuple[ChatMessage, ...] = ()
    max_size: int = 20

    def __post_init__(self) -> None:
        if self.max_size < 1:
            raise ValueError(f"window max_size must be at least 1, got {self.max_size}")
        # accept any sequence, keep an immutable tuple of at most max_size
        object.__setattr__(self, "messages", tuple(self.messages)[-self.max_size :])

    def append(self, message: ChatMessage) -> Window:
        """A new window with `message` added, dropping the oldest beyond `max_size`."""
        return Window(
            room_id=self.room_id, messages=(*self.messages, message)[-self.max_size :], max_size=self.max_size
        )

    def extend(self, messages: Iterable[ChatMessage]) -> Window:
        """A new window with all `messages` appended in order."""
        return Window(
            room_id=self.room_id,
            messages=(*self.messages, *messages)[-self.max_size :],
            max_size=self.max_size,
        )

    def to_llm_messages(self) -> list[dict[str, str]]:
        """Chat-completions messages (`{"role", "content"}`), oldest first."""
        return [{"role": m.role, "content": m.content} for m in self.messages]
