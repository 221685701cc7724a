"""The one place that builds clients of OpenAI-compatible APIs (chat completions and embeddings).

`provider_client` makes an `openai.AsyncOpenAI` (an `openai.AsyncAzureOpenAI` for an Azure OpenAI
endpoint): its authentication, base URL, organisation and project headers, proxies from the
environment, Azure deployment paths, and its status-code exceptions. `max_retries=0`:
`extraction.errors.RetryPolicy` owns the retries, so nothing is retried twice.

The transport is the SDK's aiohttp one (`openai.DefaultAioHttpClient`): it costs about half the
client CPU per call of the SDK's default httpx2 transport, whose connection pool polls every idle
connection on each request (bench/http_client_cpu.py; about 1.4 ms per event of two calls).

`ProviderClient.post` sends a JSON body through the SDK's `post(..., cast_to=httpx2.Response)` and
returns the raw reply for `extraction.wire` to parse: the SDK's typed layer (walking each request
against its TypedDicts and building pydantic models of each reply) is skipped, not its transport.
"""

from __future__ import annotations

import asyncio
import os
import urllib.parse
from collections.abc import Callable
from typing import Any

import aiohttp
import httpx2
import openai

__all__ = ["ProviderClient", "provider_client", "sdk_client"]

# Local OpenAI-compatible servers (vLLM, llama.cpp, Ollama) accept any key; api.openai.com needs one.
PLACEHOLDER_KEY = "unused"
OPENAI_BASE_URL = "https://api.openai.com/v1"
# The API version an Azure OpenAI endpoint is called with unless OPENAI_API_VERSION says otherwise.
AZURE_API_VERSION = "2024-10-21"


class ProviderClient:
    """POSTs JSON to one OpenAI-compatible API through an `openai` SDK client (a new one made by
    `make_sdk` after `close`)."""

    def __init__(self, make_sdk: Callable[[], openai.AsyncOpenAI], *, timeout_s: float) -> None:
        """`make_sdk()` must give a client that does not retry by itself (`max_retries=0`);
        `timeout_s` bounds each request as a whole (connect, send, wait and read), which the
        SDK's per-phase timeouts alone do not."""
        self._make_sdk = make_sdk
        self._sdk: openai.AsyncOpenAI | None = make_sdk()
        self.base_url = str(self._sdk.base_url).rstrip("/")
        self.timeout_s = timeout_s

    @property
    def sdk(self) -> openai.AsyncOpenAI:
        """The SDK client the requests go through (made now if there is none open)."""
        if self._sdk is None or self._sdk.is_closed():
            self._sdk = self._make_sdk()
        return self._sdk

    @property
    def is_open(self) -> bool:
        """Whether the SDK client is open (not closed since it was made)."""
        return self._sdk is not None and not self._sdk.is_closed()

    async def post(self, path: str, body: dict[str, Any], *, timeout_s: float | None = None) -> bytes:
        """POST `body` as JSON to `path`; the reply body of a 2xx answer. Raises the SDK's
        `APITimeoutError`, `APIConnectionError` or `APIStatusError` (by status) otherwise."""
        total = self.timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(total):
                response = await self.sdk.post(
                    path, body=body, cast_to=httpx2.Response, options={"timeout": total}
                )
                return await response.aread()
        except TimeoutError as exc:
            raise openai.APITimeoutError(request=httpx2.Request("POST", self.base_url + path)) from exc
        except openai.APITimeoutError as exc:
            if _dropped_connection(exc):
                raise openai.APIConnectionError(
                    message=f"Connection error: {exc.__cause__!r}", request=exc.request
                ) from exc
            raise

    async def close(self) -> None:
        """Close the SDK client's connections (a later `post` makes a new client)."""
        if self._sdk is not None:
            await self._sdk.close()
            self._sdk = None


def _dropped_connection(exc: BaseException) -> bool:
    """True when a "timeout" is really a dropped or refused connection: the aiohttp transport
    reports every `aiohttp.ClientConnectionError` (a server hanging up included) as a connect
    timeout; its real timeouts are `ServerTimeoutError` / `SocketTimeoutError`."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(
            cause, aiohttp.ServerTimeoutError | aiohttp.SocketTimeoutError
        ):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _is_azure(base_url: str) -> bool:
    host = urllib.parse.urlsplit(base_url).hostname or ""
    return host.endswith((".openai.azure.com", ".cognitiveservices.azure.com"))


def sdk_client(*, base_url: str, api_key: str, timeout_s: float) -> openai.AsyncOpenAI:
    """The SDK's client for `base_url` on the aiohttp transport, without retries of its own: an
    `AsyncAzureOpenAI` for an Azure OpenAI endpoint (`OPENAI_API_VERSION` or a recent version)."""
    transport = openai.DefaultAioHttpClient(timeout=timeout_s)
    if _is_azure(base_url):
        return openai.AsyncAzureOpenAI(
            azure_endpoint=base_url,
            api_key=api_key,
            api_version=os.environ.get("OPENAI_API_VERSION") or AZURE_API_VERSION,
            timeout=timeout_s,
            max_retries=0,
            http_client=transport,
        )
    return openai.AsyncOpenAI(
        base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0, http_client=transport
    )


def provider_client(
    *, base_url: str | None, api_key: str | None, timeout_s: float, missing_key: str
) -> ProviderClient:
    """A `ProviderClient` on `sdk_client` for `base_url` (None: `OPENAI_BASE_URL` or
    api.openai.com). Raises ValueError with `missing_key` (the fix) when api.openai.com is the
    target and there is no key."""
    key = api_key or (PLACEHOLDER_KEY if base_url else None)
    if key is None:
        raise ValueError(missing_key)
    url = base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
    return ProviderClient(
        lambda: sdk_client(base_url=url, api_key=key, timeout_s=timeout_s), timeout_s=timeout_s
    )
