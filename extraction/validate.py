"""Parse and validate LLM output against the contract (pure).

Contract (DESIGN.md "LLM output contract"):

    {"memories": [{"key": "home city", "value": "Lives in Lyon", "confidence": 0.9, "scope": "user"}]}

`parse_output` raises `MalformedOutputError` when the reply is not that shape at all (not JSON,
no `memories` list): the LLM extractor re-asks, then gives up with a permanent error. Individual
items that break a rule become `Rejection`s with a reason and never reach the store: a key outside
2–6 words, an empty or over-long value, a confidence outside 0–1, a scope not allowed for this
event. Extra fields (an `owner_id`, a `user_id` …) are ignored: the worker, not the LLM, decides
owners.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from extraction.redact import is_secret_key, redact
from extraction.types import Candidate, Rejection
from store.types import SCOPES, Scope

__all__ = [
    "MalformedOutputError",
    "ValidationLimits",
    "merge_candidates",
    "normalise_key",
    "output_json_schema",
    "parse_output",
    "validate_items",
]


class MalformedOutputError(ValueError):
    """The LLM reply is not the contract's shape (not JSON, or no `memories` list)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidationLimits:
    """Bounds applied to each candidate. The key word range follows the seed's "2–6 words"."""

    min_key_words: int = 2
    max_key_words: int = 6
    max_key_chars: int = 80
    max_value_chars: int = 500
    max_items: int = 100  # per LLM reply; more is a runaway generation, the rest is rejected
    raw_chars: int = 300  # how much of a rejected item is kept for logs (redacted)


DEFAULT_LIMITS = ValidationLimits()

_SEPARATORS = re.compile(r"[\s_]+")
_EDGE_PUNCTUATION = " \t\n\"'`“”‘’.,;:!?*#-"


def normalise_key(key: str) -> str:
    """Lowercase, underscores to spaces, collapse whitespace, strip quotes/punctuation at the ends."""
    return _SEPARATORS.sub(" ", key.lower()).strip(_EDGE_PUNCTUATION).strip()


def output_json_schema(allowed_scopes: Sequence[Scope]) -> dict[str, Any]:
    """JSON schema of the contract for structured output (strict mode: all fields required, closed)."""
    return {
        "type": "object",
        "properties": {
            "memories": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "key": {"type": "string"},
                        "value": {"type": "string"},
                        "confidence": {"type": "number"},
                        "scope": {"type": "string", "enum": list(allowed_scopes)},
                    },
                    "required": ["key", "value", "confidence", "scope"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["memories"],
        "additionalProperties": False,
    }


_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


def parse_output(
    content: str | None,
    allowed_scopes: Sequence[Scope],
    *,
    limits: ValidationLimits = DEFAULT_LIMITS,
) -> tuple[list[Candidate], list[Rejection]]:
    """Parse one LLM reply and validate its items; raises `MalformedOutputError` on a broken shape."""
    if content is None or not content.strip():
        raise MalformedOutputError("the reply is empty; expected a JSON object with a 'memories' list")
    text = content.strip()
    fenced = _FENCE.match(text)  # JSON mode on some providers still wraps the object in a fence
    if fenced:
        text = fenced.group(1)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedOutputError(f"the reply is not valid JSON ({exc.msg} at char {exc.pos})") from exc
    if not isinstance(data, dict):
        raise MalformedOutputError(f"the reply is a JSON {type(data).__name__}, expected an object")
    items = data.get("memories")
    if not isinstance(items, list):
        raise MalformedOutputError("the reply has no 'memories' list")
    return validate_items(items, allowed_scopes, limits=limits)


def validate_items(
    items: Iterable[object],
    allowed_scopes: Sequence[Scope],
    *,
    limits: ValidationLimits = DEFAULT_LIMITS,
) -> tuple[list[Candidate], list[Rejection]]:
    """Validate decoded items; each becomes a normalised `Candidate` or a `Rejection` with a reason."""
    candidates: list[Candidate] = []
    rejections: list[Rejection] = []
    for index, item in enumerate(items):
        if index >= limits.max_items:
            rejections.append(_reject(f"more than {limits.max_items} memories in one reply", item, limits))
            continue
        result = _validate_item(item, allowed_scopes, limits)
        if isinstance(result, Candidate):
            candidates.append(result)
        else:
            rejections.append(result)
    return candidates, rejections


def _validate_item(
    item: object, allowed_scopes: Sequence[Scope], limits: ValidationLimits
) -> Candidate | Rejection:
    if not isinstance(item, Mapping):
        return _reject("item is not an object", item, limits)
    fields = cast(Mapping[str, object], item)
    key_raw, value_raw = fields.get("key"), fields.get("value")
    confidence_raw, scope_raw = fields.get("confidence"), fields.get("scope")

    if not isinstance(key_raw, str):
        return _reject("key missing or not a string", item, limits)
    key = normalise_key(key_raw)
    words = len(key.split())
    if not limits.min_key_words <= words <= limits.max_key_words:
        return _reject(
            f"key has {words} words, expected {limits.min_key_words}–{limits.max_key_words}", item, limits
        )
    if len(key) > limits.max_key_chars:
        return _reject(f"key longer than {limits.max_key_chars} characters", item, limits)

    if not isinstance(value_raw, str) or not value_raw.strip():
        return _reject("value missing or empty", item, limits)
    value = " ".join(value_raw.split())
    if len(value) > limits.max_value_chars:
        return _reject(f"value longer than {limits.max_value_chars} characters", item, limits)

    # bool is an int subclass; "true" is not a confidence
    if isinstance(confidence_raw, bool) or not isinstance(confidence_raw, int | float):
        return _reject("confidence missing or not a number", item, limits)
    confidence = float(confidence_raw)
    if not math.isfinite(confidence) or not 0.0 <= confidence <= 1.0:
        return _reject("confidence outside 0–1", item, limits)

    if scope_raw not in SCOPES:
        return _reject(f"unknown scope {str(scope_raw)[:40]!r}", item, limits)
    scope: Scope = scope_raw
    if scope not in allowed_scopes:
        return _reject(
            f"scope {scope!r} not allowed for this event (allowed: {', '.join(allowed_scopes)})", item, limits
        )

    return Candidate(key=key, value=value, confidence=confidence, scope=scope)


def _reject(reason: str, item: object, limits: ValidationLimits) -> Rejection:
    if isinstance(item, Mapping) and isinstance(item.get("key"), str) and is_secret_key(item["key"]):
        # {"key": "password", "value": "hunter2"}: no text pattern sees the value as a secret
        item = {**item, "value": "[REDACTED:secret]"}
    try:
        raw = json.dumps(item, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        raw = repr(item)
    # rejected items end up in logs: never let a secret through that way either
    return Rejection(reason=reason, raw=redact(raw[: limits.raw_chars * 4])[0][: limits.raw_chars])


def merge_candidates(candidates: Iterable[Candidate]) -> list[Candidate]:
    """One candidate per (scope, key): the later one wins (later in the conversation is more current).

    Order follows each key's first appearance so the output is stable.
    """
    merged: dict[tuple[Scope, str], Candidate] = {}
    for candidate in candidates:
        merged[(candidate.scope, candidate.key)] = candidate
    return list(merged.values())
