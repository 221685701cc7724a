"""What the clients share around httpx: headers, the answer's decoding into a value or a
`MemoryApiError`, and the retry decision."""

from __future__ import annotations

import time
from typing import Any

import httpx

from pmem_client import __version__
from pmem_client.calls import Call
from pmem_client.errors import MemoryApiError
from pmem_client.retry import RetryPolicy, next_wait, retry_after_seconds

# the most of a non-JSON error body quoted in the error's message
_MAX_QUOTED_CHARS = 300
DEFAULT_TIMEOUT_S = 10.0


def headers(credential: str) -> dict[str, str]:
    """The headers of every request: the bearer credential (a service key `pmem_sk_…` or a
    person's JWT) and the client's name."""
    if not credential:
        raise ValueError("a credential is required: a service key (pmem keys create) or a person's JWT")
    return {
        "Authorization": f"Bearer {credential}",
        "Accept": "application/json",
        "User-Agent": f"persona-memory-client-python/{__version__}",
    }


def request_kwargs(call: Call[Any]) -> dict[str, Any]:
    """httpx's arguments for a call."""
    kwargs: dict[str, Any] = {"params": dict(call.params)}
    if call.body is not None:
        kwargs["json"] = call.body
    return kwargs


def error_of(call: Call[Any], response: httpx.Response) -> MemoryApiError:
    """The error an unsuccessful answer stands for, with the server's message."""
    message = response.reason_phrase or "error"
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip()
        if text:
            message = text[:_MAX_QUOTED_CHARS]
    else:
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            message = body["error"]
    return MemoryApiError(
        status=response.status_code,
        message=message,
        method=call.method,
        path=call.path,
        retry_after=retry_after_seconds(response.headers, now=time.time()),
    )


def decoded(call: Call[Any], response: httpx.Response) -> Any:
    """A successful answer's JSON (None for 204); MemoryApiError for any other status."""
    if response.status_code == 204:
        return None
    if 200 <= response.status_code < 300:
        return response.json()
    raise error_of(call, response)


def wait_before_retry(
    call: Call[Any], response: httpx.Response, attempt: int, policy: RetryPolicy
) -> float | None:
    """Seconds to wait before trying `call` again after `response` on attempt `attempt`; None: no
    retry."""
    retry_after = retry_after_seconds(response.headers, now=time.time())
    return next_wait(status=response.status_code, retry_after=retry_after, attempt=attempt, policy=policy)
