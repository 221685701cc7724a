"""The one place that builds OpenAI-compatible clients (chat completions and embeddings)."""

from __future__ import annotations

import openai

__all__ = ["openai_client"]

# Local OpenAI-compatible servers (vLLM, llama.cpp, Ollama) accept any key; the client insists on one.
PLACEHOLDER_KEY = "unused"


def openai_client(
    *, base_url: str | None, api_key: str | None, timeout_s: float, missing_key: str
) -> openai.AsyncOpenAI:
    """An `AsyncOpenAI` for `base_url` (None: api.openai.com) with the client's own retries off
    (callers retry with their own policy, so nothing is retried twice). Raises ValueError with
    `missing_key` (the fix) when api.openai.com is the target and there is no key."""
    key = api_key or (PLACEHOLDER_KEY if base_url else None)
    if key is None:
        raise ValueError(missing_key)
    return openai.AsyncOpenAI(api_key=key, base_url=base_url, timeout=timeout_s, max_retries=0)
