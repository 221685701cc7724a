"""Parse and validate LLM output against the contract (pure).

The contract:

    {"memories": [{"key": "home city", "value": "Lives in Lyon", "confidence": 0.9, "scope": "user",
                   "evidence": [3]}]}

`parse_output` raises `MalformedOutputError` when the reply is not that shape at all (not JSON,
no `memories` list): the LLM extractor re-asks, then gives up with a permanent error. Individual
items that break a rule become `Rejection`s with a bounded code and a reason and never reach the
store: an empty key, a key over 6 words or over 80 characters (the prompt asks for 2–6 words, but a
one-word key such as "diet" is a fine key), an empty or over-long value, a confidence outside
0–1, a scope not allowed for this event. Extra fields (an `owner_id`, a `user_id` …) are ignored:
the worker, not the LLM, decides owners. Characters no database can store (NUL, lone surrogates)
are removed from keys and values first, so such a reply costs nothing but those characters.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from extraction.redact import is_secret_key, redact, screen_candidate
from extraction.types import Candidate, Rejection, RejectionCode
from store.model import SCOPES, Scope
from store.rules.admission import has_content
from store.rules.keys import normalize_key, storable_text, storable_value

__all__ = [
    "REPLY_CHARS_PER_TOKEN",
    "MalformedOutputError",
    "ValidationLimits",
    "bound_schema",
    "contract_schema",
    "evidence_numbers",
    "merge_candidates",
    "normalize_key",
    "output_json_schema",
    "parse_output",
    "reply_chars",
    "reply_tokens",
    "validate_items",
    "without_string_lengths",
]


class MalformedOutputError(ValueError):
    """The LLM reply is not the contract's shape (not JSON, or no `memories` list)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidationLimits:
    """Bounds applied to each candidate. The prompt asks for 2–6 word keys; 1–6 are valid.

    The JSON schema sent as `response_format` carries the same bounds (`output_json_schema`), so a
    grammar-constrained server cannot loop inside a string or an array past what we would accept.
    """

    min_key_words: int = 1
    max_key_words: int = 6
    max_key_chars: int = 80
    max_value_chars: int = 500
    max_items: int = 100  # per LLM reply; more is a runaway generation, the rest is rejected
    max_list_items: int = 20  # any other array of an item (cited message numbers, …)
    max_text_chars: int = 200  # any other string of an item
    max_integer: int = 9999  # any integer of an item without a range of its own (from 0)
    max_evidence: int = 8  # message numbers kept per fact (the first ones given)
    raw_chars: int = 300  # how much of a rejected item is kept for logs (redacted)

    def string_bounds(self) -> dict[str, int]:
        """maxLength per string property of the contract; others get `max_text_chars`."""
        return {"key": self.max_key_chars, "value": self.max_value_chars}

    def array_bounds(self) -> dict[str, int]:
        """maxItems per array property of the contract; others get `max_list_items`."""
        return {"memories": self.max_items, "evidence": self.max_evidence}


DEFAULT_LIMITS = ValidationLimits()

# What a schema-constrained reply can spend per character: JSON punctuation and digits tokenize
# at 1–3 characters per token, prose at ~4; the lower figure keeps a complete reply inside max_tokens.
REPLY_CHARS_PER_TOKEN = 3
_NUMBER_CHARS = 24  # the longest float JSON writes (-1.2345678901234567e-100)


def contract_schema(allowed_scopes: Sequence[Scope]) -> dict[str, Any]:
    """The contract's JSON schema without size bounds (strict mode: all fields required, closed)."""
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
                        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                        "scope": {"type": "string", "enum": list(allowed_scopes)},
                        "evidence": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                    },
                    "required": ["key", "value", "confidence", "scope", "evidence"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["memories"],
        "additionalProperties": False,
    }


def bound_schema(schema: Mapping[str, Any], limits: ValidationLimits) -> dict[str, Any]:
    """A copy of `schema` in which every string has a `maxLength`, every array a `maxItems` and
    every integer a range (by property name from `limits`, else its defaults); enums and explicit
    bounds are kept."""
    return _bound(schema, None, limits)


