"""Plain data types of extraction (no I/O): what goes into an extractor and what comes out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from store.model import Memory, Scope

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TranscriptMessage:
    """One message of an ended conversation."""

    role: Role
    content: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ExtractionRequest:
    """Everything an extractor may use for one conversation; owner ids are deliberately absent."""

    messages: tuple[TranscriptMessage, ...]
    allowed_scopes: tuple[Scope, ...]
    existing: tuple[Memory, ...] = ()  # so the LLM reuses keys and the unique index dedups
    prompt_override: str | None = None
    persona_name: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One validated memory candidate: the LLM output contract's item."""

    key: str
    value: str
    confidence: float
    scope: Scope
    # the numbers (from 1, as the prompt numbers the transcript) of the messages it comes from
    evidence: tuple[int, ...] = ()


RejectionCode = Literal[
    "not_an_object",
    "too_many_items",
    "key_missing",
    "key_empty",
    "key_too_many_words",
    "key_too_long",
    "value_empty",
    "value_too_long",
    "confidence_invalid",
    "scope_unknown",
    "scope_not_allowed",
    "secret",
    "refused",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Rejection:
    """A candidate that failed validation or policy: `code` is bounded (a metric label), `reason`
    says it for humans, `raw` is the redacted item (for the one INFO log line)."""

    code: RejectionCode
    reason: str
    raw: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenUsage:
    """Tokens reported by the provider (summed over calls and retried attempts)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ExtractionResult:
    """Validated candidates plus what was rejected, the calls made and the tokens spent."""

    candidates: tuple[Candidate, ...]
    rejected: tuple[Rejection, ...] = ()
    usage: TokenUsage = field(default_factory=TokenUsage)
    llm_calls: int = 0
    retries: int = 0  # LLM attempts that were retried (rate limit, 5xx, timeout, malformed output)
    redacted_secrets: int = 0  # secrets redacted from the transcript before extraction
