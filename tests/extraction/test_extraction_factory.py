"""build_extractor: PMEM_EXTRACTOR (and its default) picks the implementation."""

from __future__ import annotations

import pytest

from config import Settings
from extraction.factory import build_extractor
from extraction.llm import LLMExtractor
from extraction.rules import RulesExtractor
from extraction.types import ExtractionRequest, TranscriptMessage
from testkit.fake_openai import FakeOpenAI


@pytest.fixture(autouse=True)
def _no_ambient_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "PMEM_LLM_API_KEY", "PMEM_LLM_BASE_URL", "PMEM_EXTRACTOR"):
        monkeypatch.delenv(name, raising=False)


def test_rules_without_any_llm_configuration() -> None:
    assert isinstance(build_extractor(Settings()), RulesExtractor)


def test_explicit_rules_wins_over_a_configured_llm() -> None:
    assert isinstance(
        build_extractor(Settings(extractor="rules", llm_base_url="http://x/v1")), RulesExtractor
    )


async def test_llm_when_a_base_url_is_configured(fake_openai: FakeOpenAI) -> None:
    reasons: list[str] = []
    extractor = build_extractor(
        Settings(llm_base_url=fake_openai.base_url, llm_model="local-model", llm_max_retries=0),
        on_retry=reasons.append,
    )
    assert isinstance(extractor, LLMExtractor)
    request = ExtractionRequest(
        messages=(TranscriptMessage(role="user", content="I'm allergic to peanuts"),),
        allowed_scopes=("user",),
    )
    result = await extractor.extract(request)
    await extractor.close()
    assert [c.key for c in result.candidates] == ["allergy peanuts"]
    assert fake_openai.chat_requests()[0]["model"] == "local-model"


def test_llm_requested_without_key_or_url_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="PMEM_EXTRACTOR=rules"):
        build_extractor(Settings(extractor="llm"))
