"""The one error the client raises for an answer that is not a success."""

from __future__ import annotations


class MemoryApiError(Exception):
    """The server answered with an error status: `status`, the server's `message` (its `{"error"}`),
    and `retry_after` (seconds) when the server said when to try again."""

    def __init__(
        self, *, status: int, message: str, method: str, path: str, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status
        self.message = message
        self.method = method
        self.path = path
        self.retry_after = retry_after
