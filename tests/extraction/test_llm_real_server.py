"""The real `LLMExtractor` against a real llama.cpp server (SmolLM2-135M-Instruct on loopback):
what a real server does that the fake does not — grammar-constrained JSON, replies cut off at
max_tokens, prompts over its context, answers while its model loads."""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from extraction.clients import provider_client
from extraction.errors import PermanentExtractionError, RetryPolicy
from extraction.llm import LLMConfig, LLMExtractor, is_over_context
from extraction.types import ExtractionRequest, ExtractionResult, TranscriptMessage
from extraction.validate import DEFAULT_LIMITS, output_json_schema
from testkit.llama_server import LlamaServer

SAMPLES = Path(__file__).resolve().parents[2] / "cli" / "samples" / "conversations.jsonl"
RETRY = RetryPolicy(max_retries=2, wait_initial_s=0.05, wait_max_s=0.2, retry_after_cap_s=1.0)
# how long a starting server may take to load its model (LlamaServer.start waits as long)
LOAD_DEADLINE_S = 120.0


def sample_requests() -> list[ExtractionRequest]:
    """The `pmem demo` conversations, with the scopes the worker would allow them."""
    requests = []
    for line in SAMPLES.read_text().splitlines():
        event = json.loads(line)
        scopes: tuple[Any, ...] = ("user",) if event["persona_id"] is None else ("user", "persona_user")
        messages = tuple(TranscriptMessage(role=m["role"], content=m["content"]) for m in event["messages"])
        requests.append(ExtractionRequest(messages=messages, allowed_scopes=scopes))
    return requests


def extractor(server: LlamaServer, **overrides: Any) -> LLMExtractor:
    config = LLMConfig(
        model="smollm2",
        base_url=server.base_url,
        timeout_s=120.0,
        retry=RETRY,
        max_output_tokens=1024,
        max_input_tokens=server.slot_context - 1024,
    )
    return LLMExtractor(dataclasses.replace(config, **overrides))


