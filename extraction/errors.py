"""Errors of extraction and embedding, split by what the worker must do with the event.

- `TransientError` (and its `TransientExtractionError` / `TransientEmbeddingError`): the LLM or
  embedding provider was rate limited (429), failing (5xx), slow (timeout) or unreachable. The
  worker nacks with a delay (`retry_after_s` when the provider said how long) and, after the
  configured number of deliveries, dead-letters the event.
- `PermanentError` (`PermanentExtractionError` / `PermanentEmbeddingError`): retrying the same event
  cannot help (400/401/403/404, output that stayed malformed after the retries, a vector of the
  wrong dimension). The worker dead-letters the event at once with the message as the reason.

`classify_openai_error` maps the `openai` client's exceptions onto these; `RetryPolicy` is the
in-process retry schedule (a tenacity `AsyncRetrying`) that both the LLM extractor and the OpenAI
embedder use before giving up and raising one of these.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
)
from tenacity.stop import stop_base

from extraction.types import TokenUsage

if TYPE_CHECKING:
    import openai

__all__ = [
    "EmbeddingError",
    "ExtractionError",
    "PermanentEmbeddingError",
    "PermanentError",
    "PermanentExtractionError",
    "PromptBudgetError",
    "RetryPolicy",
    "TransientEmbeddingError",
    "TransientError",
    "TransientExtractionError",
    "classify_openai_error",
    "retry_after_from_headers",
]


class PmemProviderError(Exception):
    """Base of every error raised by extraction or embedding."""

    def __init__(self, message: str, *, usage: TokenUsage | None = None) -> None:
        super().__init__(message)
        # Tokens already spent by failed attempts, so the worker can still count them.
        self.usage = usage or TokenUsage()


class TransientError(PmemProviderError):
    """Retry later: rate limit, 5xx, timeout, connection error. `retry_after_s` is the provider's hint."""

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: float | None = None,
        reason: str = "transient",
        usage: TokenUsage | None = None,
    ) -> None:
        super().__init__(message, usage=usage)
        self.retry_after_s = retry_after_s
        # short label for metrics: rate_limited, server_error, timeout, connection, http_<status>
        self.reason = reason


class PermanentError(PmemProviderError):
    """Retrying the same input will not help; dead-letter with this message as the reason."""


class ExtractionError(PmemProviderError):
    """Base of the extraction (LLM) errors."""


class EmbeddingError(PmemProviderError):
    """Base of the embedding errors."""


class TransientExtractionError(TransientError, ExtractionError):
    """The LLM call failed in a way that may succeed later (429, 5xx, timeout, connection)."""


class PermanentExtractionError(PermanentError, ExtractionError):
    """The LLM call cannot succeed for this event (4xx, persistently malformed output)."""


class PromptBudgetError(PermanentExtractionError):
    """The fixed part of the prompt alone does not fit `PMEM_LLM_MAX_INPUT_TOKENS`."""


class TransientEmbeddingError(TransientError, EmbeddingError):
    """The embeddings call failed in a way that may succeed later."""


class PermanentEmbeddingError(PermanentError, EmbeddingError):
    """The embeddings call cannot succeed as configured (4xx, wrong dimension, missing package)."""


def retry_after_from_headers(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait according to `retry-after-ms` or `retry-after` (seconds or HTTP date); None if absent.

    Header names are matched case-insensitively; negative or unparsable values give None.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = lowered.get(header)
        if raw is None:
            continue
        try:
            delay = float(raw) / divisor
        except ValueError:
            continue
        return delay if math.isfinite(delay) and delay >= 0 else None
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    parsed = email.utils.parsedate_tz(raw)
    if parsed is None:
        return None
    delay = float(email.utils.mktime_tz(parsed)) - (time.time() if now is None else now)
    return max(delay, 0.0)


_R = TypeVar("_R")
_T = TypeVar("_T", bound=TransientError)
_P = TypeVar("_P", bound=PermanentError)

# Statuses worth retrying: timeout, conflict/lock (OpenAI's own client retries 409), too early, rate limit.
_TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})


