"""The OpenAI-compatible wire format (extraction/wire.py): request bodies and reply parsing."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from extraction.wire import (
    MalformedReplyError,
    chat_body,
    embeddings_body,
    parse_chat_reply,
    parse_embeddings,
)


def completion(**message: object) -> dict[str, object]:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }


def test_a_chat_reply_gives_content_finish_reason_and_usage() -> None:
    reply = parse_chat_reply(json.dumps(completion(content='{"memories": []}')).encode())
    assert reply.choice and reply.content == '{"memories": []}' and reply.refusal is None
    assert reply.finish_reason == "stop"
    assert (reply.prompt_tokens, reply.completion_tokens) == (12, 3)


def test_a_refusal_and_a_missing_usage_are_reported_as_such() -> None:
    body = completion(content=None, refusal="I can't help with that")
    del body["usage"]
    reply = parse_chat_reply(json.dumps(body))
    assert reply.refusal == "I can't help with that" and reply.content is None
    assert reply.prompt_tokens is None and reply.completion_tokens is None


def test_no_choices_is_a_reply_without_a_choice() -> None:
    assert parse_chat_reply('{"choices": []}').choice is False
    assert parse_chat_reply("{}").choice is False


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1, 2]",
        '{"choices": "many"}',
        '{"choices": [{"message": "hi"}]}',
        '{"choices": [{"message": {"content": 42}}]}',
        b"\xff\xfe",
    ],
)
def test_a_chat_reply_of_another_shape_is_malformed(body: str | bytes) -> None:
    with pytest.raises(MalformedReplyError):
        parse_chat_reply(body)


def test_embeddings_decode_base64_and_float_lists_in_index_order() -> None:
    packed = base64.b64encode(np.array([0.5, -1.0], dtype="<f4").tobytes()).decode()
    body = {"data": [{"index": 1, "embedding": [0.25, 2]}, {"index": 0, "embedding": packed}]}
    assert parse_embeddings(json.dumps(body)) == [(1, [0.25, 2.0]), (0, [0.5, -1.0])]


@pytest.mark.parametrize(
    "body",
    [
        '{"object": "list"}',
        '{"data": [1]}',
        '{"data": [{"index": "0", "embedding": [1.0]}]}',
        '{"data": [{"index": 0, "embedding": "not base64!"}]}',
        '{"data": [{"index": 0, "embedding": "AAA="}]}',  # 2 bytes: not whole float32 values
        '{"data": [{"index": 0, "embedding": [true, 1.0]}]}',
        '{"data": [{"index": 0, "embedding": ["0.5", 1.0]}]}',
        '{"data": [{"index": 0, "embedding": [null, 1.0]}]}',
    ],
)
def test_an_embeddings_reply_of_another_shape_is_malformed(body: str) -> None:
    with pytest.raises(MalformedReplyError):
        parse_embeddings(body)


def test_request_bodies_carry_only_what_is_set() -> None:
    messages = [{"role": "user", "content": "hi"}]
    assert chat_body(model="m", messages=messages, response_format=None, extra={}) == {
        "model": "m",
        "messages": messages,
    }
    with_format = chat_body(
        model="m", messages=messages, response_format={"type": "json_object"}, extra={"temperature": 0}
    )
    assert with_format["response_format"] == {"type": "json_object"} and with_format["temperature"] == 0
    assert embeddings_body(model="e", inputs=["a"], dimensions=None) == {
        "model": "e",
        "input": ["a"],
        "encoding_format": "base64",
    }
    assert embeddings_body(model="e", inputs=["a"], dimensions=8)["dimensions"] == 8
