"""ProviderClient (the openai SDK's client, raw replies), the HTTP client of the LLM extractor and
the openai embedder, against the fake OpenAI-compatible server: what it sends, and which of the
SDK's exceptions it raises."""

from __future__ import annotations

import socket

import openai
import pytest

from extraction.clients import ProviderClient, provider_client
from testkit.fake_openai import FakeOpenAI, Reply


def client_for(fake: FakeOpenAI, *, key: str = "k", timeout_s: float = 5.0) -> ProviderClient:
    return provider_client(base_url=fake.base_url, api_key=key, timeout_s=timeout_s, missing_key="")


async def test_posts_the_body_as_json_with_the_key_and_returns_the_raw_reply() -> None:
    with FakeOpenAI(require_api_key="secret") as fake:
        client = client_for(fake, key="secret")
        reply = await client.post("/embeddings", {"model": "m", "input": ["a b"], "encoding_format": "float"})
        await client.close()
    assert b'"embedding"' in reply
    assert fake.embedding_requests() == [{"model": "m", "input": ["a b"], "encoding_format": "float"}]


async def test_a_wrong_key_is_the_sdks_authentication_error() -> None:
    with FakeOpenAI(require_api_key="secret") as fake:
        client = client_for(fake, key="wrong")
        with pytest.raises(openai.AuthenticationError) as caught:
            await client.post("/embeddings", {"model": "m", "input": ["a"]})
        await client.close()
    assert caught.value.status_code == 401


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, openai.BadRequestError),
        (404, openai.NotFoundError),
        (422, openai.UnprocessableEntityError),
        (429, openai.RateLimitError),
        (418, openai.APIStatusError),
        (503, openai.InternalServerError),
    ],
)
async def test_a_status_is_the_sdks_exception_with_the_providers_message_and_headers(
    fake_openai: FakeOpenAI, status: int, kind: type[openai.APIStatusError]
) -> None:
    fake_openai.script_chat(Reply.error(status, "slow down, please", headers={"Retry-After": "7"}))
    client = client_for(fake_openai)
    with pytest.raises(kind) as caught:
        await client.post("/chat/completions", {"model": "m", "messages": []})
    await client.close()
    assert type(caught.value) is kind
    assert caught.value.status_code == status
    assert caught.value.message == f"Error code: {status} - slow down, please"
    assert caught.value.response.headers["retry-after"] == "7"
    assert isinstance(caught.value.body, dict) and caught.value.body["message"] == "slow down, please"


async def test_a_status_error_without_a_json_body_keeps_the_text(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply.raw(502, b"<html>bad gateway</html>", content_type="text/html"))
    client = client_for(fake_openai)
    with pytest.raises(openai.InternalServerError) as caught:
        await client.post("/chat/completions", {"model": "m", "messages": []})
    await client.close()
    assert caught.value.message == "Error code: 502"
    assert caught.value.body == "<html>bad gateway</html>"


async def test_a_reply_slower_than_the_timeout_is_the_sdks_timeout(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply.text("late", delay_s=2.0))
    client = client_for(fake_openai, timeout_s=5.0)
    with pytest.raises(openai.APITimeoutError):
        await client.post("/chat/completions", {"model": "m", "messages": []}, timeout_s=0.2)
    await client.close()


async def test_a_hang_up_and_a_closed_port_are_connection_errors_not_timeouts(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script_chat(Reply.hang_up())
    client = client_for(fake_openai)
    with pytest.raises(openai.APIConnectionError) as hung_up:
        await client.post("/chat/completions", {"model": "m", "messages": []})
    await client.close()
    assert not isinstance(hung_up.value, openai.APITimeoutError)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    closed = provider_client(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="k", timeout_s=5.0, missing_key=""
    )
    with pytest.raises(openai.APIConnectionError) as refused:
        await closed.post("/embeddings", {"model": "m", "input": ["a"]})
    await closed.close()
    assert not isinstance(refused.value, openai.APITimeoutError)


async def test_a_closed_client_opens_a_new_session_on_the_next_post(fake_openai: FakeOpenAI) -> None:
    client = client_for(fake_openai)
    await client.post("/embeddings", {"model": "m", "input": ["a"]})
    await client.close()
    await client.post("/embeddings", {"model": "m", "input": ["b"]})
    await client.close()
    assert len(fake_openai.embedding_requests()) == 2


async def test_the_proxy_comes_from_the_environment_unless_no_proxy_covers_the_host(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    # the fake server stands in for the proxy: a host that does not resolve is reached through it
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{fake_openai.port}")
    monkeypatch.setenv("NO_PROXY", "")
    proxied = provider_client(base_url="http://llm.invalid/v1", api_key="k", timeout_s=5.0, missing_key="")
    await proxied.post("/embeddings", {"model": "m", "input": ["a"]})
    await proxied.close()
    assert fake_openai.requests[-1].path.startswith("http://llm.invalid/v1/embeddings")

    monkeypatch.setenv("NO_PROXY", "llm.invalid")
    direct = provider_client(base_url="http://llm.invalid/v1", api_key="k", timeout_s=5.0, missing_key="")
    with pytest.raises(openai.APIConnectionError):
        await direct.post("/embeddings", {"model": "m", "input": ["b"]})
    await direct.close()
    assert len(fake_openai.embedding_requests()) == 1


def test_an_azure_endpoint_gets_the_sdks_azure_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_VERSION", raising=False)
    made = provider_client(
        base_url="https://team.openai.azure.com", api_key="k", timeout_s=1.0, missing_key="fix"
    )
    assert isinstance(made.sdk, openai.AsyncAzureOpenAI)
    assert made.base_url == "https://team.openai.azure.com/openai"
    assert not isinstance(
        client_like_openai := provider_client(
            base_url="http://llm.internal/v1", api_key="k", timeout_s=1.0, missing_key="fix"
        ).sdk,
        openai.AsyncAzureOpenAI,
    )
    assert client_like_openai.max_retries == 0 and made.sdk.max_retries == 0


def test_without_a_base_url_the_client_targets_openai_base_url_or_api_openai_com(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    made = provider_client(base_url=None, api_key="k", timeout_s=1.0, missing_key="fix")
    assert made.base_url == "https://api.openai.com/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://gateway.internal/v1/")
    made = provider_client(base_url=None, api_key="k", timeout_s=1.0, missing_key="fix")
    assert made.base_url == "http://gateway.internal/v1"
    with pytest.raises(ValueError, match="set the key"):
        provider_client(base_url=None, api_key=None, timeout_s=1.0, missing_key="set the key")


async def test_organization_and_project_come_from_the_environment_as_with_the_sdk(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-1")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-2")
    client = client_for(fake_openai)
    await client.post("/embeddings", {"model": "m", "input": ["a"]})
    await client.close()
    headers = {name.lower(): value for name, value in fake_openai.requests[-1].headers.items()}
    assert headers["openai-organization"] == "org-1" and headers["openai-project"] == "proj-2"
    assert headers["authorization"] == "Bearer k"