def classify_openai_error(
    exc: openai.OpenAIError,
    *,
    transient: type[_T],
    permanent: type[_P],
    what: str,
) -> _T | _P:
    """Map an `openai` exception to a transient or permanent error of the given kinds.

    `what` names the call for the message, e.g. "LLM call to http://host/v1 (model gpt-4o-mini)".
    """
    import openai  # a core dependency; imported here so this module stays cheap to import

    if isinstance(exc, openai.APITimeoutError):
        return transient(
            f"{what} timed out; raise the timeout if the provider is just slow", reason="timeout"
        )
    if isinstance(exc, openai.APIConnectionError):
        return transient(
            f"{what} could not connect: {exc}; check the base URL and that the server is up",
            reason="connection",
        )
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry_after = retry_after_from_headers(dict(exc.response.headers.items()))
        detail = _short(str(exc.message))
        if status in _TRANSIENT_STATUSES or status >= 500:
            reason = (
                "rate_limited" if status == 429 else "server_error" if status >= 500 else f"http_{status}"
            )
            return transient(
                f"{what} failed with HTTP {status}: {detail}", retry_after_s=retry_after, reason=reason
            )
        fix = {
            401: "check PMEM_LLM_API_KEY / PMEM_EMBEDDING_API_KEY",
            403: "the key lacks access to this model or endpoint",
            404: "check the base URL (it must end in /v1 for most providers) and the model name",
        }.get(status, "the request was rejected as invalid; see the provider's message")
        return permanent(f"{what} failed with HTTP {status}: {detail}; {fix}")
    return permanent(f"{what} failed: {type(exc).__name__}: {_short(str(exc))}")


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """In-process retry schedule: exponential backoff with jitter, or the provider's Retry-After.

    `max_retries` counts retries after the first attempt. A Retry-After longer than
    `retry_after_cap_s` is not slept on here: the call gives up at once so the worker can nack the
    event with that delay instead of holding a slot. `deadline_s` bounds the attempts and pauses
    together: no attempt starts after it, and no pause would end past it (the worker sets it to
    `PMEM_EVENT_TIMEOUT_S`, beyond which the event is abandoned anyway).
    """

    max_retries: int = 3
    wait_initial_s: float = 0.5
    wait_max_s: float = 20.0
    retry_after_cap_s: float = 30.0
    deadline_s: float | None = None

    def wait_for(self, attempt_number: int, retry_after_s: float | None) -> float:
        """Seconds to sleep after failed attempt `attempt_number` (1-based)."""
        if retry_after_s is not None:
            return min(retry_after_s, self.retry_after_cap_s)
        backoff = min(self.wait_initial_s * (2 ** (attempt_number - 1)), self.wait_max_s)
        # Full jitter on the upper half keeps many workers from retrying in lock-step.
        return float(backoff / 2 + random.uniform(0, backoff / 2))

    def retrying(
        self,
        *,
        retry_on: tuple[type[BaseException], ...],
        sleep: Callable[[float], Awaitable[None]],
        before_sleep: Callable[[BaseException], None] | None = None,
    ) -> AsyncRetrying:
        """A tenacity `AsyncRetrying` on this schedule: it retries `retry_on` failures, calls
        `before_sleep(failure)` before each pause, and re-raises the last failure when it stops."""

        def wait(state: RetryCallState) -> float:
            return self.wait_for(state.attempt_number, _retry_after_of(state))

        stop: stop_base = stop_after_attempt(self.max_retries + 1) | _StopOnLongRetryAfter(
            self.retry_after_cap_s
        )
        if self.deadline_s is not None:
            stop = stop | stop_before_delay(self.deadline_s)

        def notify(state: RetryCallState) -> None:
            failure = state.outcome.exception() if state.outcome is not None else None
            if before_sleep is not None and failure is not None:
                before_sleep(failure)

        return AsyncRetrying(
            stop=stop,
            wait=wait,
            retry=retry_if_exception_type(retry_on),
            sleep=sleep,
            reraise=True,
            before_sleep=notify,
        )

    async def call(
        self,
        attempt: Callable[[], Awaitable[_R]],
        *,
        retry_on: tuple[type[BaseException], ...],
        sleep: Callable[[float], Awaitable[None]],
        before_sleep: Callable[[BaseException], None] | None = None,
    ) -> _R:
        """`attempt()`'s result, retried on this schedule (`retrying`); the last failure is
        raised, at once when a Retry-After exceeds `retry_after_cap_s`."""
        retrying = self.retrying(retry_on=retry_on, sleep=sleep, before_sleep=before_sleep)
        return await retrying(attempt)


class _StopOnLongRetryAfter(stop_base):
    """Stop when the provider asks for a longer wait than we are willing to sleep in-process."""

    def __init__(self, cap_s: float) -> None:
        self._cap_s = cap_s

    def __call__(self, retry_state: RetryCallState) -> bool:
        retry_after = _retry_after_of(retry_state)
        return retry_after is not None and retry_after > self._cap_s


def _retry_after_of(state: RetryCallState) -> float | None:
    outcome = state.outcome
    if outcome is None or not outcome.failed:
        return None
    exc = outcome.exception()
    return exc.retry_after_s if isinstance(exc, TransientError) else None
