"""LLMExtractor with the real `openai` client against the fake OpenAI-compatible server."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from typing import Any

import pytest

from extraction.errors import (
    PermanentExtractionError,
    PromptBudgetError,
    RetryPolicy,
    TransientExtractionError,
)
from extraction.llm import LLMConfig, LLMExtractor
from extraction.types import ExtractionRequest, TranscriptMessage
from store.model import Scope
from testkit.fake_openai import FakeOpenAI, Reply

TRANSCRIPT = (
    TranscriptMessage(role="user", content="Hi! My name is Ann and I live in Lyon."),
    TranscriptMessage(role="assistant", content="Nice to meet you, Ann."),
    TranscriptMessage(role="user", content="I'm vegetarian, by the way."),
)


def request(
    scopes: tuple[Scope, ...] = ("user",), messages: tuple[TranscriptMessage, ...] = TRANSCRIPT
) -> ExtractionRequest:
    return ExtractionRequest(messages=messages, allowed_scopes=scopes)


class RecordingExtractor(LLMExtractor):
    """An LLMExtractor that keeps the reasons it was told about through `on_retry`."""

    def __init__(self, config: LLMConfig) -> None:
        self.retry_reasons: list[str] = []
        super().__init__(config, on_retry=self.retry_reasons.append)


def extractor(fake: FakeOpenAI, retry: RetryPolicy, **overrides: Any) -> RecordingExtractor:
    config = LLMConfig(model="fake-model", base_url=fake.base_url, api_key="test-key", retry=retry)
    return RecordingExtractor(dataclasses.replace(config, **overrides))


def contract(*items: dict[str, object]) -> Reply:
    return Reply.json({"memories": list(items)})


def memory(
    key: str = "home city", value: str = "Lives in Lyon", scope: str = "user", confidence: float = 0.9
) -> dict[str, object]:
    return {"key": key, "value": value, "confidence": confidence, "scope": scope}


async def test_happy_path_structured_output(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    llm = extractor(fake_openai, fast_retry)
    result = await llm.extract(request(("user", "persona_user")))
    await llm.close()

    found = {c.key: (c.value, c.scope) for c in result.candidates}
    assert found == {
        "user name": ("Name is Ann", "persona_user"),
        "home location": ("Lives in Lyon", "persona_user"),
        "diet preference": ("Is vegetarian", "persona_user"),
    }
    assert result.llm_calls == 1 and result.retries == 0
    [body] = fake_openai.chat_requests()
    assert body["model"] == "fake-model"
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["memories"]["items"]["properties"]["scope"]["enum"] == [
        "user",
        "persona_user",
    ]
    # usage comes from the response, as the server counted it
    assert result.usage.prompt_tokens == fake_openai.counters["prompt_tokens"] > 0
    assert result.usage.completion_tokens == fake_openai.counters["completion_tokens"] > 0
    assert fake_openai.requests[0].headers["authorization"] == "Bearer test-key"


async def test_429_with_retry_after_is_waited_out_then_succeeds(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_chat(Reply.rate_limited(retry_after_s=0.4), contract(memory()))
    llm = extractor(fake_openai, fast_retry)
    started = time.monotonic()
    result = await llm.extract(request())
    elapsed = time.monotonic() - started
    await llm.close()

    assert [c.key for c in result.candidates] == ["home city"]
    assert elapsed >= 0.4  # the fast schedule's own backoff is milliseconds: this is Retry-After
    assert fake_openai.counters["chat"] == 2  # the client did not retry on its own
    assert result.retries == 1 and result.llm_calls == 2
    assert llm.retry_reasons == ["rate_limited"]
    first, second = fake_openai.requests
    assert second.received_at - first.received_at >= 0.4


async def test_retry_after_ms_is_honoured(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    fake_openai.script_chat(Reply.rate_limited(retry_after_ms=300), contract(memory()))
    llm = extractor(fake_openai, fast_retry)
    started = time.monotonic()
    await llm.extract(request())
    await llm.close()
    assert time.monotonic() - started >= 0.3


async def test_a_retry_after_beyond_the_cap_is_handed_to_the_worker(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_chat(Reply.rate_limited(retry_after_s=120))
    llm = extractor(fake_openai, fast_retry)
    started = time.monotonic()
    with pytest.raises(TransientExtractionError) as caught:
        await llm.extract(request())
    await llm.close()
    assert time.monotonic() - started < 2  # not slept on in-process
    assert caught.value.retry_after_s == 120
    assert caught.value.reason == "rate_limited"
    assert fake_openai.counters["chat"] == 1


async def test_persistent_500_gives_up_with_a_transient_error(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_chat(*[Reply.server_error(503)] * 10)
    llm = extractor(fake_openai, fast_retry)
    with pytest.raises(TransientExtractionError, match="HTTP 503") as caught:
        await llm.extract(request())
    await llm.close()
    assert fake_openai.counters["chat"] == fast_retry.max_retries + 1
    assert caught.value.reason == "server_error"
    assert "gave up after 4 calls" in str(caught.value)
    assert llm.retry_reasons == ["server_error"] * 3


async def test_a_timeout_is_transient(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply.json({"memories": []}, delay_s=1.0))
    llm = extractor(fake_openai, RetryPolicy(max_retries=0), timeout_s=0.2)
    with pytest.raises(TransientExtractionError) as caught:
        await llm.extract(request())
    await llm.close()
    assert caught.value.reason == "timeout"


async def test_a_dropped_connection_is_retried(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    fake_openai.script_chat(Reply.hang_up(), contract(memory()))
    llm = extractor(fake_openai, fast_retry)
    result = await llm.extract(request())
    await llm.close()
    assert [c.key for c in result.candidates] == ["home city"]
    assert llm.retry_reasons == ["connection"]


async def test_nothing_listening_is_a_transient_connection_error(fast_retry: RetryPolicy) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = LLMConfig(
        model="m",
        base_url=f"http://127.0.0.1:{port}/v1",
        retry=RetryPolicy(max_retries=1, wait_initial_s=0.001),
    )
    llm = LLMExtractor(config)
    with pytest.raises(TransientExtractionError, match="could not connect") as caught:
        await llm.extract(request())
    await llm.close()
    assert caught.value.reason == "connection"


async def test_malformed_json_is_re_asked_then_succeeds(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_chat(Reply.malformed("Sure! Here are the memories: {oops"), contract(memory()))
    llm = extractor(fake_openai, fast_retry)
    result = await llm.extract(request())
    await llm.close()
    assert [c.key for c in result.candidates] == ["home city"]
    assert result.retries == 1 and result.llm_calls == 2
    first, second = fake_openai.chat_requests()
    assert len(first["messages"]) == 2
    assert "previous reply was invalid" in second["messages"][-1]["content"]
    assert result.usage.prompt_tokens == fake_openai.counters["prompt_tokens"]  # both attempts counted


async def test_persistently_malformed_output_is_permanent(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_chat(
        Reply.malformed("not json"),
        Reply.json(["a list"]),
        Reply.json({"facts": []}),
        Reply.malformed('{"memories": [{"key"'),
    )
    llm = extractor(fake_openai, fast_retry)
    with pytest.raises(PermanentExtractionError, match="stayed malformed after 4 attempts") as caught:
        await llm.extract(request())
    await llm.close()
    assert fake_openai.counters["chat"] == 4
    assert caught.value.usage.prompt_tokens > 0  # tokens of the failed attempts are reported
    assert llm.retry_reasons == ["malformed"] * 3


async def test_json_schema_rejected_falls_back_to_json_mode_and_remembers(fast_retry: RetryPolicy) -> None:
    with FakeOpenAI(json_schema_supported=False) as fake:
        llm = extractor(fake, fast_retry)
        first = await llm.extract(request())
        second = await llm.extract(request())
        await llm.close()
        assert {c.key for c in first.candidates} == {"user name", "home location", "diet preference"}
        assert second.candidates == first.candidates
        assert not llm.uses_json_schema
        assert fake.counters["json_schema_rejected"] == 1  # probed once, then JSON mode only
        formats = [b["response_format"]["type"] for b in fake.chat_requests()]
        assert formats == ["json_schema", "json_object", "json_object"]
        assert first.retries == 0  # the fallback is not a retry


async def test_scripted_json_schema_rejection(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    fake_openai.script_chat(Reply.reject_json_schema(), contract(memory()))
    llm = extractor(fake_openai, fast_retry)
    result = await llm.extract(request())
    await llm.close()
    assert [c.key for c in result.candidates] == ["home city"]
    assert fake_openai.chat_requests()[1]["response_format"] == {"type": "json_object"}


async def test_forbidden_scopes_and_absurd_keys_are_rejected(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_chat(
        contract(
            memory(),
            memory(key="policy refunds", value="Refunds within 30 days", scope="persona"),
            memory(key=" ".join(["long"] * 200), value="x"),
            {
                **memory(key="job title", value="Is a nurse"),
                "owner_id": "00000000-0000-0000-0000-000000000001",
            },
        )
    )
    llm = extractor(fake_openai, fast_retry)
    result = await llm.extract(request(("user",)))
    await llm.close()
    assert [(c.key, c.scope) for c in result.candidates] == [("home city", "user"), ("job title", "user")]
    reasons = sorted(r.reason for r in result.rejected)
    assert reasons[0].startswith("key has 200 words")
    assert reasons[1].startswith("scope 'persona' not allowed")


async def test_secrets_never_reach_the_llm_or_the_candidates(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    api_key = "sk-proj-" + "Zx9" * 12
    messages = (
        TranscriptMessage(
            role="user", content=f"My password is hunter2 and my key is {api_key}. I live in Lyon."
        ),
    )
    fake_openai.script_chat(
        contract(
            memory(),
            memory(key="password", value="hunter2"),
            memory(key="openai key", value=f"Uses {api_key}"),
            memory(key="card details", value="Card 4111 1111 1111 1111"),
        )
    )
    llm = extractor(fake_openai, fast_retry)
    result = await llm.extract(request(messages=messages))
    await llm.close()
    sent = json.dumps(fake_openai.chat_requests())
    assert "hunter2" not in sent and api_key not in sent
    assert result.redacted_secrets == 2
    stored = json.dumps([(c.key, c.value) for c in result.candidates])
    assert "hunter2" not in stored and api_key not in stored and "4111" not in stored
    assert [c.key for c in result.candidates] == ["home city"]
    logged = json.dumps([(r.reason, r.raw) for r in result.rejected])  # rejections end up in logs
    assert "hunter2" not in logged and api_key not in logged and "4111" not in logged
    assert len(result.rejected) == 3


async def test_client_errors_are_permanent_at_once(fast_retry: RetryPolicy) -> None:
    with FakeOpenAI(require_api_key="right-key") as fake:
        llm = extractor(fake, fast_retry)  # sends "test-key"
        with pytest.raises(PermanentExtractionError, match=r"HTTP 401.*PMEM_LLM_API_KEY"):
            await llm.extract(request())
        await llm.close()
        assert fake.counters["chat"] == 1


async def test_a_400_unrelated_to_response_format_is_permanent(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_chat(Reply.error(400, "Invalid value for 'temperature': must be at most 2"))
    llm = extractor(fake_openai, fast_retry)
    with pytest.raises(PermanentExtractionError, match="Invalid value for 'temperature'"):
        await llm.extract(request())
    await llm.close()
    assert llm.uses_json_schema


async def test_a_long_conversation_is_chunked_and_merged(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    filler = "We chatted about the weather and many unrelated things for a while. " * 30
    messages = (
        TranscriptMessage(role="user", content="I live in Lyon."),
        *(TranscriptMessage(role="assistant", content=filler) for _ in range(6)),
        TranscriptMessage(role="user", content="Actually I moved to Paris. My name is Ann."),
    )
    llm = extractor(fake_openai, fast_retry, max_input_tokens=700)
    result = await llm.extract(request(messages=messages))
    await llm.close()
    calls = fake_openai.counters["chat"]
    assert calls > 2 and result.llm_calls == calls
    assert {c.key: c.value for c in result.candidates} == {
        "home location": "Moved to Paris",
        "user name": "Name is Ann",
    }
    assert result.usage.prompt_tokens == fake_openai.counters["prompt_tokens"]
    for body in fake_openai.chat_requests():
        assert fake_openai._prompt_tokens(body) <= 700 + 20  # our estimate vs. the server's count


async def test_a_refusal_yields_nothing_and_says_so(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    fake_openai.script_chat(Reply.refused())
    llm = extractor(fake_openai, fast_retry)
    result = await llm.extract(request())
    await llm.close()
    assert result.candidates == ()
    assert [r.reason for r in result.rejected] == ["the LLM refused to answer"]
    assert fake_openai.counters["chat"] == 1


async def test_an_empty_transcript_makes_no_call(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    llm = extractor(fake_openai, fast_retry)
    result = await llm.extract(request(messages=(TranscriptMessage(role="system", content="hello"),)))
    await llm.close()
    assert result.candidates == () and result.llm_calls == 0
    assert fake_openai.counters.get("chat", 0) == 0


async def test_a_prompt_budget_error_is_permanent(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    llm = extractor(fake_openai, fast_retry, max_input_tokens=256)
    long_override = ExtractionRequest(
        messages=TRANSCRIPT, allowed_scopes=("user",), prompt_override="Keep facts. " * 100
    )
    with pytest.raises(PermanentExtractionError) as caught:
        await llm.extract(long_override)
    await llm.close()
    assert isinstance(caught.value, PromptBudgetError)


def test_a_missing_key_without_base_url_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="PMEM_LLM_API_KEY"):
        LLMExtractor(LLMConfig(model="m"))


async def test_a_provider_without_any_response_format_gets_the_prompt_only(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.json_schema_supported = False
    fake_openai.script_chat(Reply.error(400, "Unsupported parameter: 'response_format'"), contract(memory()))
    llm = extractor(fake_openai, fast_retry)
    first = await llm.extract(request())
    second = await llm.extract(request())
    await llm.close()
    assert [c.key for c in first.candidates] == ["home city"]
    assert {c.key for c in second.candidates} == {"user name", "home location", "diet preference"}
    assert llm.output_mode == "prompt_only"
    formats = [b.get("response_format", {}).get("type") for b in fake_openai.chat_requests()]
    assert formats == ["json_schema", "json_object", None, None]


LONG_TRANSCRIPT = tuple(
    TranscriptMessage(role="user" if i % 2 == 0 else "assistant", content=f"Message {i}: I keep bees.")
    for i in range(6)
)


def transcript_of(body: dict[str, Any]) -> str:
    return str(body["messages"][1]["content"])


async def test_max_tokens_holds_the_longest_reply_the_sent_schema_allows(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    from extraction.validate import reply_tokens

    llm = extractor(fake_openai, fast_retry, max_output_tokens=1000)
    await llm.extract(request())
    await llm.close()
    [body] = fake_openai.chat_requests()
    schema = body["response_format"]["json_schema"]["schema"]
    assert body["max_tokens"] == reply_tokens(schema) <= 1000
    assert 1 <= schema["properties"]["memories"]["maxItems"] < 100


async def test_a_reply_cut_off_is_re_asked_once_as_two_halves(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_chat(
        Reply.truncated('{"memories": [{"key": "bees", "value": "Keeps bees keeps bees keeps'),
        contract(memory("first half", "Keeps bees")),
        contract(memory("second half", "Keeps more bees")),
    )
    llm = extractor(fake_openai, fast_retry)
    result = await llm.extract(request(messages=LONG_TRANSCRIPT))
    await llm.close()
    assert [c.key for c in result.candidates] == ["first half", "second half"]
    whole, first, second = (transcript_of(b) for b in fake_openai.chat_requests())
    assert whole.split("\n")[1:] == first.split("\n")[1:] + second.split("\n")[1:]
    assert result.llm_calls == 3 and llm.retry_reasons == []


async def test_a_half_cut_off_again_is_a_permanent_error_naming_the_fix(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_chat(Reply.truncated(), Reply.truncated(), contract(memory()), Reply.truncated())
    llm = extractor(fake_openai, fast_retry)
    with pytest.raises(PermanentExtractionError, match="cut off at max_tokens again") as caught:
        await llm.extract(request(messages=LONG_TRANSCRIPT))
    await llm.close()
    assert "PMEM_LLM_MAX_OUTPUT_TOKENS" in str(caught.value)
    assert fake_openai.counters["chat"] == 2  # no third split, no retry loop
    assert caught.value.usage.prompt_tokens > 0


LLAMA_CPP_OVER_CONTEXT = Reply.error(
    400,
    "request (1900 tokens) exceeds the available context size (1024 tokens), try increasing it",
    error_type="exceed_context_size_error",
)


async def test_a_prompt_over_the_servers_context_is_split_until_it_fits(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_chat(
        LLAMA_CPP_OVER_CONTEXT,
        LLAMA_CPP_OVER_CONTEXT,
        contract(memory("a", "Keeps bees")),
        contract(memory("b", "Keeps more bees")),
        contract(memory("c", "Keeps most bees")),
    )
    llm = extractor(fake_openai, fast_retry)
    result = await llm.extract(request(messages=LONG_TRANSCRIPT))
    await llm.close()
    assert [c.key for c in result.candidates] == ["a", "b", "c"]
    sent = [transcript_of(b).split("\n")[1:] for b in fake_openai.chat_requests()]
    assert sent[2] + sent[3] + sent[4] == sent[0]  # every line asked about exactly once
    assert llm.retry_reasons == []


async def test_a_prompt_that_cannot_shrink_enough_is_a_permanent_error(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.set_chat_responder(lambda _body: (_ for _ in ()).throw(AssertionError("unused")))
    fake_openai.script_chat(*[LLAMA_CPP_OVER_CONTEXT] * 40)
    llm = extractor(fake_openai, fast_retry)
    one = (TranscriptMessage(role="user", content="I keep bees. I am a nurse."),)
    with pytest.raises(PermanentExtractionError, match="over its context window"):
        await llm.extract(request(messages=one))
    await llm.close()
    assert 1 < fake_openai.counters["chat"] < 40


async def test_a_provider_wanting_max_completion_tokens_gets_it_and_keeps_it(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_chat(
        Reply.error(
            400,
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
        )
    )
    llm = extractor(fake_openai, fast_retry)
    await llm.extract(request())
    await llm.extract(request())
    await llm.close()
    first, second, third = fake_openai.chat_requests()
    assert "max_tokens" in first and "max_tokens" not in second
    assert second["max_completion_tokens"] == first["max_tokens"] == third["max_completion_tokens"]
    assert second["response_format"]["type"] == "json_schema"


async def test_a_strict_mode_refusing_max_length_keeps_the_schema_without_it(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_chat(
        Reply.error(
            400,
            "Invalid schema for response_format 'memories': In context=('properties', 'key'), "
            "'maxLength' is not permitted.",
        )
    )
    llm = extractor(fake_openai, fast_retry)
    await llm.extract(request())
    await llm.close()
    _, second = fake_openai.chat_requests()
    schema = second["response_format"]["json_schema"]["schema"]
    entry = schema["properties"]["memories"]["items"]["properties"]
    assert "maxLength" not in entry["key"] and schema["properties"]["memories"]["maxItems"] >= 1
    assert llm.uses_json_schema
