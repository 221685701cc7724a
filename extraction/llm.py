"""LLMExtractor: extraction through any OpenAI-compatible chat-completions API (imperative shell).

Per conversation: redact the transcript (secrets never leave the process) → render one prompt per
chunk (`extraction.prompt`) → one chat-completions call per chunk with structured output → parse
and validate (`extraction.validate`) → merge the chunks (a later chunk's value wins for the same
key) → screen every candidate for secrets (`extraction.redact`).

Structured output: `response_format={"type": "json_schema", strict}` first. A provider that answers
400/422 mentioning `response_format`/`json_schema` gets JSON mode (`{"type": "json_object"}`)
instead, and one that rejects that too gets no `response_format` at all (the prompt still asks for
JSON only, and the reply is validated either way). The extractor remembers the mode that works
for the rest of its life (one probe per client).

Retries (`RetryPolicy.call`; `extraction.clients.ProviderClient` never retries by itself, so
nothing is retried twice): 408/409/429/5xx, timeouts and connection errors are retried with backoff, honouring
`Retry-After` / `retry-after-ms` up to `retry_after_cap_s`; a malformed reply is re-asked with a
one-line correction. When the attempts are spent: `TransientExtractionError` for the transient
kinds (the worker nacks with a delay, then dead-letters) and `PermanentExtractionError` for output
that stayed malformed; other 4xx are permanent at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import openai

from extraction.clients import ProviderClient, provider_client
from extraction.errors import (
    PermanentExtractionError,
    RetryPolicy,
    TransientError,
    TransientExtractionError,
    classify_openai_error,
)
from extraction.prompt import PromptBudget, RenderedPrompt, count_tokens, render_prompts
from extraction.redact import redact, screen_candidate
from extraction.types import (
    Candidate,
    ExtractionRequest,
    ExtractionResult,
    Rejection,
    TokenUsage,
    TranscriptMessage,
)
from extraction.validate import (
    DEFAULT_LIMITS,
    MalformedOutputError,
    ValidationLimits,
    merge_candidates,
    output_json_schema,
    parse_output,
)
from extraction.wire import MalformedReplyError, chat_body, parse_chat_reply
from store.types import Scope

if TYPE_CHECKING:
    from worker.settings import Settings

__all__ = ["LLMConfig", "LLMExtractor"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LLMConfig:
    """How to reach the LLM and how hard to try. `from_settings` maps the `PMEM_LLM_*` variables."""

    model: str
    base_url: str | None = None  # None: OPENAI_BASE_URL or api.openai.com
    api_key: str | None = None
    timeout_s: float = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_input_tokens: int = 6000
    temperature: float | None = None  # None: provider default (some reasoning models reject others)
    max_output_tokens: int | None = None  # sent as max_tokens when set
    limits: ValidationLimits = DEFAULT_LIMITS

    @classmethod
    def from_settings(cls, settings: Settings, *, retry: RetryPolicy | None = None) -> LLMConfig:
        """Config from `PMEM_LLM_BASE_URL`, `PMEM_LLM_API_KEY`, `PMEM_LLM_MODEL`, timeouts and retries."""
        return cls(
            model=settings.llm_model,
            base_url=settings.llm_base_url,
            api_key=settings.llm_api_key,
            timeout_s=settings.llm_timeout_s,
            retry=retry or RetryPolicy(max_retries=settings.llm_max_retries),
            max_input_tokens=settings.llm_max_input_tokens,
        )


class _MalformedReply(Exception):
    """The reply did not match the contract; re-asked until the attempts are spent."""


@dataclass(kw_only=True, slots=True)
class _CallState:
    """Mutable bookkeeping of one chunk's attempts (shell-side only)."""

    usage: TokenUsage = field(default_factory=TokenUsage)
    calls: int = 0
    retries: int = 0
    correction: str | None = None


OutputMode = Literal["json_schema", "json_object", "prompt_only"]
_MODES: tuple[OutputMode, ...] = ("json_schema", "json_object", "prompt_only")
_FALLBACK: dict[OutputMode, OutputMode] = {"json_schema": "json_object", "json_object": "prompt_only"}


