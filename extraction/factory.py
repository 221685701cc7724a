"""Build the configured extractor and embedder from `Settings` (the one place that maps
`PMEM_EXTRACTOR` and `PMEM_EMBEDDING_PROVIDER` to implementations)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from extraction.embeddings import build_embedder
from extraction.errors import RetryPolicy
from extraction.protocols import Extractor

if TYPE_CHECKING:
    from config import Settings

__all__ = ["build_embedder", "build_extractor"]


def build_extractor(
    settings: Settings,
    *,
    retry: RetryPolicy | None = None,
    on_retry: Callable[[str], None] | None = None,
) -> Extractor:
    """`LLMExtractor` or `RulesExtractor` per `settings.effective_extractor`.

    `retry` overrides the retry schedule (default: `PMEM_LLM_MAX_RETRIES` retries with backoff);
    `on_retry(reason)` is called before each LLM retry (for a metrics counter).
    """
    if settings.effective_extractor == "rules":
        from extraction.rules import RulesExtractor

        return RulesExtractor()
    from extraction.llm import LLMConfig, LLMExtractor

    return LLMExtractor(LLMConfig.from_settings(settings, retry=retry), on_retry=on_retry)
