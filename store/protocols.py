"""What the store needs from the outside: an `Embedder`. What the store offers is its own surface:
`store.core.store.CoreStore` and the role objects it holds (`store.review`, `store.turns`, …)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into fixed-size vectors (one per text, same order). `embed` is for what the store
    keeps; an embedder whose model gives queries another role (e5's "query: ") also has
    `embed_queries(texts)`, which recall uses for its query texts (`store.core.base`)."""

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...
