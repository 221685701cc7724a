"""The one place that builds OpenAI-compatible clients (chat completions and embeddings) and sends
their requests."""

from __future__ import annotations

from typing import Any

import httpx2
import openai

__all__ = ["openai_client", "post_raw"]

# Local OpenAI-compatible servers (vLLM, llama.cpp, Ollama) accept any key; the client insists on one.
PLACEHOLDER_KEY = "unused"


def openai_client(
    *, base_url: str | None, api_key: str | None, timeout_s: float, missing_key: str
) -> openai.AsyncOpenAI:
    """An `AsyncOpenAI` for `base_url` (None: api.openai.com) with the client's own retries off
    (callers retry with their own policy, so nothing is retried twice), on the aiohttp transport
    (a third less CPU per request than the default httpx one; bench/README.md). Raises ValueError
    with `missing_key` (the fix) when api.openai.com is the target and there is no key."""
    key = api_key or (PLACEHOLDER_KEY if base_url else None)
    if key is None:
        raise ValueError(missing_key)
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=base_url,
        timeout=timeout_s,
        max_retries=0,
        http_client=openai.DefaultAioHttpClient(timeout=timeout_s),
    )


async def post_raw(client: openai.AsyncOpenAI, path: str, body: dict[str, Any]) -> bytes:
    """POST `body` to `path` through the client's transport (auth, base URL, timeout, and its
    exceptions for connection errors and non-2xx statuses) and return the raw reply body, for
    `extraction.wire` to parse."""
    response = await client.post(path, body=body, cast_to=httpx2.Response)
    return response.content
