"""Extension points of extraction."""

from __future__ import annotations

from typing import Protocol

from extraction.types import ExtractionRequest, ExtractionResult
from store.protocols import Embedder

__all__ = ["Embedder", "Extractor"]


class Extractor(Protocol):
    """Turns one conversation into validated memory candidates (`llm` or `rules`)."""

    async def extract(self, request: ExtractionRequest) -> ExtractionResult: ...

    async def close(self) -> None: ...
