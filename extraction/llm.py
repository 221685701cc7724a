"""LLMExtractor: extraction through any OpenAI-compatible chat-completions API (imperative shell).

Per conversation: redact the transcript (secrets never leave the process) → render one prompt per
chunk (`extraction.prompt`) → one chat-completions call per chunk with structured output → parse
and validate (`extraction.validate`) → merge the chunks (a later chunk's value wins for the same
key) → screen every candidate for secrets (`extraction.redact`).

Structured output: `response_format={"type": "json_schema", strict}` first. A provider that answers
400/422 mentioning `response_format`/`json_schema` gets JSON mode (`{"type": "json_object"}`)
instead, and one that rejects that too gets no `response_format` at all (the prompt still asks for
JSON only, and the reply is validated either way). The extractor remembers the mode that works
for the rest of its life (one probe per client). The schema is bounded (`maxItems`, `maxLength`,
integer ranges from `ValidationLimits`) so a grammar-constrained server cannot loop past what we
accept, and `max_tokens` is the size of the longest complete reply the schema allows (the array
bound is lowered to fit `max_output_tokens`). A provider whose strict mode refuses the string
length keywords gets the schema without them; one that wants `max_completion_tokens` gets that.

Size failures split the chunk in two (`extraction.prompt.split_prompt`) rather than dropping
anything: a prompt the server refuses as over its context is split again until it fits; a reply
cut off at `max_tokens` (`finish_reason: "length"`) is re-asked once as two halves, and a half cut
off again is a `PermanentExtractionError` naming the fix.

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
from extraction.prompt import PromptBudget, RenderedPrompt, count_tokens, render_prompts, split_prompt
from extraction.redact import redact
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
    merged_and_screened,
    output_json_schema,
    parse_output,
    reply_tokens,
    without_string_lengths,
)
from extraction.wire import MalformedReplyError, chat_body, parse_chat_reply
from store.model import Scope

if TYPE_CHECKING:
    from config import Settings

__all__ = ["LLMConfig", "LLMExtractor", "is_over_context"]


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
    # the reply budget: the schema's array bound is lowered until a complete reply fits, and the
    # size of that reply is sent as max_tokens (PMEM_LLM_MAX_OUTPUT_TOKENS)
    max_output_tokens: int = 4096
    limits: ValidationLimits = DEFAULT_LIMITS

    @classmethod
    def from_settings(cls, settings: Settings, *, retry: RetryPolicy | None = None) -> LLMConfig:
        """Config from `PMEM_LLM_BASE_URL`, `PMEM_LLM_API_KEY`, `PMEM_LLM_MODEL`, timeouts and retries."""
        return cls(
            model=settings.llm_model,
            base_url=settings.llm_base_url,
            api_key=settings.llm_api_key,
            timeout_s=settings.llm_timeout_s,
            retry=retry
            or RetryPolicy(max_retries=settings.llm_max_retries, deadline_s=settings.event_timeout_s),
            max_input_tokens=settings.llm_max_input_tokens,
            max_output_tokens=settings.llm_max_output_tokens,
        )


class _MalformedReply(Exception):
    """The reply did not match the contract; re-asked until the attempts are spent."""


class _Truncated(Exception):
    """The reply was cut off at max_tokens; re-asking the same prompt would be cut off again."""


class _OverContext(Exception):
    """The server refused the prompt as longer than its context window."""


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


def _rejection_text(exc: openai.APIStatusError) -> str:
    return f"{exc.message} {exc.body}".lower() if exc.status_code in (400, 422) else ""


def _rejects_response_format(exc: openai.APIStatusError) -> bool:
    text = _rejection_text(exc)
    return any(marker in text for marker in ("response_format", "json_schema", "structured output"))


def _rejects_string_lengths(exc: openai.APIStatusError) -> bool:
    text = _rejection_text(exc)
    return "maxlength" in text or "minlength" in text


def _wants_max_completion_tokens(exc: openai.APIStatusError) -> bool:
    return "max_completion_tokens" in _rejection_text(exc)


# How servers refuse a prompt longer than their context: llama.cpp (exceed_context_size_error),
# OpenAI and Azure (context_length_exceeded), vLLM ("maximum context length"), LiteLLM
# (ContextWindowExceededError). Ollama truncates the prompt silently instead.
_OVER_CONTEXT_MARKERS = (
    "exceed_context_size",
    "exceeds the available context size",
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "contextwindowexceeded",
)


def is_over_context(exc: openai.APIStatusError) -> bool:
    """Whether the provider refused the request as longer than the model's context window."""
    text = f"{exc.message} {exc.body}".lower() if exc.status_code in (400, 413, 422) else ""
    return any(marker in text for marker in _OVER_CONTEXT_MARKERS)


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
        self._string_lengths = True  # False once the provider refused maxLength in its schema
        self._max_tokens_param = "max_tokens"  # or max_completion_tokens, once asked for it
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
        pending = [(prompt, False) for prompt in prompts]  # (prompt, already split after a cut-off)
        while pending:
            prompt, resplit = pending.pop(0)
            state = _CallState()
            try:
                chunk_candidates, chunk_rejections = await self._extract_chunk(
                    prompt, request.allowed_scopes, state
                )
            except (_OverContext, _Truncated) as exc:
                usage += state.usage
                calls += state.calls
                halves = split_prompt(prompt) if not (resplit and isinstance(exc, _Truncated)) else []
                if not halves:
                    raise self._size_failure(exc, prompt, usage) from exc
                pending[:0] = [(half, resplit or isinstance(exc, _Truncated)) for half in halves]
                continue
            except (TransientError, PermanentExtractionError) as exc:
                exc.usage = usage + state.usage  # tokens already spent, for the worker's metrics
                raise
            usage += state.usage
            calls += state.calls
            retries += state.retries
            candidates.extend(chunk_candidates)
            rejections.extend(chunk_rejections)
        screened, unsafe = merged_and_screened(candidates)
        return ExtractionResult(
            candidates=tuple(screened),
            rejected=(*rejections, *unsafe),
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

    def _size_failure(
        self, exc: Exception, prompt: RenderedPrompt, usage: TokenUsage
    ) -> PermanentExtractionError:
        if isinstance(exc, _Truncated):
            message = (
                f"{self._where}: the reply was cut off at max_tokens again after the transcript was "
                f"split in two ({self._config.max_output_tokens} output tokens allowed); the model "
                "likely repeats itself: use a stronger model, or raise PMEM_LLM_MAX_OUTPUT_TOKENS"
            )
        else:
            message = (
                f"{self._where}: the server refuses even a {prompt.tokens}-token prompt as over its "
                f"context window (the reply needs up to {self._config.max_output_tokens} tokens of it "
                "too); raise the server's context size, or lower PMEM_LLM_MAX_OUTPUT_TOKENS"
            )
        return PermanentExtractionError(message, usage=usage)

    def _schema(self, allowed: Sequence[Scope]) -> dict[str, Any]:
        schema = output_json_schema(
            allowed, self._config.limits, max_reply_tokens=self._config.max_output_tokens
        )
        return schema if self._string_lengths else without_string_lengths(schema)

    def _response_format(self, mode: OutputMode, schema: dict[str, Any]) -> dict[str, Any] | None:
        if mode == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": "memories", "strict": True, "schema": schema},
            }
        if mode == "json_object":
            return {"type": "json_object"}
        return None

    def _max_tokens(self, mode: OutputMode, schema: dict[str, Any]) -> int:
        """The longest complete reply under a schema-constrained mode; the whole budget otherwise."""
        if mode == "json_schema" and self._string_lengths:
            return min(reply_tokens(schema), self._config.max_output_tokens)
        return self._config.max_output_tokens

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
        while True:
            mode = self._mode
            schema = self._schema(allowed)
            extra: dict[str, Any] = {self._max_tokens_param: self._max_tokens(mode, schema)}
            if self._config.temperature is not None:
                extra["temperature"] = self._config.temperature
            state.calls += 1
            body = chat_body(
                model=self._config.model,
                messages=messages,
                response_format=self._response_format(mode, schema),
                extra=extra,
            )
            try:
                reply = parse_chat_reply(await self._client.post("/chat/completions", body))
            except openai.APIStatusError as exc:
                if is_over_context(exc):
                    raise _OverContext(str(exc.message)) from exc
                if self._max_tokens_param == "max_tokens" and _wants_max_completion_tokens(exc):
                    self._max_tokens_param = "max_completion_tokens"
                    continue
                if mode == "json_schema" and self._string_lengths and _rejects_string_lengths(exc):
                    self._string_lengths = False
                    continue
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
            raise _Truncated("the reply was cut off at the output token limit")
        return content or ""

    def _classify(self, exc: openai.OpenAIError) -> TransientExtractionError | PermanentExtractionError:
        return classify_openai_error(
            exc, transient=TransientExtractionError, permanent=PermanentExtractionError, what=self._where
        )

    async def close(self) -> None:
        """Close the HTTP client if this extractor created it."""
        if self._owns_client:
            await self._client.close()
