"""What is wrong with an input, in the caller's words: the field as they sent it (`messages[0].role`)
and the JSON type expected ("expected an array"), never a Python type or a pydantic phrase.

One place for the API's 422 answers, the worker's dead-letter reasons and `pmem`'s report of a bad
`PMEM_*` variable. Pure. A request's value is never repeated (it may be a secret), only its JSON
type, except a date or time that does not parse (shown cut short: the caller needs to see which
one it was); a variable's value is (the user typed it), unless the caller says it is a secret."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

# where a request's value came from, as FastAPI names it in an error's location
_SOURCES = {"body": "", "query": "query parameter ", "path": "path parameter ", "header": "header "}

_EXPECTED: dict[str, str] = {
    "string_type": "expected a string",
    "string_unicode": "expected a string",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "finite_number": "expected a finite number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "list_type": "expected an array",
    "tuple_type": "expected an array",
    "set_type": "expected an array",
    "frozen_set_type": "expected an array",
    "iterable_type": "expected an array",
    "dict_type": "expected an object",
    "model_type": "expected an object",
    "model_attributes_type": "expected an object",
    "dataclass_type": "expected an object",
    "uuid_type": "expected a UUID string",
    "uuid_parsing": "expected a UUID string (e.g. 3f2b9c1e-8d4a-4c1b-9e2f-5a6b7c8d9e0f)",
    "uuid_version": "expected a UUID string",
    "datetime_type": "expected an ISO 8601 date-time string",
    "datetime_parsing": "expected an ISO 8601 date-time string (e.g. 2026-05-01T12:00:00Z)",
    "datetime_from_date_parsing": "expected an ISO 8601 date-time string (e.g. 2026-05-01T12:00:00Z)",
    "datetime_object_invalid": "expected an ISO 8601 date-time string",
    "timezone_aware": "expected a date-time with its time zone (e.g. …Z or …+02:00)",
    "date_type": "expected an ISO 8601 date string",
    "date_parsing": "expected an ISO 8601 date string (e.g. 2026-05-01)",
    "none_required": "expected null",
}


# What a text value (an environment variable) should have been, by pydantic error type: every
# variable arrives as a string, so the words name the kind of text, not a JSON type.
_EXPECTED_TEXT: dict[str, str] = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_parsing_size": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "url_type": "a URL",
    "url_parsing": "a URL",
    "url_syntax_violation": "a URL",
    "url_too_long": "a shorter URL",
    "uuid_type": "a UUID",
    "uuid_parsing": "a UUID",
    "duration_parsing": "a duration (seconds, or a number with s, m, h, d or w: 90s, 30m, 12h, 7d)",
}
# a longer value is cut here: the line stays readable
_SHOWN_CHARS = 80
# errors of a date or time that did not parse: its (short) value is shown
_TIME_PARSING = frozenset(
    {"datetime_parsing", "datetime_from_date_parsing", "date_parsing", "timezone_aware"}
)
_SHOWN_TIME_CHARS = 40
# pydantic lists expected values as "'a', 'b' or 'c'"
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


def json_type(value: Any) -> str:
    """The JSON type of a decoded value, with its article ("an array", "null")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (bytes, bytearray)):
        return "a body that is not JSON"
    return "a value of another kind"


def field_name(location: Sequence[int | str]) -> str:
    """A location as the caller wrote it: `messages[0].content`; a request's source
    (body, query, path, header) leads as words ("query parameter limit")."""
    parts = list(location)
    lead = ""
    source = parts[0] if parts else None
    if isinstance(source, str) and source in _SOURCES:
        parts.pop(0)
        lead = _SOURCES[source]
        if not parts:
            return source
    name = ""
    for part in parts:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{part}" if name else part
    return lead + (name or "body")


def _count(value: Any, singular: str) -> str:
    return f"{value} {singular}" + ("" if value == 1 else "s")


