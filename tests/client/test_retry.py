"""The retry decision: which answers are retried, after how long, and when the client gives up."""

from __future__ import annotations

import pytest

from pmem_client.retry import RetryPolicy, next_wait, retry_after_seconds

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "5"}, 5.0),
        ({"retry-after": " 0 "}, 0.0),
        ({"retry-after": "Fri, 15 Jan 2027 08:00:30 GMT"}, 30.0),
        ({"retry-after": "Fri, 15 Jan 2027 07:59:00 GMT"}, 0.0),  # a date gone by: at once
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "1" * 100}, None),  # longer than any delay: not read
        ({}, None),
    ],
)
def test_retry_after_is_seconds_or_a_date(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(headers, now=NOW) == expected


def test_only_429_and_503_are_retried_within_the_attempts() -> None:
    policy = RetryPolicy(max_attempts=3, max_wait_s=10, backoff_s=0.5)
    assert next_wait(status=503, retry_after=5.0, attempt=1, policy=policy) == 5.0
    assert next_wait(status=429, retry_after=None, attempt=1, policy=policy) == 0.5
    assert next_wait(status=429, retry_after=None, attempt=2, policy=policy) == 1.0  # doubled
    assert next_wait(status=503, retry_after=5.0, attempt=3, policy=policy) is None  # attempts used
    assert next_wait(status=503, retry_after=11.0, attempt=1, policy=policy) is None  # too long a wait
    for status in (400, 401, 404, 409, 413, 422, 500, 502):
        assert next_wait(status=status, retry_after=1.0, attempt=1, policy=policy) is None
    assert next_wait(status=503, retry_after=1.0, attempt=1, policy=RetryPolicy(max_attempts=1)) is None


def test_a_policy_without_attempts_is_refused() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