def _bound(node: Mapping[str, Any], name: str | None, limits: ValidationLimits) -> dict[str, Any]:
    out = dict(node)
    kind = node.get("type")
    if kind == "object":
        out["properties"] = {
            prop: _bound(sub, prop, limits) for prop, sub in node.get("properties", {}).items()
        }
    elif kind == "array":
        out.setdefault("maxItems", limits.array_bounds().get(name or "", limits.max_list_items))
        if isinstance(node.get("items"), Mapping):
            out["items"] = _bound(node["items"], None, limits)
    elif kind == "string" and "enum" not in node:
        out.setdefault("maxLength", limits.string_bounds().get(name or "", limits.max_text_chars))
    elif kind == "integer":
        out.setdefault("minimum", 0)
        out.setdefault("maximum", limits.max_integer)
    return out


def without_string_lengths(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` without `maxLength`/`minLength`, for providers whose strict mode refuses them."""
    out = {k: v for k, v in schema.items() if k not in ("maxLength", "minLength")}
    if isinstance(schema.get("properties"), Mapping):
        out["properties"] = {p: without_string_lengths(s) for p, s in schema["properties"].items()}
    if isinstance(schema.get("items"), Mapping):
        out["items"] = without_string_lengths(schema["items"])
    return out


def reply_chars(schema: Mapping[str, Any]) -> int:
    """The longest JSON text (compact, ASCII escapes aside) that a bounded `schema` allows."""
    kind = schema.get("type")
    if "enum" in schema:
        return max(len(json.dumps(value)) for value in schema["enum"])
    if kind == "object":
        properties: Mapping[str, Any] = schema.get("properties", {})
        fields = sum(len(json.dumps(prop)) + 1 + reply_chars(sub) for prop, sub in properties.items())
        return 2 + fields + max(len(properties) - 1, 0)
    if kind == "array":
        items = int(schema.get("maxItems", 0))
        return 2 + items * reply_chars(schema.get("items", {})) + max(items - 1, 0)
    if kind == "string":
        return 2 + int(schema.get("maxLength", 0))
    if kind == "integer" and isinstance(schema.get("maximum"), int):
        return len(str(schema["maximum"])) + (1 if schema.get("minimum", 0) < 0 else 0)
    if kind in ("integer", "number"):
        return _NUMBER_CHARS
    return 5  # true/false/null


def reply_tokens(schema: Mapping[str, Any]) -> int:
    """Output tokens that always hold a complete reply to a bounded `schema` (see REPLY_CHARS_PER_TOKEN)."""
    return -(-reply_chars(schema) // REPLY_CHARS_PER_TOKEN)


def output_json_schema(
    allowed_scopes: Sequence[Scope],
    limits: ValidationLimits = DEFAULT_LIMITS,
    *,
    max_reply_tokens: int | None = None,
) -> dict[str, Any]:
    """The bounded contract schema for structured output. With `max_reply_tokens`, `maxItems` of
    the memories array is lowered until a complete reply fits that many tokens (at least one item)."""
    schema = bound_schema(contract_schema(allowed_scopes), limits)
    if max_reply_tokens is None:
        return schema
    memories = schema["properties"]["memories"]
    per_item = reply_chars(memories["items"]) + 1
    fixed = reply_chars({**schema, "properties": {"memories": {**memories, "maxItems": 0}}})
    fitting = (max_reply_tokens * REPLY_CHARS_PER_TOKEN - fixed) // per_item
    memories["maxItems"] = max(1, min(int(memories["maxItems"]), fitting))
    return schema


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
            rejections.append(
                _reject("too_many_items", f"more than {limits.max_items} memories in one reply", item, limits)
            )
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
        return _reject("not_an_object", "item is not an object", item, limits)
    fields = cast(Mapping[str, object], item)
    key_raw, value_raw = fields.get("key"), fields.get("value")
    confidence_raw, scope_raw = fields.get("confidence"), fields.get("scope")

    if not isinstance(key_raw, str):
        return _reject("key_missing", "key missing or not a string", item, limits)
    key = normalize_key(storable_text(key_raw))
    words = len(key.split())
    if words == 0 or not has_content(key):  # nothing but punctuation is no label either
        return _reject("key_empty", "key is empty", item, limits)
    if not limits.min_key_words <= words <= limits.max_key_words:
        return _reject(
            "key_too_many_words",
            f"key has {words} words, expected {limits.min_key_words}–{limits.max_key_words}",
            item,
            limits,
        )
    if len(key) > limits.max_key_chars:
        return _reject("key_too_long", f"key longer than {limits.max_key_chars} characters", item, limits)

    value = storable_value(value_raw) if isinstance(value_raw, str) else ""
    if not has_content(value):  # the store keeps no value without a word (store.rules.admission)
        return _reject("value_empty", "value missing or empty", item, limits)
    if len(value) > limits.max_value_chars:
        return _reject(
            "value_too_long", f"value longer than {limits.max_value_chars} characters", item, limits
        )

    # bool is an int subclass; "true" is not a confidence
    if isinstance(confidence_raw, bool) or not isinstance(confidence_raw, int | float):
        return _reject("confidence_invalid", "confidence missing or not a number", item, limits)
    confidence = float(confidence_raw)
    if not math.isfinite(confidence) or not 0.0 <= confidence <= 1.0:
        return _reject("confidence_invalid", "confidence outside 0–1", item, limits)

    if scope_raw not in SCOPES:
        return _reject("scope_unknown", f"unknown scope {storable_text(str(scope_raw))[:40]!r}", item, limits)
    scope: Scope = scope_raw
    if scope not in allowed_scopes:
        return _reject(
            "scope_not_allowed",
            f"scope {scope!r} not allowed for this event (allowed: {', '.join(allowed_scopes)})",
            item,
            limits,
        )

    return Candidate(
        key=key,
        value=value,
        confidence=confidence,
        scope=scope,
        evidence=evidence_numbers(fields.get("evidence"), limits.max_evidence),
    )


def evidence_numbers(raw: object, limit: int) -> tuple[int, ...]:
    """The message numbers of an item's `evidence` (integers from 1, first `limit`, each once, in
    the order given): anything else in it is dropped, never the fact; a missing or malformed
    `evidence` is none. Whether a number names a message of the event is the worker's check."""
    if isinstance(raw, bool) or not isinstance(raw, list | tuple | int):
        return ()
    values = [raw] if isinstance(raw, int) else raw
    numbers: list[int] = []
    for value in values:
        if isinstance(value, bool):
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and value >= 1 and value not in numbers:
            numbers.append(value)
        if len(numbers) >= limit:
            break
    return tuple(numbers)


def _reject(code: RejectionCode, reason: str, item: object, limits: ValidationLimits) -> Rejection:
    if isinstance(item, Mapping) and isinstance(item.get("key"), str) and is_secret_key(item["key"]):
        # {"key": "password", "value": "hunter2"}: no text pattern sees the value as a secret
        item = {**item, "value": "[REDACTED:secret]"}
    try:
        raw = json.dumps(item, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        raw = repr(item)
    # rejected items end up in logs: never let a secret (or a NUL) through that way either
    raw = storable_text(raw[: limits.raw_chars * 4])
    return Rejection(code=code, reason=reason, raw=redact(raw)[0][: limits.raw_chars])


def merge_candidates(candidates: Iterable[Candidate]) -> list[Candidate]:
    """One candidate per (scope, key): the later one wins (later in the conversation is more current).

    Order follows each key's first appearance so the output is stable.
    """
    merged: dict[tuple[Scope, str], Candidate] = {}
    for candidate in candidates:
        merged[(candidate.scope, candidate.key)] = candidate
    return list(merged.values())


def merged_and_screened(candidates: Iterable[Candidate]) -> tuple[list[Candidate], list[Rejection]]:
    """The candidates merged (`merge_candidates`) and screened for secrets (`screen_candidate`):
    those kept, and the rejections."""
    kept: list[Candidate] = []
    rejections: list[Rejection] = []
    for candidate in merge_candidates(candidates):
        outcome = screen_candidate(candidate)
        if isinstance(outcome, Candidate):
            kept.append(outcome)
        else:
            rejections.append(outcome)
    return kept, rejections
