"""Embeddings kept between evaluation runs: a caching wrapper around an embedder, its file (NumPy
`.npz`, read without pickle), and the concatenation of several embedders into one vector."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evaluation.options import EvalOptions
from store.protocols import Embedder

QUERY_ROLE = "\x00query\x00"  # cache key prefix of a query's vector (e5 embeds queries differently)


def load_vectors(path: Path, dim: int | None = None) -> dict[str, list[float]]:
    """The vectors `CachingEmbedder.save` wrote to `path`, by cache key (a query's key starts with
    `QUERY_ROLE`); nothing when the file is missing or unreadable, or its vectors are not `dim`
    long. The file is read without pickle, so a cache file runs no code."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            keys = json.loads(saved["keys"].tobytes().decode("utf-8"))
            vectors = saved["vectors"]
    except (OSError, ValueError, KeyError, UnicodeDecodeError):
        return {}
    if not isinstance(keys, list) or vectors.ndim != 2 or len(keys) != vectors.shape[0]:
        return {}
    if dim is not None and vectors.shape[1] != dim:
        return {}
    return dict(zip(keys, vectors.tolist(), strict=True))


@dataclass
class CachingEmbedder:
    """Wraps an embedder and remembers vectors by text and role (stored text or query), so each
    question is embedded once for all retrievers (and can be embedded in one batch up front).
    `load`/`save` keep the vectors in a file between runs (the evaluation is CPU-bound on the
    embedding model otherwise)."""

    inner: Embedder
    batch_size: int = 128
    cache: dict[str, list[float]] = field(default_factory=dict)

    def load(self, path: Path) -> None:
        """Add the vectors of this dimension saved in `path` by `save` (`load_vectors`)."""
        self.cache.update(load_vectors(path, self.dim))

    def save(self, path: Path) -> None:
        """Write every vector known so far to `path` (atomically): a NumPy `.npz` of the keys (role
        and text, as UTF-8 JSON bytes: texts may hold any character) and a float64 matrix, which
        keeps each vector's floats exactly."""
        path.parent.mkdir(parents=True, exist_ok=True)
        keys = list(self.cache)
        encoded = np.frombuffer(json.dumps(keys).encode("utf-8"), dtype=np.uint8)
        vectors = np.array([self.cache[key] for key in keys], dtype=np.float64).reshape(len(keys), self.dim)
        # one partial file per process: two runs sharing the cache must not rename each other's
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        with partial.open("wb") as handle:
            np.savez(handle, keys=encoded, vectors=vectors)
        partial.replace(path)

    @property
    def dim(self) -> int:
        """The wrapped embedder's dimension."""
        return self.inner.dim

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for stored `texts`, computing only the ones not seen before (in batches)."""
        return await self._cached(texts, "", self.inner.embed)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for recall's query `texts` (the inner embedder's `embed_queries` where it has one)."""
        embed = getattr(self.inner, "embed_queries", None) or self.inner.embed
        return await self._cached(texts, QUERY_ROLE, embed)

    async def _cached(
        self,
        texts: Sequence[str],
        role: str,
        embed: Callable[[Sequence[str]], Awaitable[list[list[float]]]],
    ) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if role + t not in self.cache))
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start : start + self.batch_size]
            for text, vector in zip(chunk, await embed(chunk), strict=True):
                self.cache[role + text] = vector
        return [self.cache[role + t] for t in texts]


@dataclass(frozen=True)
class ConcatenatedEmbedder:
    """Score fusion of several embedders through the one vector column: each text's vector is the
    concatenation of every part's unit vector scaled by 1/√n, so the cosine of two such vectors is
    the mean of the parts' cosines (the store's vector branch ranks by that mean)."""

    parts: tuple[CachingEmbedder, ...]

    @property
    def dim(self) -> int:
        """The sum of the parts' dimensions."""
        return sum(part.dim for part in self.parts)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Concatenated vectors for stored texts."""
        return concatenated([await part.embed(texts) for part in self.parts])

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Concatenated vectors for recall's queries (each part's query role)."""
        return concatenated([await part.embed_queries(texts) for part in self.parts])


def concatenated(per_part: Sequence[Sequence[Sequence[float]]]) -> list[list[float]]:
    """Row-wise concatenation of each part's vectors, each normalised and scaled by 1/√parts."""
    scale = 1.0 / math.sqrt(len(per_part))
    rows: list[list[float]] = []
    for vectors in zip(*per_part, strict=True):
        row: list[float] = []
        for vector in vectors:
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            row.extend(scale * x / norm for x in vector)
        rows.append(row)
    return rows


def cache_file(options: EvalOptions, provider: str, model: str, dim: int) -> Path | None:
    """Where this provider's and model's vectors are kept (None: no cache, or hashing, which is cheap)."""
    if options.embedding_cache is None or provider == "hashing":
        return None
    name = f"{provider}-{model}-{dim}".replace("/", "_")
    # `.npz`: caches of the earlier pickle format (`.pickle`) are not read; those vectors are
    # computed again once
    return options.embedding_cache / f"{name}.npz"
