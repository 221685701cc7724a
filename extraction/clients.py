"""The one place that talks HTTP to OpenAI-compatible APIs (chat completions and embeddings).

`ProviderClient` POSTs a JSON body over one aiohttp session and returns the raw reply for
`extraction.wire` to parse. Its failures are the `openai` SDK's exception types
(`APIConnectionError`, `APITimeoutError`, `APIStatusError` and its per-status subclasses), so
`extraction.errors.classify_openai_error` and callers see the same taxonomy as with the SDK's
client. The SDK's own request stack (request options, httpx2 models, its aiohttp adapter) cost
about a millisecond of CPU per call for headers we do not need (bench/README.md, "The HTTP calls
without the SDK's request stack").
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.parse
import urllib.request
from typing import Any

import aiohttp
import httpx2
import openai
import yarl

__all__ = ["ProviderClient", "env_proxy", "provider_client", "status_error"]

# Local OpenAI-compatible servers (vLLM, llama.cpp, Ollama) accept any key; api.openai.com needs one.
PLACEHOLDER_KEY = "unused"
OPENAI_BASE_URL = "https://api.openai.com/v1"

_STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


class ProviderClient:
    """POSTs JSON to one OpenAI-compatible base URL; one aiohttp session, made on first use."""

    def __init__(self, *, base_url: str, api_key: str, timeout_s: float) -> None:
        """`timeout_s` bounds each request as a whole (connect, send, wait and read)."""
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "persona-memory",
        }
        # read from the environment as the SDK's client does
        for header, variable in (
            ("OpenAI-Organization", "OPENAI_ORG_ID"),
            ("OpenAI-Project", "OPENAI_PROJECT_ID"),
        ):
            if os.environ.get(variable):
                self._headers[header] = os.environ[variable]
        self._proxy = env_proxy(self.base_url)
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, yarl.URL] = {}
        self._timeouts: dict[float | None, aiohttp.ClientTimeout] = {}

    async def post(self, path: str, body: dict[str, Any], *, timeout_s: float | None = None) -> bytes:
        """POST `body` as JSON to `path`; the reply body of a 2xx answer. Raises the openai SDK's
        `APITimeoutError`, `APIConnectionError` or `APIStatusError` (by status) otherwise."""
        url = self.base_url + path
        total = self.timeout_s if timeout_s is None else timeout_s
        # parsed once: aiohttp parses a str URL on every request (a few percent of its CPU here)
        target = self._urls.get(url) or self._urls.setdefault(url, yarl.URL(url))
        timeout = self._timeouts.get(total) or self._timeouts.setdefault(
            total, aiohttp.ClientTimeout(total=total)
        )
        try:
            async with self._open().post(
                target,
                data=json.dumps(body).encode(),
                headers=self._headers,
                timeout=timeout,
                proxy=self._proxy,
            ) as response:
                content = await response.read()
                if response.status < 300:
                    return content
                headers = list(response.headers.items())
                status = response.status
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise openai.APITimeoutError(request=httpx2.Request("POST", url)) from exc
        except aiohttp.ClientError as exc:
            raise openai.APIConnectionError(
                message=f"Connection error: {type(exc).__name__}: {exc}", request=httpx2.Request("POST", url)
            ) from exc
        raise status_error(
            httpx2.Response(status, headers=headers, content=content, request=httpx2.Request("POST", url))
        )

    def _open(self) -> aiohttp.ClientSession:
        # made inside the running loop (aiohttp requires it); not `trust_env`, which reads the
        # environment and ~/.netrc (in a thread) on every request: the proxy is resolved once
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        """Close the session (a later `post` opens a new one)."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def env_proxy(base_url: str) -> str | None:
    """The proxy that HTTP(S)_PROXY / NO_PROXY give for `base_url`, as the SDK's client would use."""
    url = urllib.parse.urlsplit(base_url)
    if urllib.request.proxy_bypass(url.hostname or ""):
        return None
    return urllib.request.getproxies().get(url.scheme)


def status_error(response: httpx2.Response) -> openai.APIStatusError:
    """The openai SDK's exception for a non-2xx `response`, with the provider's message, as the
    SDK's client raises it ("Error code: 429 - Rate limit reached")."""
    message = f"Error code: {response.status_code}"
    text = response.text.strip()
    body: object = text
    with contextlib.suppress(ValueError):
        body = json.loads(text)
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"]:
        message += f" - {error['message']}"
    kind = _STATUS_ERRORS.get(response.status_code)
    if kind is None:
        kind = openai.InternalServerError if response.status_code >= 500 else openai.APIStatusError
    return kind(message, response=response, body=error)


def provider_client(
    *, base_url: str | None, api_key: str | None, timeout_s: float, missing_key: str
) -> ProviderClient:
    """A `ProviderClient` for `base_url` (None: `OPENAI_BASE_URL` or api.openai.com). Raises
    ValueError with `missing_key` (the fix) when api.openai.com is the target and there is no key."""
    key = api_key or (PLACEHOLDER_KEY if base_url else None)
    if key is None:
        raise ValueError(missing_key)
    return ProviderClient(
        base_url=base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL,
        api_key=key,
        timeout_s=timeout_s,
    )