def _rejects_response_format(exc: openai.APIStatusError) -> bool:
    if exc.status_code not in (400, 422):
        return False
    text = f"{exc.message} {exc.body}".lower()
    return any(marker in text for marker in ("response_format", "json_schema", "structured output"))


def _redact_messages(messages: Sequence[TranscriptMessage]) -> tuple[tuple[TranscriptMessage, ...], int]:
    redacted: list[TranscriptMessage] = []
    count = 0
    for message in messages:
        text, findings = redact(message.content)
        count += len(findings)
        redacted.append(message if not findings else dataclasses.replace(message, content=text))
    return tuple(redacted), count


class LLMExtractor:
    """`Extractor` backed by an OpenAI-compatible chat-completions endpoint (see the module docstring)."""

    def __init__(
        self,
        config: LLMConfig,
        *,
        client: ProviderClient | None = None,
        template: str | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_retry: Callable[[str], None] | None = None,
    ) -> None:
        """`client` defaults to a `ProviderClient` built from `config` (its retries are ours).

        `template` overrides the bundled system template; `sleep` is injectable for tests;
        `on_retry(reason)` is called before each retry ("rate_limited", "server_error", "timeout",
        "connection", "malformed", …) so the worker can count retries.
        """
        self._config = config
        if client is None:
            client = provider_client(
                base_url=config.base_url,
                api_key=config.api_key,
                timeout_s=config.timeout_s,
                missing_key="the llm extractor needs PMEM_LLM_API_KEY (or OPENAI_API_KEY) for "
                "api.openai.com, or PMEM_LLM_BASE_URL for a local OpenAI-compatible server; "
                "or set PMEM_EXTRACTOR=rules for the offline extractor",
            )
            self._owns_client = True
        else:
            self._owns_client = False
        self._client = client
        self._template = template
        self._sleep = sleep
        self._on_retry = on_retry
        self._mode: OutputMode = "json_schema"
        self._where = f"LLM call to {config.base_url or 'api.openai.com'} (model {config.model})"

    @property
    def output_mode(self) -> OutputMode:
        """How structured output is requested now: json_schema, then json_object, then prompt_only."""
        return self._mode

    @property
    def uses_json_schema(self) -> bool:
        """False once the provider rejected `json_schema` and this extractor fell back."""
        return self._mode == "json_schema"

    async def extract(self, request: ExtractionRequest) -> ExtractionResult:
        """Redact, chunk, call the LLM per chunk, validate, merge and screen (see module docstring)."""
        messages, redacted_count = _redact_messages(request.messages)
        prompts = render_prompts(
            dataclasses.replace(request, messages=messages),
            budget=PromptBudget(max_input_tokens=self._config.max_input_tokens),
            template=self._template,
        )
        usage = TokenUsage()
        calls = retries = 0
        candidates: list[Candidate] = []
        rejections: list[Rejection] = []
        for prompt in prompts:
            state = _CallState()
            try:
                chunk_candidates, chunk_rejections = await self._extract_chunk(
                    prompt, request.allowed_scopes, state
                )
            except (TransientError, PermanentExtractionError) as exc:
                exc.usage = usage + state.usage  # tokens already spent, for the worker's metrics
                raise
            usage += state.usage
            calls += state.calls
            retries += state.retries
            candidates.extend(chunk_candidates)
            rejections.extend(chunk_rejections)
        screened: list[Candidate] = []
        for candidate in merge_candidates(candidates):
            outcome = screen_candidate(candidate)
            if isinstance(outcome, Candidate):
                screened.append(outcome)
            else:
                rejections.append(outcome)
        return ExtractionResult(
            candidates=tuple(screened),
            rejected=tuple(rejections),
            usage=usage,
            llm_calls=calls,
            retries=retries,
            redacted_secrets=redacted_count,
        )

    async def _extract_chunk(
        self, prompt: RenderedPrompt, allowed: Sequence[Scope], state: _CallState
    ) -> tuple[list[Candidate], list[Rejection]]:
        attempts = self._config.retry.max_retries + 1

        def before_sleep(failure: BaseException) -> None:
            state.retries += 1
            if self._on_retry is not None:
                self._on_retry(failure.reason if isinstance(failure, TransientError) else "malformed")

        async def attempt() -> tuple[list[Candidate], list[Rejection]]:
            content = await self._complete(prompt, allowed, state)
            if content is None:  # the model refused; retrying a refusal does not help
                return [], [Rejection(code="refused", reason="the LLM refused to answer", raw="")]
            try:
                return parse_output(content, allowed, limits=self._config.limits)
            except MalformedOutputError as exc:
                state.correction = str(exc)
                raise _MalformedReply(str(exc)) from exc

        try:
            return await self._config.retry.call(
                attempt,
                retry_on=(TransientExtractionError, _MalformedReply),
                sleep=self._sleep,
                before_sleep=before_sleep,
            )
        except TransientExtractionError as exc:
            raise TransientExtractionError(
                f"{exc} (gave up after {state.calls} calls)",
                retry_after_s=exc.retry_after_s,
                reason=exc.reason,
            ) from exc
        except _MalformedReply as exc:
            raise PermanentExtractionError(
                f"{self._where}: the reply stayed malformed after {attempts} attempts ({exc}); "
                "use a model that follows JSON instructions, or raise PMEM_LLM_MAX_RETRIES"
            ) from exc

    def _response_format(self, mode: OutputMode, allowed: Sequence[Scope]) -> dict[str, Any] | None:
        if mode == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": "memories", "strict": True, "schema": output_json_schema(allowed)},
            }
        if mode == "json_object":
            return {"type": "json_object"}
        return None

    async def _complete(
        self, prompt: RenderedPrompt, allowed: Sequence[Scope], state: _CallState
    ) -> str | None:
        """One chat completion (plus the JSON-mode fallback call if needed); returns the content."""
        messages: list[dict[str, str]] = [
            {"role": "system", "content": prompt.system},
            {"role": "user", "content": prompt.user},
        ]
        if state.correction is not None:
            # Short, so a re-ask costs little: the reason, not the whole bad reply.
            messages.append(
                {
                    "role": "user",
                    "content": f"Your previous reply was invalid: {state.correction[:200]}. "
                    'Reply again with only the JSON object {"memories":[…]}.',
                }
            )
        extra: dict[str, Any] = {}
        if self._config.temperature is not None:
            extra["temperature"] = self._config.temperature
        if self._config.max_output_tokens is not None:
            extra["max_tokens"] = self._config.max_output_tokens
        while True:
            mode = self._mode
            state.calls += 1
            body = chat_body(
                model=self._config.model,
                messages=messages,
                response_format=self._response_format(mode, allowed),
                extra=extra,
            )
            try:
                reply = parse_chat_reply(await self._client.post("/chat/completions", body))
            except openai.APIStatusError as exc:
                if mode in _FALLBACK and _rejects_response_format(exc):
                    # remembered: later calls start with the mode that works; never climb back up
                    # when a concurrent call that started in a higher mode fails late
                    fallback = _FALLBACK[mode]
                    if _MODES.index(fallback) > _MODES.index(self._mode):
                        self._mode = fallback
                    continue
                raise self._classify(exc) from exc
            except MalformedReplyError as exc:
                raise _MalformedReply(f"the response body did not parse: {exc}") from exc
            except openai.OpenAIError as exc:
                raise self._classify(exc) from exc
            break

        content = reply.content
        # some compatible servers omit usage: estimate rather than report zero
        state.usage += TokenUsage(
            prompt_tokens=reply.prompt_tokens if reply.prompt_tokens is not None else prompt.tokens,
            completion_tokens=reply.completion_tokens
            if reply.completion_tokens is not None
            else count_tokens(content or ""),
        )
        if not reply.choice:
            raise _MalformedReply("the response has no choices")
        if reply.refusal:
            return None
        if reply.finish_reason == "length":
            raise _MalformedReply("the reply was cut off at the output token limit")
        return content or ""

    def _classify(self, exc: openai.OpenAIError) -> TransientExtractionError | PermanentExtractionError:
        return classify_openai_error(
            exc, transient=TransientExtractionError, permanent=PermanentExtractionError, what=self._where
        )

    async def close(self) -> None:
        """Close the HTTP client if this extractor created it."""
        if self._owns_client:
            await self._client.close()