def post(server: LlamaServer, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST /v1/chat/completions directly: (status, JSON body), errors included."""
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


def assert_within_limits(result: ExtractionResult) -> None:
    for candidate in result.candidates:
        assert 1 <= len(candidate.key.split()) <= DEFAULT_LIMITS.max_key_words
        assert len(candidate.key) <= DEFAULT_LIMITS.max_key_chars
        assert 0 < len(candidate.value) <= DEFAULT_LIMITS.max_value_chars
        assert 0.0 <= candidate.confidence <= 1.0


async def test_every_demo_conversation_gets_a_complete_reply_that_validates(
    llama_server: LlamaServer,
) -> None:
    # the server samples (its default temperature), and a pass of a 135M model over the six
    # conversations now and then keeps no fact that validates (one run in four or five; greedy
    # decoding keeps none): up to four passes, every reply checked, until one fact came through
    results: list[ExtractionResult] = []
    for _ in range(4):
        llm = extractor(llama_server)
        try:
            passed = [await llm.extract(request) for request in sample_requests()]
        finally:
            await llm.close()
        assert llm.output_mode == "json_schema"  # llama.cpp honours json_schema: no fallback
        results += passed
        if any(result.candidates for result in passed):
            break
    for result in results:
        assert_within_limits(result)
        assert result.retries == 0  # no malformed reply was re-asked
        # the grammar keeps the scope inside the allowed enum
        assert not [r for r in result.rejected if r.code in ("scope_unknown", "scope_not_allowed")]
    assert sum(len(r.candidates) for r in results) > 0


async def test_the_server_enforces_the_schemas_bounds(llama_server: LlamaServer) -> None:
    schema = output_json_schema(("user",))
    memories = schema["properties"]["memories"]
    memories["maxItems"] = 2
    memories["items"]["properties"]["value"]["maxLength"] = 12
    request = sample_requests()[0]
    body = {
        "model": "smollm2",
        "messages": [
            {"role": "system", "content": "List every fact about the user as JSON."},
            {"role": "user", "content": "\n".join(m.content for m in request.messages)},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "m", "strict": True, "schema": schema},
        },
        "max_tokens": 400,
        "temperature": 0,
    }
    status, reply = post(llama_server, body)
    assert status == 200
    assert reply["choices"][0]["finish_reason"] == "stop"
    items = json.loads(reply["choices"][0]["message"]["content"])["memories"]
    assert len(items) <= 2
    assert all(len(item["value"]) <= 12 and item["scope"] == "user" for item in items)


async def test_the_servers_answer_to_a_prompt_over_its_context_is_recognised(
    llama_server: LlamaServer,
) -> None:
    too_long = "I keep bees in my garden. " * (llama_server.slot_context // 3)
    client = provider_client(base_url=llama_server.base_url, api_key=None, timeout_s=120.0, missing_key="")
    try:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.post(
                "/chat/completions",
                {"model": "smollm2", "messages": [{"role": "user", "content": too_long}], "max_tokens": 8},
            )
    finally:
        await client.close()
    assert caught.value.status_code == 400
    assert is_over_context(caught.value)


async def test_a_conversation_over_the_servers_context_is_split_never_refused(
    llama_server: LlamaServer,
) -> None:
    facts = [f"My friend number {i} lives in town {i} and keeps {i} bees." for i in range(400)]
    messages = tuple(
        TranscriptMessage(
            role="user" if i % 2 == 0 else "assistant", content=" ".join(facts[i * 20 : i * 20 + 20])
        )
        for i in range(20)
    )
    # the extractor is told the context is far larger than the server's: the server refuses
    llm = extractor(llama_server, max_input_tokens=4 * llama_server.slot_context, max_output_tokens=256)
    try:
        result = await llm.extract(ExtractionRequest(messages=messages, allowed_scopes=("user",)))
    finally:
        await llm.close()
    assert result.llm_calls > 4  # refused, split, asked again until every part fitted
    assert_within_limits(result)


async def test_a_reply_cut_off_twice_is_a_classified_failure_after_exactly_two_calls(
    llama_server: LlamaServer,
) -> None:
    status, reply = post(
        llama_server,
        {
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Reply with JSON."}],
            "response_format": {"type": "json_object"},
            "max_tokens": 3,
        },
    )
    assert status == 200 and reply["choices"][0]["finish_reason"] == "length"  # what we handle
    llm = extractor(llama_server, max_output_tokens=3)
    try:
        with pytest.raises(PermanentExtractionError, match="cut off at max_tokens again") as caught:
            await llm.extract(sample_requests()[1])
    finally:
        await llm.close()
    assert caught.value.usage.completion_tokens == 2 * 3


async def test_a_server_still_loading_its_model_is_waited_for(
    tmp_path: Path, llama_server: LlamaServer
) -> None:
    loading = LlamaServer(
        binary=llama_server.binary,
        model=llama_server.model,
        log_path=tmp_path / "server.log",
        ctx_size=2048,
        threads=llama_server.threads,
    )
    loading.launch()
    reasons: list[str] = []
    try:
        config = LLMConfig(
            model="smollm2",
            base_url=loading.base_url,
            timeout_s=60.0,
            # retried until the model is loaded, for as long as a server is given to start
            retry=RetryPolicy(
                max_retries=10_000, wait_initial_s=0.1, wait_max_s=0.25, deadline_s=LOAD_DEADLINE_S
            ),
            max_output_tokens=512,
            max_input_tokens=900,
        )
        llm = LLMExtractor(config, on_retry=reasons.append)
        try:
            result = await llm.extract(sample_requests()[0])
        finally:
            await llm.close()
    finally:
        loading.stop()
    assert_within_limits(result)
    # refused connections before it listens, 503 "Loading model" after: both retried, nothing else
    assert set(reasons) <= {"connection", "server_error"}
    assert reasons  # the first call did reach a server that was not ready
