"""The OpenAI-compatible wire format, as pure functions: request bodies and reply parsing for chat
completions and embeddings.

The shells (`extraction.llm`, `extraction.embeddings`) send these bodies through the `openai`
client's own transport (`client.post(..., cast_to=httpx2.Response)`: its auth, base URL, timeouts
and status-code errors) and parse the raw reply here. The client's typed layer walks every request
parameter against its TypedDict annotations and builds pydantic models of every reply; skipping
it more than halves the client's CPU (7.5 → 3.3 ms per chat completion and embeddings pair
against testkit/fake_openai.py).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ChatReply", "MalformedReplyError", "parse_chat_reply", "parse_embeddings"]


class MalformedReplyError(ValueError):
    """The provider's reply is not the JSON shape the OpenAI API documents."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatReply:
    """What the extractor needs of one chat completion. `choice` is False when `choices` was empty;
    token counts are None when the provider sent no usage."""

    choice: bool
    content: str | None
    refusal: str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None


def _loads(body: bytes | str, what: str) -> Mapping[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedReplyError(f"the {what} response is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise MalformedReplyError(f"the {what} response is {type(data).__name__}, not a JSON object")
    return data


def _optional_str(value: Any, field: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise MalformedReplyError(f"`{field}` is {type(value).__name__}, not a string")


def _optional_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_chat_reply(body: bytes | str) -> ChatReply:
    """The first choice's content, refusal and finish reason, and the usage, of a chat-completions
    response body. Raises `MalformedReplyError` when the body is not that shape."""
    data = _loads(body, "chat completions")
    choices = data.get("choices")
    if choices is None:
        choices = []
    if not isinstance(choices, list):
        raise MalformedReplyError("`choices` is not a list")
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    prompt_tokens = _optional_int(usage.get("prompt_tokens"))
    completion_tokens = _optional_int(usage.get("completion_tokens"))
    if not choices:
        return ChatReply(
            choice=False,
            content=None,
            refusal=None,
            finish_reason=None,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        raise MalformedReplyError("`choices[0].message` is not an object")
    return ChatReply(
        choice=True,
        content=_optional_str(message.get("content"), "content"),
        refusal=_optional_str(message.get("refusal"), "refusal"),
        finish_reason=_optional_str(first.get("finish_reason"), "finish_reason"),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )


_JSON_NUMBER_TYPES = frozenset({int, float})


def _vector(embedding: Any) -> list[float]:
    if isinstance(embedding, str):  # encoding_format "base64": little-endian float32
        try:
            raw = base64.b64decode(embedding, validate=True)
        except ValueError as exc:
            raise MalformedReplyError(f"an embedding is not valid base64: {exc}") from exc
        if len(raw) % 4:
            raise MalformedReplyError("a base64 embedding is not a whole number of float32 values")
        return np.frombuffer(raw, dtype="<f4").tolist()  # type: ignore[no-any-return]
    # the element types' set in one C pass: an `isinstance` per value cost more than parsing the
    # reply (bools are their own type, so they are refused too)
    if isinstance(embedding, list) and set(map(type, embedding)) <= _JSON_NUMBER_TYPES:
        return [float(x) for x in embedding]
    raise MalformedReplyError("an embedding is neither a list of numbers nor a base64 string")


def parse_embeddings(body: bytes | str) -> list[tuple[int, list[float]]]:
    """(index, vector) per item of an embeddings response body, in the reply's order; base64 and
    float-list encodings both. Raises `MalformedReplyError` when the body is not that shape."""
    data = _loads(body, "embeddings").get("data")
    if not isinstance(data, list):
        raise MalformedReplyError("the embeddings response has no `data` list")
    items: list[tuple[int, list[float]]] = []
    for position, item in enumerate(data):
        if not isinstance(item, dict):
            raise MalformedReplyError("an item of `data` is not an object")
        index = item.get("index", position)
        if not isinstance(index, int) or isinstance(index, bool):
            raise MalformedReplyError("an item's `index` is not an integer")
        items.append((index, _vector(item.get("embedding"))))
    return items


def chat_body(
    *,
    model: str,
    messages: Sequence[Mapping[str, str]],
    response_format: Mapping[str, Any] | None,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    """The JSON body of one chat-completions request (no `response_format` when None)."""
    body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages], **extra}
    if response_format is not None:
        body["response_format"] = dict(response_format)
    return body


def embeddings_body(*, model: str, inputs: Sequence[str], dimensions: int | None) -> dict[str, Any]:
    """The JSON body of one embeddings request: base64 (a quarter of the bytes of float lists,
    and cheaper to decode); `dimensions` only when set."""
    body: dict[str, Any] = {"model": model, "input": list(inputs), "encoding_format": "base64"}
    if dimensions is not None:
        body["dimensions"] = dimensions
    return body
