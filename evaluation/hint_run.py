"""`pmem eval locomo --unit hint` (the imperative shell): the hint the platform injects, measured
as text. One conversation goes through the product as for `--unit product` (every session through
the pipeline, a reviewer approving what it proposes); then for every question and every token
budget the hint of `store.services.context_recall.hint_in_context` is asked twice: as the platform
asks it (facts and turns), and with turns alone (the baseline: a hint of the transcript only). Each
hint is scored by `evaluation.hint_scoring.hint_result`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evaluation.hint_scoring import hint_result
from evaluation.locomo import Conversation, QuestionResult
from evaluation.product import session_index
from evaluation.product_run import ingest
from store.model import RecallInclude
from store.services.context_recall import ContextRecall

# the recall's `limit` the platform's `POST /v1/hint` asks by default
HINT_RECALL_LIMIT = 20
# the hint as the platform asks it, and the baseline: turns alone
HINT_KINDS: dict[str, tuple[RecallInclude, ...]] = {
    "hint": ("memories", "turns"),
    "turns alone": ("turns",),
}


def row_name(kind: str, budget: int) -> str:
    """A report row: the hint kind at a budget (`hint@1000`, `turns alone@1000`)."""
    return f"{kind}@{budget}"


def row_names(budgets: Sequence[int]) -> tuple[str, ...]:
    """Every report row of a run at `budgets`, the platform's hint first at each budget."""
    return tuple(row_name(kind, budget) for budget in budgets for kind in HINT_KINDS)


@dataclass(frozen=True, kw_only=True, slots=True)
class HintRun:
    """One conversation's outcome: per row the scored questions, the hints as asked (one record per
    question and row) and per event the extraction's usage."""

    results: dict[str, list[QuestionResult]]
    hints: tuple[dict[str, Any], ...]
    usage: tuple[dict[str, int], ...]


async def run_conversation(
    store: Any,
    deps: Any,
    conversation: Conversation,
    *,
    budgets: Sequence[int],
    concurrency: int,
    on_step: Callable[[str], None] = lambda _label: None,
) -> HintRun:
    """Ingest the conversation for a fresh owner (`product_run.ingest`), then ask every question's
    hint at every budget, as the platform asks it and with turns alone, and score each."""
    from store.services.context_recall import hint_in_context

    owner = uuid.uuid4()
    usage = await ingest(store, deps, conversation, owner, on_step=on_step)
    index = session_index(conversation, owner)
    turn_texts = {dia_id: text for turns in index.by_channel.values() for dia_id, text in turns}
    semaphore = asyncio.Semaphore(concurrency)
    label = f"{conversation.sample_id}: hints"
    rows = row_names(budgets)

    async def one(query: str) -> dict[str, str]:
        hints: dict[str, str] = {}
        async with semaphore:
            for budget in budgets:
                for kind, include in HINT_KINDS.items():
                    asked = ContextRecall(
                        user_id=owner,
                        persona_id=None,
                        team_id=None,
                        query=query,
                        limit=HINT_RECALL_LIMIT,
                        include=include,
                    )
                    hints[row_name(kind, budget)] = await hint_in_context(store, asked, max_tokens=budget)
        on_step(label)
        return hints

    asked_hints = await asyncio.gather(*(one(q.question) for q in conversation.questions))
    results: dict[str, list[QuestionResult]] = {row: [] for row in rows}
    records: list[dict[str, Any]] = []
    for question, hints in zip(conversation.questions, asked_hints, strict=True):
        for row in rows:
            scored = hint_result(question, hints[row], turn_texts)
            results[row].append(scored)
            records.append(
                {
                    "sample_id": conversation.sample_id,
                    "question": question.question,
                    "category": question.category_name,
                    "answer": question.answer,
                    "evidence": list(question.evidence),
                    "row": row,
                    "hint": hints[row],
                    "evidence_found": list(scored.ranked[0]),
                }
            )
    return HintRun(results=results, hints=tuple(records), usage=usage)


def steps(conversation: Conversation) -> int:
    """Progress steps `run_conversation` reports: two per event, one per question."""
    events = len({t.session for t in conversation.turns}) * max(1, len(conversation.speakers))
    return 2 * events + len(conversation.questions)
