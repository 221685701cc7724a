"""Retry-After parsing, error classification and the retry schedule."""

from __future__ import annotations

import email.utils

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
