"""Embedders behind the `Embedder` protocol: `openai` (any /v1/embeddings), `local`
(sentence-transformers, offline MiniLM) and `hashing` (dependency-free, for tests)."""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

_TOKEN = re.compile(r"[a-z0-9]+")


def hashing_vector(text: str, dim: int) -> list[float]:
    """Unit-length bag of word unigrams and bigrams hashed into `dim` buckets (signed)."""
    tokens = _TOKEN.findall(text.lower())
    features = tokens + [f"{a} {b}" for a, b in itertools.pairwise(tokens)]
    vector = [0.0] * dim
    for feature in features:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % dim
        vector[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        return vector
    return [x / norm for x in vector]


@dataclass(frozen=True, kw_only=True, slots=True)
class HashingEmbedder:
    """Deterministic lexical embedder: no model, no network. Similar wording → similar vectors."""

    dim: int = 384

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One hashed vector per text."""
        return [hashing_vector(text, self.dim) for text in texts]
