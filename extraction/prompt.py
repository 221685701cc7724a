"""Render the extraction prompt within a token budget (pure, apart from reading bundled templates).

One prompt per chunk: a system message (template from `prompts/extraction.md`: instructions, the
allowed scopes, the existing keys so the LLM reuses them, the output shape) and a user message
with (part of) the transcript. A transcript that does not fit `max_input_tokens` together with the
fixed part is SPLIT into chunks at message boundaries (a single huge message at sentence, then
word, then character boundaries); nothing is ever cut off.

A persona's extraction-prompt override replaces only the instructions (what to keep): the rules,
scopes and output contract stay ours, so an admin-edited prompt cannot widen scopes or break the
contract.

Tokens are counted by `store.rules.tokens.count_tokens` (the prompt hint's counter too).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from extraction.errors import PromptBudgetError
from extraction.types import ExtractionRequest, TranscriptMessage
from store.model import SCOPE_PRIORITY, Memory, Scope
from store.rules.tokens import TokenCounter, count_tokens

__all__ = [
    "PromptBudget",
    "RenderedPrompt",
    "TokenCounter",
    "count_tokens",
    "default_instructions",
    "default_template",
    "message_line",
    "render_prompts",
    "render_system",
    "split_prompt",
    "transcript_lines",
]

# Chat-format overhead per request: ~4 tokens per message plus the reply primer (OpenAI's cookbook).
_CHAT_OVERHEAD_TOKENS = 11
# Roles whose messages carry facts worth remembering; system prompts and tool output are left out.
_TRANSCRIPT_ROLES = frozenset({"user", "assistant"})


@dataclass(frozen=True, kw_only=True, slots=True)
class PromptBudget:
    """Token limits of one LLM call. `max_input_tokens` is `PMEM_LLM_MAX_INPUT_TOKENS`."""

    max_input_tokens: int = 6000
    max_existing_keys: int = 40  # most recently updated first
    max_existing_tokens: int = 150  # keeps the fixed part small (benchmark: ≤ transcript + 500)
    min_transcript_tokens: int = 64  # below this per chunk the budget is misconfigured


@dataclass(frozen=True, kw_only=True, slots=True)
class RenderedPrompt:
    """One LLM call's messages and their estimated prompt tokens (chat overhead included)."""

    system: str
    user: str
    chunk_index: int
    chunk_count: int
    tokens: int

    def as_messages(self) -> list[dict[str, str]]:
        """The chat-completions `messages` list."""
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


@functools.cache
def default_template() -> str:
    """The bundled system-message template (`prompts/extraction.md`)."""
    from prompts import load_prompt

    return load_prompt("extraction").strip()


@functools.cache
def default_instructions() -> str:
    """The bundled default "what to keep" instructions (`prompts/extraction_instructions.md`)."""
    from prompts import load_prompt

    return load_prompt("extraction_instructions").strip()


_SCOPE_HELP: dict[Scope, str] = {
    "user": '"user" = about the user, true in any conversation',
    "persona_user": '"persona_user" = about the user in this assistant\'s context only',
    "persona": '"persona" = general knowledge for this assistant, useful to all its users, no personal data',
}


def _scopes_text(allowed: Sequence[Scope]) -> str:
    if list(allowed) == ["user"]:
        return 'always "user"'
    ordered = sorted(allowed, key=lambda scope: SCOPE_PRIORITY[scope])
    return "one of " + "; ".join(_SCOPE_HELP[scope] for scope in ordered)


def _existing_text(
    existing: Sequence[Memory], allowed: Sequence[Scope], budget: PromptBudget, counter: TokenCounter
) -> str:
    """'Existing keys: user: a, b; persona_user: c' — capped by count and tokens, newest first."""
    if budget.max_existing_keys <= 0 or budget.max_existing_tokens <= 0:
        return ""
    by_scope: dict[Scope, list[str]] = {}
    taken = 0
    used = counter("Existing keys (reuse for the same fact): .\n")
    for memory in sorted(existing, key=lambda m: m.updated_at, reverse=True):
        if memory.scope not in allowed or memory.status == "archived":
            continue
        key = " ".join(memory.key.split())  # one line per prompt: no newlines from stored keys
        keys = by_scope.setdefault(memory.scope, [])
        if not key or key in keys:
            continue
        cost = counter(key) + 1 + (0 if keys else counter(memory.scope) + 2)
        if taken >= budget.max_existing_keys or used + cost > budget.max_existing_tokens:
            break
        keys.append(key)
        taken += 1
        used += cost
    parts = [f"{scope}: {', '.join(keys)}" for scope, keys in by_scope.items() if keys]
    if not parts:
        return ""
    return "Existing keys (reuse for the same fact): " + "; ".join(parts) + ".\n"


