"""Input errors in the caller's words: each pydantic error type that the API's bodies and the worker's
events produce names the field as sent and the JSON type expected, never a Python type."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from store.rules.input_errors import (
    describe,
    field_name,
    json_type,
    message,
    unparsable_body,
    value_message,
)


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str


class Probe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "n"
    count: int = 1
    ratio: float = 0.5
    flag: bool = False
    items: tuple[Item, ...] = ()
    tags: list[str] = Field(default=[], min_length=1, max_length=2)
    meta: dict[str, str] = {}
    child: Item | None = None
    id: uuid.UUID | None = None
    at: datetime | None = None
    text: str = Field(default="x", min_length=1, max_length=5)
    code: str = Field(default="abc", min_length=3)
    colour: Colour = Colour.RED
    limit: int = Field(default=1, ge=1, le=200)
    required: str


def error_of(**fields: Any) -> str:
    document = {"required": "r", **fields}
    with pytest.raises(ValidationError) as caught:
        Probe.model_validate(document)
    return describe(caught.value.errors())


PYTHON_WORDS = ("tuple", "dict", "list", "str ", "Input should", "int_", "NoneType", "float_")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"required": None}, "required: expected a string, got null"),
        ({"name": 3}, "name: expected a string, got an integer"),
        ({"count": "three"}, "count: expected an integer, got a string"),
        ({"count": 1.5}, "count: expected an integer, got a fraction"),
        ({"ratio": "half"}, "ratio: expected a number, got a string"),
        ({"flag": "maybe"}, "flag: expected true or false, got a string"),
        ({"items": "hello"}, "items: expected an array, got a string"),
        ({"items": {"role": "user"}}, "items: expected an array, got an object"),
        ({"tags": "a"}, "tags: expected an array, got a string"),
        ({"meta": []}, "meta: expected an object, got an array"),
        ({"child": "x"}, "child: expected an object, got a string"),
        ({"id": "not-a-uuid"}, "id: expected a UUID string (e.g. "),
        ({"id": 5}, "id: expected a UUID string, got an integer"),
        ({"at": "yesterday"}, "at: expected an ISO 8601 date-time string (e.g. "),
        ({"at": [1]}, "at: expected an ISO 8601 date-time string, got an array"),
        ({"text": "x" * 6}, "text: longer than 5 characters"),
        ({"text": ""}, "text: must not be empty"),
        ({"code": "ab"}, "code: shorter than 3 characters"),
        ({"tags": ["a", "b", "c"]}, "tags: more than 2 items"),
        ({"tags": []}, "tags: must not be an empty array"),
        ({"surprise": 1}, "surprise: not a field of this request; remove it"),
        ({"colour": "green"}, "colour: expected one of 'red' or 'blue'"),
        (
            {"items": [{"role": "robot", "content": "hi"}]},
            "items[0].role: expected one of 'user' or 'assistant'",
        ),
        ({"items": [{"role": "user"}]}, "items[0].content: required; it is missing"),
        ({"limit": 0}, "limit: must be at least 1"),
        ({"limit": 201}, "limit: must be at most 200"),
    ],
)
def test_each_error_type_names_the_field_and_the_json_type(fields: dict[str, Any], expected: str) -> None:
    said = error_of(**fields)
    assert said.startswith(expected), said
    assert not any(word in said for word in PYTHON_WORDS), said


def test_a_missing_field_is_named() -> None:
    with pytest.raises(ValidationError) as caught:
        Probe.model_validate({})
    assert describe(caught.value.errors()) == "required: required; it is missing"


def test_the_value_sent_is_never_repeated() -> None:
    said = error_of(name=12345678, text="sk-secret-value-xyz")
    assert "12345678" not in said and "sk-secret" not in said


def test_a_date_time_that_does_not_parse_is_shown_cut_short() -> None:
    assert error_of(at="yesterday").endswith(', got "yesterday"')
    said = error_of(at="2026-13-45T99:00:00Z" + "x" * 100)
    assert '"2026-13-45T99:00:00Z' in said and "x" * 40 not in said


def test_many_errors_say_how_many_more() -> None:
    said = error_of(name=1, count="x", ratio="x", flag="x", meta=[], id="x", at="x")
    assert said.count(";") == 4 and said.endswith("(+2 more)"), said


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        (("body", "query"), "query"),
        (("body", "messages", 0, "content"), "messages[0].content"),
        (("query", "limit"), "query parameter limit"),
        (("path", "memory_id"), "path parameter memory_id"),
        (("body",), "body"),
        ((), "body"),
        (("messages",), "messages"),
    ],
)
def test_field_names_read_as_sent(location: tuple[int | str, ...], expected: str) -> None:
    assert field_name(location) == expected


def test_a_body_that_is_not_json_says_where() -> None:
    fastapi_error = {
        "type": "json_invalid",
        "loc": ("body", 7),
        "msg": "JSON decode error",
        "input": {},
        "ctx": {"error": "Expecting value"},
    }
    assert message(fastapi_error) == "body: not valid JSON (Expecting value at character 7)"
    try:
        b"\xff{}".decode("utf-8")
    except UnicodeDecodeError as exc:
        assert unparsable_body(exc) == "body: not valid JSON (not UTF-8: invalid start byte at byte 0)"
    assert unparsable_body(RecursionError()) == "body: not valid JSON (nested too deeply)"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "null"),
        (True, "a boolean"),
        (1, "an integer"),
        (1.5, "a number"),
        ("s", "a string"),
        ([1], "an array"),
        ({}, "an object"),
    ],
)
def test_json_types(value: Any, expected: str) -> None:
    assert json_type(value) == expected


class Variables(BaseModel):
    """Text values as the environment gives them."""

    count: int = Field(default=1, ge=1)
    ratio: float = 0.5
    flag: bool = False
    provider: Literal["openai", "local", "hashing"] = "local"
    colour: Colour = Colour.RED
    api_key: int = 0


def value_error_of(name: str, value: str, *, secret: bool = False) -> str:
    with pytest.raises(ValidationError) as caught:
        Variables.model_validate({name: value})
    (error,) = caught.value.errors()
    return value_message(f"PMEM_{name.upper()}", error, secret=secret)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("count", "many", 'PMEM_COUNT: expected a whole number, got "many"'),
        ("count", "1.5", 'PMEM_COUNT: expected a whole number, got "1.5"'),
        ("count", "", "PMEM_COUNT: expected a whole number, got an empty value"),
        ("count", "0", 'PMEM_COUNT: must be at least 1, got "0"'),
        ("ratio", "half", 'PMEM_RATIO: expected a number, got "half"'),
        ("flag", "maybe", 'PMEM_FLAG: expected true or false, got "maybe"'),
        ("provider", "remote", 'PMEM_PROVIDER: expected one of: openai, local, hashing, got "remote"'),
        ("colour", "green", 'PMEM_COLOUR: expected one of: red, blue, got "green"'),
    ],
)
def test_a_variable_names_the_kind_of_value_and_echoes_it(name: str, value: str, expected: str) -> None:
    said = value_error_of(name, value)
    assert said == expected
    assert not any(word in said for word in PYTHON_WORDS), said


def test_a_secret_variable_value_is_never_echoed() -> None:
    said = value_error_of("api_key", "sk-secret-value-xyz", secret=True)
    assert said == "PMEM_API_KEY: expected a whole number, got a value that is not shown (it holds a secret)"


def test_a_url_of_another_scheme_names_the_schemes_expected() -> None:
    error = {
        "type": "url_scheme",
        "loc": ("database_url",),
        "input": "mysql://db/pmem",
        "ctx": {"expected_schemes": "'postgresql' or 'sqlite'"},
    }
    assert value_message("PMEM_DATABASE_URL", error, secret=False) == (
        'PMEM_DATABASE_URL: expected a URL starting with postgresql:// or sqlite://, got "mysql://db/pmem"'
    )
    bad = {"type": "url_parsing", "loc": ("u",), "input": "::", "ctx": {"error": "relative URL"}}
    assert value_message("PMEM_U", bad, secret=False) == 'PMEM_U: expected a URL, got "::"'


def test_a_check_that_names_the_variable_says_it_once_without_the_value() -> None:
    error = {"type": "value_error", "loc": ("x",), "input": "v", "ctx": {"error": "PMEM_X must be long"}}
    assert value_message("PMEM_X", error, secret=False) == "PMEM_X: must be long"
    across = {"type": "value_error", "loc": (), "input": {"x": "v"}, "ctx": {"error": "PMEM_X needs PMEM_Y"}}
    assert value_message(None, across, secret=True) == "PMEM_X needs PMEM_Y"


def test_an_echoed_value_stays_on_one_short_line() -> None:
    said = value_error_of("count", 'a "quoted"\nvalue' + "x" * 200)
    assert "\n" not in said and len(said) < 140, said
