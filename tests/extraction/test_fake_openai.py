"""The fake OpenAI-compatible server itself: concurrency, formats, scripting, bookkeeping."""

from __future__ import annotations

import asyncio
import socket
import time

import openai
import pytest

from extraction.embeddings import hashing_vector
from testkit.fake_openai import FakeOpenAI, Reply


async def test_64_concurrent_slow_requests_overlap() -> None:
    """The throughput benchmark needs 64 × 300 ms in flight at once, not one after another."""
    async with FakeOpenAI(chat_latency_s=0.3, embedding_latency_s=0.02) as fake:
        client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0)

        async def chat() -> str | None:
            completion = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "Conversation:\n[1] user: I'm vegan"}]
            )
            return completion.choices[0].message.content

        started = time.monotonic()
        replies = await asyncio.gather(*(chat() for _ in range(64)))
        elapsed = time.monotonic() - started
        await client.close()
    assert elapsed < 19 / 3  # serial would be 19 s (a loose bound: a loaded machine is slow)
    assert fake.counters["max_in_flight"] >= 32
    assert all(r is not None and "diet preference" in r for r in replies)
    assert all(r.duration_s >= 0.3 for r in fake.requests)


async def test_base64_embeddings_decode_to_the_hashing_vectors(fake_openai: FakeOpenAI) -> None:
    client = openai.AsyncOpenAI(base_url=fake_openai.base_url, api_key="k", max_retries=0)
    response = await client.embeddings.create(model="m", input=["a b c"], dimensions=16)  # base64 by default
    await client.close()
    assert response.data[0].embedding == pytest.approx(hashing_vector("a b c", 16), abs=1e-6)
    assert fake_openai.embedding_requests()[0]["encoding_format"] == "base64"


async def test_script_then_default_and_reset(fake_openai: FakeOpenAI) -> None:
    client = openai.AsyncOpenAI(base_url=fake_openai.base_url, api_key="k", max_retries=0)
    fake_openai.script_chat(Reply.text("first"), Reply.server_error(500))
    fake_openai.set_extraction({"memories": []})
    first = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    third = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    await client.close()
    assert first.choices[0].message.content == "first"
    assert third.choices[0].message.content == '{"memories": []}'
    assert [r.scripted for r in fake_openai.requests] == [True, True, False]
    assert [r.status for r in fake_openai.requests] == [200, 500, 200]
    assert fake_openai.counters["chat"] == 3 and fake_openai.counters["faults"] == 1
    assert fake_openai.pending_script() == (0, 0)
    fake_openai.reset()
    assert fake_openai.requests == [] and fake_openai.counters.get("chat", 0) == 0


async def test_usage_is_counted_like_openai(fake_openai: FakeOpenAI) -> None:
    client = openai.AsyncOpenAI(base_url=fake_openai.base_url, api_key="k", max_retries=0)
    completion = await client.chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": "Reply with JSON."},
            {"role": "user", "content": "hello there"},
        ],
    )
    await client.close()
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == fake_openai._prompt_tokens(fake_openai.chat_requests()[0])
    assert completion.usage.prompt_tokens > 2 * 4


def test_stop_interrupts_delayed_replies_and_frees_the_port() -> None:
    fake = FakeOpenAI()
    fake.start()
    port = fake.port
    fake.script_chat(Reply.text("late", delay_s=30))
    client = openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0, timeout=10)
    import threading

    errors: list[BaseException] = []

    def call() -> None:
        try:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        except openai.OpenAIError as exc:
            errors.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.2)
    started = time.monotonic()
    fake.stop()
    thread.join(timeout=5)
    assert time.monotonic() - started < 3
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], openai.APIConnectionError)
    with pytest.raises(RuntimeError, match="not started"):
        _ = fake.port
    assert port > 0


async def test_the_fake_answers_on_sockets_without_nagles_delay(fake_openai: FakeOpenAI) -> None:
    """Headers and body leave in two writes; with Nagle's algorithm the body waited up to 40 ms
    for the client's delayed ACK, on every answer of the throughput benchmark."""
    client = openai.AsyncOpenAI(base_url=fake_openai.base_url, api_key="k", max_retries=0)
    await client.embeddings.create(model="m", input=["a"], dimensions=8)  # keep-alive: stays open
    server = fake_openai._server
    assert server is not None
    with server.connections_lock:
        nodelay = [c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for c in server.connections]
    await client.close()
    assert nodelay and all(nodelay)
