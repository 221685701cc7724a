"""OpenAIEmbedder with the real `openai` client against the fake server; build_embedder."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from config import Settings
from extraction.embeddings import (
    HashingEmbedder,
    OpenAIEmbedder,
    OpenAIEmbedderConfig,
    build_embedder,
    close_embedder,
    hashing_vector,
    supports_dimensions,
)
from extraction.errors import PermanentEmbeddingError, RetryPolicy, TransientEmbeddingError
from testkit.fake_openai import FakeOpenAI, Reply


def embedder(fake: FakeOpenAI, retry: RetryPolicy, **overrides: Any) -> OpenAIEmbedder:
    config = OpenAIEmbedderConfig(
        model="text-embedding-3-small", dim=64, base_url=fake.base_url, api_key="k", retry=retry
    )
    return OpenAIEmbedder(dataclasses.replace(config, **overrides))


async def test_vectors_in_order_batched_with_dimensions(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    texts = ["home city: Lives in Lyon", "diet: vegan", "job title: nurse", "a b", "c d"]
    emb = embedder(fake_openai, fast_retry, batch_size=2)
    vectors = await emb.embed(texts)
    await emb.close()
    assert emb.dim == 64
    # base64 on the wire: float32 precision
    assert vectors == [pytest.approx(hashing_vector(t, 64), abs=1e-6) for t in texts]
    bodies = fake_openai.embedding_requests()
    assert [b["input"] for b in bodies] == [texts[0:2], texts[2:4], texts[4:]]
    assert all(b["dimensions"] == 64 and b["encoding_format"] == "base64" for b in bodies)
    assert all(b["model"] == "text-embedding-3-small" for b in bodies)


async def test_dimensions_not_sent_when_disabled(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    emb = embedder(fake_openai, fast_retry, model="nomic-embed-text", dim=384, send_dimensions=False)
    [vector] = await emb.embed(["x y"])
    await emb.close()
    assert len(vector) == 384
    assert "dimensions" not in fake_openai.embedding_requests()[0]


async def test_a_wrong_dimension_is_a_clear_permanent_error(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    emb = embedder(fake_openai, fast_retry, model="nomic-embed-text", dim=768, send_dimensions=False)
    with pytest.raises(PermanentEmbeddingError, match=r"384-dimensional vectors but PMEM_EMBEDDING_DIM=768"):
        await emb.embed(["x"])
    await emb.close()


async def test_a_provider_ignoring_dimensions_is_reported(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    fake_openai.script_embeddings(Reply.embedding([[0.1] * 10]))
    emb = embedder(fake_openai, fast_retry)
    with pytest.raises(PermanentEmbeddingError, match="ignored `dimensions`"):
        await emb.embed(["x"])
    await emb.close()


async def test_a_short_answer_is_permanent(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    fake_openai.script_embeddings(Reply.embedding([[0.1] * 64]))
    emb = embedder(fake_openai, fast_retry)
    with pytest.raises(PermanentEmbeddingError, match="1 vectors for 2 inputs"):
        await emb.embed(["x", "y"])
    await emb.close()


async def test_429_then_success(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    fake_openai.script_embeddings(Reply.rate_limited(retry_after_s=0.2))
    emb = embedder(fake_openai, fast_retry)
    [vector] = await emb.embed(["x"])
    await emb.close()
    assert len(vector) == 64
    first, second = fake_openai.requests
    assert second.received_at - first.received_at >= 0.2


async def test_persistent_5xx_is_transient(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    fake_openai.script_embeddings(*[Reply.server_error(502)] * 10)
    emb = embedder(fake_openai, fast_retry)
    with pytest.raises(TransientEmbeddingError, match="HTTP 502") as caught:
        await emb.embed(["x"])
    await emb.close()
    assert caught.value.reason == "server_error"
    assert fake_openai.counters["embeddings"] == fast_retry.max_retries + 1


async def test_bad_request_is_permanent_at_once(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    fake_openai.script_embeddings(Reply.error(400, "This model does not support specifying dimensions."))
    emb = embedder(fake_openai, fast_retry)
    with pytest.raises(PermanentEmbeddingError, match="does not support specifying dimensions"):
        await emb.embed(["x"])
    await emb.close()
    assert fake_openai.counters["embeddings"] == 1


async def test_empty_texts_and_empty_batches(fake_openai: FakeOpenAI, fast_retry: RetryPolicy) -> None:
    emb = embedder(fake_openai, fast_retry)
    assert await emb.embed([]) == []
    assert fake_openai.counters.get("embeddings", 0) == 0
    vectors = await emb.embed(["", "x"])  # the API refuses "", so it is sent as " "
    await emb.close()
    assert len(vectors) == 2
    assert fake_openai.embedding_requests()[0]["input"] == [" ", "x"]


def test_supports_dimensions() -> None:
    assert supports_dimensions("text-embedding-3-large")
    assert supports_dimensions("openai/text-embedding-3-small")
    assert not supports_dimensions("text-embedding-ada-002")
    assert not supports_dimensions("nomic-embed-text")


async def test_build_embedder_from_settings(fake_openai: FakeOpenAI) -> None:
    hashing = build_embedder(Settings(embedding_provider="hashing", embedding_dim=32))
    assert isinstance(hashing, HashingEmbedder) and hashing.dim == 32

    # the embedding endpoint and key default to the LLM's
    settings = Settings(
        embedding_provider="openai",
        llm_base_url=fake_openai.base_url,
        embedding_dim=48,
        **{"PMEM_LLM_API_KEY": "llm-key"},  # the field is read through its alias
    )
    emb = build_embedder(settings)
    assert isinstance(emb, OpenAIEmbedder)
    [vector] = await emb.embed(["hello world"])
    await emb.close()
    assert len(vector) == 48
    assert math.isclose(sum(x * x for x in vector), 1.0, rel_tol=1e-6)
    request = fake_openai.requests[0]
    assert request.headers["authorization"] == "Bearer llm-key"
    assert request.body is not None and request.body["model"] == "text-embedding-3-small"
    assert request.body["dimensions"] == 48

    custom = build_embedder(
        Settings(
            embedding_provider="openai",
            embedding_base_url=fake_openai.base_url,
            embedding_model="nomic-embed-text",
            embedding_dim=384,
        )
    )
    await custom.embed(["x"])
    await custom.close()  # type: ignore[attr-defined]
    assert "dimensions" not in fake_openai.embedding_requests()[-1]


def test_openai_embedder_without_key_or_url_names_the_settings() -> None:
    with pytest.raises(ValueError, match="PMEM_EMBEDDING_API_KEY"):
        OpenAIEmbedder(OpenAIEmbedderConfig())


async def test_close_embedder_closes_an_http_embedders_session_and_skips_one_without_close(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    emb = embedder(fake_openai, fast_retry)
    await emb.embed(["a b"])
    client = emb._client
    assert client.is_open
    await close_embedder(emb)
    assert not client.is_open
    await close_embedder(HashingEmbedder(dim=8))  # nothing to release, no error
