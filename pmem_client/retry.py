"""When to try a request again: on 429 and 503, after the server's `Retry-After` (or a short
backoff when it sends none), within a bounded number of attempts and a bounded wait."""

from __future__ import annotations

import email.utils
from collections.abc import Mapping
from dataclasses import dataclass

RETRIED_STATUSES = frozenset({429, 503})
# the longest Retry-After value read: a longer one is no reason to parse further
_MAX_HEADER_CHARS = 64


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How many attempts a request gets in all (1: never retried), the longest single wait the
    client accepts, and the backoff used when the server names no delay."""

    max_attempts: int = 3
    max_wait_s: float = 30.0
    backoff_s: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts: at least 1")
        if self.max_wait_s < 0 or self.backoff_s < 0:
            raise ValueError("max_wait_s and backoff_s: zero or more")


def retry_after_seconds(headers: Mapping[str, str], *, now: float) -> float | None:
    """The delay a `Retry-After` header asks for (seconds, or an HTTP date after `now`); None when
    absent or unreadable."""
    raw = headers.get("retry-after")
    if raw is None or len(raw) > _MAX_HEADER_CHARS:
        return None
    raw = raw.strip()
    if raw.isdigit():
        return float(raw)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def next_wait(*, status: int, retry_after: float | None, attempt: int, policy: RetryPolicy) -> float | None:
    """The wait before attempt `attempt + 1` after an answer of `status` on attempt `attempt`
    (counted from 1); None: do not retry (not a retried status, attempts used up, or the server
    asks for a longer wait than the policy allows)."""
    if status not in RETRIED_STATUSES or attempt >= policy.max_attempts:
        return None
    wait = retry_after if retry_after is not None else policy.backoff_s * 2 ** (attempt - 1)
    return wait if wait <= policy.max_wait_s else None