def render_system(
    request: ExtractionRequest,
    *,
    template: str | None = None,
    budget: PromptBudget | None = None,
    counter: TokenCounter = count_tokens,
    include_existing: bool = True,
) -> str:
    """The system message: template with persona, instructions (override or default), scopes, keys."""
    budget = budget or PromptBudget()
    instructions = (request.prompt_override or "").strip() or default_instructions()
    persona = f' for the assistant "{" ".join(request.persona_name.split())}"' if request.persona_name else ""
    existing = (
        _existing_text(request.existing, request.allowed_scopes, budget, counter) if include_existing else ""
    )
    text = template if template is not None else default_template()
    for placeholder, value in (
        ("{{persona}}", persona),
        ("{{instructions}}", instructions),
        ("{{scopes}}", _scopes_text(request.allowed_scopes)),
        ("{{existing}}", existing),
    ):
        text = text.replace(placeholder, value)
    return text.strip()


def message_line(number: int, role: str, content: str) -> str:
    """One transcript message as the prompt shows it: `[n] role: content`, every further line of
    the content indented, so no text inside a message can start a line that reads as another
    message (`[4] assistant: …`): only a message's first line starts with its number."""
    lines = content.strip().splitlines()  # every line boundary Python knows, not only \n
    rest = "".join(f"\n{CONTINUATION}{line}" for line in lines[1:])
    return f"[{number}] {role}: {lines[0] if lines else ''}{rest}"


# what starts each further line of a message (the prompt says so)
CONTINUATION = "  "


def transcript_lines(messages: Sequence[TranscriptMessage]) -> list[str]:
    """Numbered `[n] role: content` lines for the user and assistant messages, `n` being the
    message's position in the conversation from 1 (what `evidence` cites); system and tool
    messages are skipped, their numbers with them."""
    return [
        message_line(number, message.role, message.content)
        for number, message in enumerate(messages, start=1)
        if message.role in _TRANSCRIPT_ROLES and message.content.strip()
    ]


def _header(index: int, count: int) -> str:
    return "Conversation:\n" if count == 1 else f"Conversation (part {index + 1} of {count}):\n"


_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|\n+")


def _split_text(text: str, budget: int, counter: TokenCounter) -> list[str]:
    """Split one over-long text into pieces of ≤ budget tokens: sentences, then words, then characters."""
    pieces: list[str] = []
    for sentence in (s for s in _SENTENCE_END.split(text) if s):
        if counter(sentence) <= budget:
            pieces.append(sentence)
            continue
        for word in sentence.split(" "):
            if counter(word) <= budget:
                pieces.append(word)
                continue
            start = 0  # one enormous "word" (a pasted blob): hard character windows
            while start < len(word):
                size = max(1, budget * 4)
                while size > 1 and counter(word[start : start + size]) > budget:
                    size //= 2
                pieces.append(word[start : start + size])
                start += size
    return _pack(pieces, budget, counter, joiner=" ")


def _pack(pieces: Sequence[str], budget: int, counter: TokenCounter, *, joiner: str) -> list[str]:
    """Greedily join pieces into groups of ≤ budget tokens (one token per joiner is accounted)."""
    groups: list[str] = []
    current: list[str] = []
    used = 0
    for piece in pieces:
        cost = counter(piece) + 1
        if current and used + cost > budget:
            groups.append(joiner.join(current))
            current, used = [], 0
        current.append(piece)
        used += cost
    if current:
        groups.append(joiner.join(current))
    return groups


