"""`pmem eval locomo --unit product` (the imperative shell): one LoCoMo conversation through the
product as a user runs it. Its sessions go through the worker's per-event pipeline as
`conversation.ended` events (each speaker in turn as the user, default settings, the configured
extractor) for a fresh owner; a reviewer approves what the pipeline proposes, as for `--unit
extracted`; every question then goes through the recall `POST /v1/recall` uses
(`store.services.context_recall.items_in_context`) and is scored by `evaluation.product`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evaluation.extracted import session_events
from evaluation.locomo import Conversation, QuestionResult
from evaluation.product import (
    Include,
    Quote,
    Recalled,
    evidence_quotes,
    include_kinds,
    question_result,
    session_index,
)
from store.model import RecallItem
from store.rules.hint import dated_bullet, dated_turn_line
from store.services.context_recall import ContextRecall, items_in_context


@dataclass(frozen=True, kw_only=True, slots=True)
class ProductRun:
    """One conversation's outcome: per question its scored result and the recalled items (best
    first), and per event the tokens, LLM calls and memories written."""

    results: tuple[QuestionResult, ...]
    recalled: tuple[tuple[Recalled, ...], ...]
    usage: tuple[dict[str, int], ...]


@dataclass(frozen=True, slots=True)
class WithoutEvidence:
    """An extractor whose candidates lose their evidence numbers: the pipeline as it was before
    memories kept what was said (the `--no-evidence` ablation)."""

    inner: Any  # extraction's Extractor

    async def extract(self, request: Any) -> Any:
        """The inner extractor's result, every candidate without evidence."""
        result = await self.inner.extract(request)
        return replace(result, candidates=tuple(replace(c, evidence=()) for c in result.candidates))

    async def close(self) -> None:
        """Close the inner extractor."""
        await self.inner.close()


def recalled_of(item: RecallItem) -> Recalled:
    """The evaluation's view of one item of the product's recall; each reads as the hint shows it.
    A turn reads `[day] speaker: text` (`store.hint.dated_turn_line`) and stands for itself (its
    conversation and position, numbered from 1). A memory reads `key: value (said day) — "what was
    said"` (`store.rules.hint.dated_bullet`: the hint quotes its evidence, clipped) and stands for
    the messages of its evidence."""
    if item.turn is not None:
        turn = item.turn
        quote = Quote(channel_id=turn.channel_id, position=turn.position - 1, text=turn.text)
        return Recalled(kind="turn", text=dated_turn_line(turn), quotes=(quote,))
    if item.memory is None:
        raise ValueError(f"a recall item of kind {item.kind!r} carries neither a memory nor a turn")
    memory = item.memory
    return Recalled(
        kind="memory",
        text=dated_bullet(memory).removeprefix("- "),
        quotes=evidence_quotes(memory.evidence, memory.source_channel_id),
    )


async def run_conversation(
    store: Any,
    deps: Any,
    conversation: Conversation,
    *,
    includes: Sequence[Include],
    limit: int,
    concurrency: int,
    on_step: Callable[[str], None] = lambda _label: None,
) -> dict[Include, ProductRun]:
    """`ingest` the conversation for a fresh owner, then `ask` every question once per include.
    `on_step` is called once per event, once per approval pass and once per question asked."""
    owner = uuid.uuid4()
    usage = await ingest(store, deps, conversation, owner, on_step=on_step)
    return {
        include: await ask(
            store,
            conversation,
            owner,
            include=include,
            limit=limit,
            concurrency=concurrency,
            on_step=on_step,
            usage=usage,
        )
        for include in includes
    }


async def ingest(
    store: Any,
    deps: Any,
    conversation: Conversation,
    owner: uuid.UUID,
    *,
    on_step: Callable[[str], None] = lambda _label: None,
) -> tuple[dict[str, int], ...]:
    """Send the conversation's sessions through the pipeline (`deps`: `worker.pipeline.PipelineDeps`)
    for `owner` and approve what it proposes; per event, the tokens, LLM calls and memories written."""
    from worker.pipeline import process_event

    label = f"{conversation.sample_id}: through the pipeline"
    registry = deps.metrics.registry
    usage: list[dict[str, int]] = []
    for item in session_events(conversation, owner):
        calls_before = registry.get_sample_value("pmem_llm_calls_total") or 0.0
        outcome = await process_event(item.event, deps)
        calls = (registry.get_sample_value("pmem_llm_calls_total") or 0.0) - calls_before
        usage.append(
            {
                "prompt_tokens": outcome.usage.prompt_tokens,
                "completion_tokens": outcome.usage.completion_tokens,
                "llm_calls": int(calls),
                "written": len(outcome.written),
            }
        )
        on_step(label)
        # a reviewer approves what the worker proposed (new memories and revisions of earlier ones)
        for written in outcome.written:
            await store.review.approve(written.id, actor="pmem-eval")
        on_step(label)
    return tuple(usage)


async def ask(
    store: Any,
    conversation: Conversation,
    owner: uuid.UUID,
    *,
    include: Include,
    limit: int,
    concurrency: int,
    on_step: Callable[[str], None] = lambda _label: None,
    usage: tuple[dict[str, int], ...] = (),
) -> ProductRun:
    """Ask every question of `conversation` through the product's recall for `owner` at `limit`
    (`concurrency` in flight) and score it."""
    semaphore = asyncio.Semaphore(concurrency)
    label = f"{conversation.sample_id}: recalling"

    async def one(query: str) -> tuple[Recalled, ...]:
        async with semaphore:
            items = await product_recall(store, owner=owner, query=query, limit=limit, include=include)
        on_step(label)
        return items

    recalled = await asyncio.gather(*(one(q.question) for q in conversation.questions))
    index = session_index(conversation, owner)
    results = tuple(
        question_result(q, items, index) for q, items in zip(conversation.questions, recalled, strict=True)
    )
    return ProductRun(results=results, recalled=tuple(recalled), usage=usage)


async def product_recall(
    store: Any, *, owner: uuid.UUID, query: str, limit: int, include: Include
) -> tuple[Recalled, ...]:
    """The product's recall for `owner` outside any persona or team, as the evaluation reads it: `limit`
    memories, then `limit` turns."""
    asked = ContextRecall(
        user_id=owner,
        persona_id=None,
        team_id=None,
        query=query,
        limit=limit,
        turn_limit=limit,
        include=include_kinds(include),
    )
    items = await items_in_context(store, asked)
    return tuple(recalled_of(item) for item in items)


def steps(conversation: Conversation, includes: int = 1) -> int:
    """Progress steps `run_conversation` reports for one conversation asked `includes` ways."""
    events = len({t.session for t in conversation.turns}) * max(1, len(conversation.speakers))
    return 2 * events + includes * len(conversation.questions)
