"""Retry-After parsing, error classification and the retry schedule."""

from __future__ import annotations

import asyncio
import email.utils
import time

import httpx2
import openai
import pytest

from extraction.errors import (
    PermanentExtractionError,
    RetryPolicy,
    TransientError,
    TransientExtractionError,
    classify_openai_error,
    retry_after_from_headers,
)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),  # ms wins, as in openai-python
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-1"}, None),
        ({}, None),
    ],
)
def test_retry_after_from_headers(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_from_headers(headers) == expected


def test_retry_after_as_http_date() -> None:
    date = email.utils.formatdate(1_000_030, usegmt=True)
    assert retry_after_from_headers({"Retry-After": date}, now=1_000_000) == pytest.approx(30.0)
    assert retry_after_from_headers({"Retry-After": date}, now=2_000_000) == 0.0


def _status_error(status: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    request = httpx2.Request("POST", "http://llm.test/v1/chat/completions")
    response = httpx2.Response(status, headers=headers or {}, request=request)
    return openai.APIStatusError(f"Error code: {status}", response=response, body=None)


def classify(exc: openai.OpenAIError) -> TransientExtractionError | PermanentExtractionError:
    return classify_openai_error(
        exc, transient=TransientExtractionError, permanent=PermanentExtractionError, what="LLM call"
    )


@pytest.mark.parametrize(
    ("status", "reason"),
    [(429, "rate_limited"), (500, "server_error"), (503, "server_error"), (408, "http_408")],
)
def test_transient_statuses(status: int, reason: str) -> None:
    error = classify(_status_error(status, {"retry-after": "2"}))
    assert isinstance(error, TransientExtractionError)
    assert error.reason == reason
    assert error.retry_after_s == 2.0


@pytest.mark.parametrize(
    ("status", "hint"), [(400, "rejected"), (401, "API_KEY"), (403, "access"), (404, "base URL")]
)
def test_permanent_statuses_name_the_fix(status: int, hint: str) -> None:
    error = classify(_status_error(status))
    assert isinstance(error, PermanentExtractionError)
    assert f"HTTP {status}" in str(error) and hint in str(error)


def test_timeouts_and_connection_errors_are_transient() -> None:
    request = httpx2.Request("POST", "http://llm.test/v1/chat/completions")
    timeout = classify(openai.APITimeoutError(request=request))
    connection = classify(openai.APIConnectionError(request=request))
    assert isinstance(timeout, TransientError) and timeout.reason == "timeout"
    assert isinstance(connection, TransientError) and connection.reason == "connection"


def test_backoff_grows_is_jittered_and_capped() -> None:
    policy = RetryPolicy(wait_initial_s=1.0, wait_max_s=4.0)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (10, 4.0)]:
        wait = policy.wait_for(attempt, None)
        assert ceiling / 2 <= wait <= ceiling


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    policy = RetryPolicy(retry_after_cap_s=5.0)
    assert policy.wait_for(1, 3.0) == 3.0
    assert policy.wait_for(1, 50.0) == 5.0


class _Flaky:
    """An attempt that fails `failures` times with `error`, then returns "ok"."""

    def __init__(self, failures: int, error: BaseException) -> None:
        self.calls = 0
        self.failures = failures
        self.error = error

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


async def test_call_retries_the_listed_failures_then_reraises_the_last() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    policy = RetryPolicy(max_retries=2, wait_initial_s=0.01, wait_max_s=0.02)
    flaky = _Flaky(2, TransientError("busy", reason="server_error"))
    seen: list[BaseException] = []
    assert await policy.call(flaky, retry_on=(TransientError,), sleep=sleep, before_sleep=seen.append) == "ok"
    assert flaky.calls == 3 and len(slept) == 2 and [str(e) for e in seen] == ["busy", "busy"]

    always = _Flaky(10, TransientError("down", reason="server_error"))
    with pytest.raises(TransientError, match="down"):
        await policy.call(always, retry_on=(TransientError,), sleep=sleep)
    assert always.calls == 3

    other = _Flaky(10, ValueError("not listed"))
    with pytest.raises(ValueError):
        await policy.call(other, retry_on=(TransientError,), sleep=sleep)
    assert other.calls == 1


async def test_a_retry_after_over_the_cap_gives_up_at_once_and_a_shorter_one_is_slept() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    policy = RetryPolicy(max_retries=3, retry_after_cap_s=5.0)
    long_wait = _Flaky(1, TransientError("slow down", retry_after_s=60.0))
    with pytest.raises(TransientError) as caught:
        await policy.call(long_wait, retry_on=(TransientError,), sleep=sleep)
    assert caught.value.retry_after_s == 60.0 and long_wait.calls == 1 and slept == []

    short_wait = _Flaky(1, TransientError("slow down", retry_after_s=2.0))
    assert await policy.call(short_wait, retry_on=(TransientError,), sleep=sleep) == "ok"
    assert slept == [2.0]


async def test_the_deadline_stops_retries_that_would_end_past_it() -> None:
    async def sleep(seconds: float) -> None:
        await asyncio.sleep(seconds)

    # 1000 retries allowed, but a pause of ~0.1 s cannot start once 0.25 s are nearly spent
    policy = RetryPolicy(max_retries=1000, wait_initial_s=0.2, wait_max_s=0.2, deadline_s=0.25)
    always = _Flaky(10_000, TransientError("down", reason="server_error"))
    started = time.monotonic()
    with pytest.raises(TransientError, match="down"):
        await policy.call(always, retry_on=(TransientError,), sleep=sleep)
    assert time.monotonic() - started < 0.25 + 0.5
    assert 1 <= always.calls <= 3