def problem(error: Mapping[str, Any]) -> str:
    """One pydantic (or FastAPI) error's problem, in JSON words, without the field's name."""
    kind = str(error.get("type", ""))
    context: Mapping[str, Any] = error.get("ctx") or {}
    given = error.get("input")
    if kind == "missing":
        return "required; it is missing"
    if kind == "extra_forbidden":
        return "not a field of this request; remove it"
    if kind == "int_from_float":
        return "expected an integer, got a fraction"
    if kind in _EXPECTED:
        if kind in _TIME_PARSING and isinstance(given, str):
            cut = given if len(given) <= _SHOWN_TIME_CHARS else given[: _SHOWN_TIME_CHARS - 1] + "…"
            return f"{_EXPECTED[kind]}, got {json.dumps(cut, ensure_ascii=False)}"
        return f"{_EXPECTED[kind]}, got {json_type(given)}"
    if kind == "string_too_long":
        return f"longer than {_count(context.get('max_length'), 'character')}"
    if kind == "string_too_short":
        minimum = context.get("min_length")
        return "must not be empty" if minimum == 1 else f"shorter than {_count(minimum, 'character')}"
    if kind == "too_long":
        return f"more than {_count(context.get('max_length'), 'item')}"
    if kind == "too_short":
        minimum = context.get("min_length")
        return "must not be an empty array" if minimum == 1 else f"fewer than {_count(minimum, 'item')}"
    if kind in ("literal_error", "enum"):
        return f"expected one of {context.get('expected', 'the documented values')}"
    bounds = {
        "greater_than": "greater than",
        "greater_than_equal": "at least",
        "less_than": "less than",
        "less_than_equal": "at most",
    }
    if kind in bounds:
        limit = next(iter(context.values()), "the documented bound")
        return f"must be {bounds[kind]} {limit}"
    if kind == "string_pattern_mismatch":
        return f"does not match the pattern {context.get('pattern', '')}".rstrip()
    if kind in ("value_error", "assertion_error"):
        reason = context.get("error")
        return str(reason) if reason is not None else str(error.get("msg", "invalid"))
    # a type this table does not know: pydantic's words are the best there is
    return str(error.get("msg", "invalid"))


def message(error: Mapping[str, Any]) -> str:
    """`field: problem` for one error; a body that is not JSON says where it stops being JSON."""
    location = tuple(error.get("loc", ()))
    if error.get("type") == "json_invalid":
        # FastAPI's location of a JSON error is the body and the character where decoding failed
        where = next((part for part in location if isinstance(part, int)), None)
        reason = (error.get("ctx") or {}).get("error", "cannot be decoded")
        at = "" if where is None else f" at character {where}"
        return f"body: not valid JSON ({reason}{at})"
    return f"{field_name(location)}: {problem(error)}"


def describe(errors: Sequence[Mapping[str, Any]], *, limit: int = 5) -> str:
    """`field: problem` for each error (the first `limit`, then how many more), joined by "; "."""
    parts = [message(error) for error in errors[:limit]]
    more = len(errors) - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "") if parts else "invalid input"


def unparsable_body(cause: BaseException | None) -> str:
    """Why a request body could not be read as JSON (FastAPI answers these with a bare 400)."""
    if isinstance(cause, UnicodeDecodeError):
        return f"body: not valid JSON (not UTF-8: {cause.reason} at byte {cause.start})"
    if isinstance(cause, RecursionError):
        return "body: not valid JSON (nested too deeply)"
    return "body: not valid JSON"


def _choices(expected: object) -> list[str]:
    return _QUOTED.findall(str(expected))


def _expected_text(kind: str, context: Mapping[str, Any]) -> str | None:
    if kind in _EXPECTED_TEXT:
        return _EXPECTED_TEXT[kind]
    if kind in ("literal_error", "enum"):
        expected = context.get("expected", "")
        choices = _choices(expected)
        return f"one of: {', '.join(choices)}" if choices else f"one of {expected or 'the documented values'}"
    if kind == "url_scheme":
        schemes = _choices(context.get("expected_schemes", ""))
        return f"a URL starting with {' or '.join(f'{s}://' for s in schemes)}" if schemes else "a URL"
    return None


def _given(value: Any, *, shown: bool) -> str:
    if not shown:
        return ", got a value that is not shown (it holds a secret)"
    if value == "":
        return ", got an empty value"
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 1] + "…"
    # JSON quoting: a newline or a quote in the value cannot break the line
    return f", got {json.dumps(text, ensure_ascii=False)}"


def value_message(name: str | None, error: Mapping[str, Any], *, secret: bool) -> str:
    """`NAME: expected <kind of value>, got "<value>"` for one error on a text value such as an
    environment variable (None: a check across values, said as is); a secret is never shown."""
    kind = str(error.get("type", ""))
    context: Mapping[str, Any] = error.get("ctx") or {}
    expected = _expected_text(kind, context)
    if expected is not None:
        said = f"expected {expected}"
    else:
        # a check's own words often name the variable already: say it once
        said = problem(error).removeprefix(f"{name} " if name else "")
    if name is None:
        # a check across values: its input is every value at once
        return said
    if kind not in ("value_error", "assertion_error", "missing"):
        # a check's own words describe the value already
        said += _given(error.get("input"), shown=not secret)
    return f"{name}: {said}"