def _chunk_transcript(lines: Sequence[str], budget: int, counter: TokenCounter) -> list[str]:
    """Chunks of whole lines where possible; a line over the budget is split with its role repeated."""
    units: list[str] = []
    for line in lines:
        if counter(line) + 1 <= budget:
            units.append(line)
            continue
        role, _, content = line.partition(": ")
        prefix = f"{role} (continued): "
        inner_budget = budget - counter(prefix) - 2
        parts = _split_text(content, inner_budget, counter)
        units.extend([f"{role}: {parts[0]}", *(prefix + part for part in parts[1:])])
    chunks = _pack(units, budget, counter, joiner="\n")
    # The sum of piece counts approximates the joined count; re-split the rare chunk that is over.
    result: list[str] = []
    for chunk in chunks:
        if counter(chunk) <= budget or budget < 16:
            result.append(chunk)
        else:
            result.extend(_chunk_transcript(chunk.split("\n"), budget * 9 // 10, counter))
    return result


def render_prompts(
    request: ExtractionRequest,
    *,
    budget: PromptBudget | None = None,
    template: str | None = None,
    counter: TokenCounter = count_tokens,
) -> list[RenderedPrompt]:
    """All prompts for one conversation: one per chunk, each within `budget.max_input_tokens`.

    Returns [] when the transcript has no user/assistant text. Raises `PromptBudgetError` when the
    fixed part alone leaves less than `min_transcript_tokens` even without the existing keys.
    """
    budget = budget or PromptBudget()
    lines = transcript_lines(request.messages)
    if not lines:
        return []
    header_reserve = counter(_header(998, 999))
    system = ""
    transcript_budget = 0
    for include_existing in (True, False):
        system = render_system(
            request, template=template, budget=budget, counter=counter, include_existing=include_existing
        )
        transcript_budget = budget.max_input_tokens - counter(system) - header_reserve - _CHAT_OVERHEAD_TOKENS
        if transcript_budget >= budget.min_transcript_tokens:
            break
    else:
        raise PromptBudgetError(
            f"the fixed extraction prompt needs {counter(system) + header_reserve + _CHAT_OVERHEAD_TOKENS} "
            f"tokens, leaving {transcript_budget} of PMEM_LLM_MAX_INPUT_TOKENS={budget.max_input_tokens} "
            f"for the transcript (at least {budget.min_transcript_tokens} needed); raise "
            "PMEM_LLM_MAX_INPUT_TOKENS or shorten the persona's extraction prompt"
        )
    chunks = _chunk_transcript(lines, transcript_budget, counter)
    system_tokens = counter(system)
    prompts: list[RenderedPrompt] = []
    for index, chunk in enumerate(chunks):
        user = _header(index, len(chunks)) + chunk
        prompts.append(
            RenderedPrompt(
                system=system,
                user=user,
                chunk_index=index,
                chunk_count=len(chunks),
                tokens=system_tokens + counter(user) + _CHAT_OVERHEAD_TOKENS,
            )
        )
    return prompts


def split_prompt(prompt: RenderedPrompt, counter: TokenCounter = count_tokens) -> list[RenderedPrompt]:
    """`prompt` as two prompts with half of its transcript each (same system message and header),
    for a server that refused it as over its context or cut the reply off. Whole lines where there
    are two or more; a single line is split at sentences, then words. [] when nothing is left to split."""
    header, _, body = prompt.user.partition("\n")
    lines: list[str] = []  # whole messages: a message's indented further lines stay with it
    for line in body.split("\n"):
        if line.startswith(CONTINUATION) and lines:
            lines[-1] += "\n" + line
        elif line:
            lines.append(line)
    if len(lines) >= 2:
        costs = [counter(line) + 1 for line in lines]
        half, used, cut = sum(costs) / 2, 0, 1
        for index, cost in enumerate(costs[:-1]):
            used += cost
            cut = index + 1
            if used >= half:
                break
        halves = ["\n".join(lines[:cut]), "\n".join(lines[cut:])]
    elif lines:
        role, _, content = lines[0].partition(": ")
        pieces = _split_text(content, max(1, counter(content) // 2), counter)
        if len(pieces) < 2:
            return []
        first, rest = pieces[0], " ".join(pieces[1:])
        halves = [f"{role}: {first}", f"{role.removesuffix(' (continued)')} (continued): {rest}"]
    else:
        return []
    system_tokens = prompt.tokens - counter(prompt.user) - _CHAT_OVERHEAD_TOKENS
    return [
        dataclasses.replace(
            prompt,
            user=f"{header}\n{text}",
            tokens=system_tokens + counter(f"{header}\n{text}") + _CHAT_OVERHEAD_TOKENS,
        )
        for text in halves
    ]
