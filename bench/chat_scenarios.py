"""The hint on the chat-scenario set (`bench/data/chat_scenarios/`): does the next message's hint
carry the approved fact it needs, is that fact among recall's first 10 items, and is the hint clean.

For each store (Postgres embedded, SQLite in a temporary file) and MiniLM embeddings, every user's
conversations go through the worker's pipeline as `conversation.ended` events of that user and
persona; the extractor answers each conversation with the set's facts first said in it, with their
evidence (a capable extractor's reply), and a reviewer approves or rejects each as the set says.
Then each probe (the user's next message) asks `hint_in_context` and, for recall, the items of
`items_in_context` at limit 10; `evaluation.hint_scoring.score_probe` scores both.

    .venv/bin/python bench/chat_scenarios.py --store postgres --store sqlite

Writes `bench/results/chat_scenarios_<store>.json` (summary per half, every probe's hint, misses
and faults) and prints the summary."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from evaluation.chat_scenarios import (
    SPLITS,
    Scenario,
    extractor_reply,
    load_scenarios,
    restating_texts,
    set_summary,
)
from evaluation.hint_scoring import ProbeScore, scenario_summary, score_probe, words
from extraction.types import ExtractionRequest, ExtractionResult, Rejection
from extraction.validate import merged_and_screened, parse_output
from store.services.context_recall import ContextRecall, items_in_context

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "chat_scenarios"
RESULTS = HERE / "results"
NAMESPACE = uuid.UUID("6f1d3a52-0c4e-4a57-9a43-2f0e8c7b1d11")
DEFAULT_HINT_TOKENS = 1000
RECALL_FIRST = 10
# the recall's `limit` the platform's `POST /v1/hint` asks by default
HINT_RECALL_LIMIT = 20


def _transcript(messages: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((role, content.strip()) for role, content in messages)


class ScenarioExtractor:
    """`Extractor` answering each scenario conversation with its facts (`extractor_reply`)."""

    def __init__(self, scenarios: Sequence[Scenario]) -> None:
        """Index every conversation of `scenarios` by its transcript."""
        self._replies: dict[tuple[tuple[str, str], ...], str] = {}
        for scenario in scenarios:
            for conversation in scenario.conversations:
                key = _transcript([(m.role, m.content) for m in conversation.messages])
                self._replies[key] = extractor_reply(scenario, conversation.id)

    async def extract(self, request: ExtractionRequest) -> ExtractionResult:
        """The conversation's facts as a validated, screened reply."""
        reply = self._replies.get(_transcript([(m.role, m.content) for m in request.messages]))
        if reply is None:
            return ExtractionResult(
                candidates=(), rejected=(Rejection(code="refused", reason="not a scenario", raw=""),)
            )
        candidates, rejections = parse_output(reply, request.allowed_scopes)
        screened, unsafe = merged_and_screened(candidates)
        return ExtractionResult(candidates=tuple(screened), rejected=(*rejections, *unsafe))

    async def close(self) -> None:
        """Nothing to close."""


def ids_of(scenario: Scenario) -> tuple[uuid.UUID, uuid.UUID]:
    """The user's and persona's ids."""
    return uuid.uuid5(NAMESPACE, f"user {scenario.user}"), uuid.uuid5(
        NAMESPACE, f"persona {scenario.persona}"
    )


async def load(store: Any, deps: Any, scenario: Scenario) -> list[str]:
    """Send every conversation through the pipeline and review what it writes as the set says;
    the problems (a fact not written, a write the set does not hold)."""
    from worker.events import ConversationEnded
    from worker.pipeline import process_event

    user_id, persona_id = ids_of(scenario)
    # the pipeline writes keys in its own form ("hotel_budget" → "hotel budget"): match on words
    by_key = {" ".join(words(fact.key)): fact for fact in scenario.facts}
    written: set[str] = set()
    problems: list[str] = []
    for conversation in scenario.conversations:
        count = len(conversation.messages)
        event = ConversationEnded.model_validate(
            {
                "event_id": uuid.uuid5(user_id, conversation.id),
                "type": "conversation.ended",
                "occurred_at": conversation.at,
                "channel_id": uuid.uuid5(user_id, f"channel {conversation.id}"),
                "user_id": user_id,
                "persona_id": persona_id,
                "messages": [
                    {
                        "role": m.role,
                        "content": m.content,
                        "at": conversation.at - timedelta(minutes=2 * (count - n)),
                    }
                    for n, m in enumerate(conversation.messages, start=1)
                ],
            }
        )
        outcome = await process_event(event, deps)
        for dropped in outcome.dropped:
            problems.append(
                f"{scenario.user} {conversation.id}: {dropped.candidate.key} dropped ({dropped.reason})"
            )
        for item in outcome.written:
            fact = by_key.get(" ".join(words(item.key)))
            if fact is None:
                problems.append(f"{scenario.user}: wrote {item.key}, which the set does not hold")
                continue
            written.add(" ".join(words(item.key)))
            if fact.status == "approved":
                await store.review.approve(item.id, actor="bench")
            else:
                await store.review.reject(item.id, actor="bench")
    problems.extend(f"{scenario.user}: {key} never written" for key in by_key if key not in written)
    return problems


async def ask(store: Any, scenario: Scenario, *, max_tokens: int) -> list[tuple[ProbeScore, str]]:
    """Every probe's hint and recall, scored; with the hint text."""
    from store.services.context_recall import hint_in_context

    user_id, persona_id = ids_of(scenario)
    scored: list[tuple[ProbeScore, str]] = []
    for probe in scenario.probes:
        asked = ContextRecall(
            user_id=user_id, persona_id=persona_id, team_id=None, query=probe.message, limit=HINT_RECALL_LIMIT
        )
        hint = await hint_in_context(store, asked, max_tokens=max_tokens)
        items = await items_in_context(
            store,
            ContextRecall(
                user_id=user_id, persona_id=persona_id, team_id=None, query=probe.message, limit=RECALL_FIRST
            ),
        )
        values = [item.memory.value for item in items[:RECALL_FIRST] if item.memory is not None]
        score = score_probe(
            probe=probe.id,
            user=scenario.user,
            split=scenario.split,
            hint=hint,
            recalled_values=values,
            needed=[scenario.fact(n).value for n in probe.needs],
            filler=scenario.filler_texts(),
            rejected=scenario.rejected_values(),
            restating=restating_texts(scenario, probe),
        )
        scored.append((score, hint))
    return scored


async def run_store(kind: str, scenarios: Sequence[Scenario], *, max_tokens: int) -> dict[str, Any]:
    """Load the set into a fresh store of `kind` and score every probe."""
    from config import load_settings
    from evaluation.cache import CachingEmbedder
    from evaluation.stores import fresh_store
    from extraction.embeddings import build_embedder, close_embedder
    from worker.metrics import Metrics
    from worker.pipeline import PipelineDeps

    settings = load_settings(embedding_provider="local")
    embedder = CachingEmbedder(build_embedder(settings), batch_size=settings.embedding_batch_size)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(close_embedder, embedder.inner)
        await embedder.inner.embed(["warm-up"])
        store = await fresh_store(embedder, stack, kind=kind)
        deps = PipelineDeps(
            store=store, extractor=ScenarioExtractor(scenarios), embedder=embedder, metrics=Metrics()
        )
        problems: list[str] = []
        for scenario in scenarios:
            problems.extend(await load(store, deps, scenario))
        probes: list[tuple[ProbeScore, str]] = []
        for scenario in scenarios:
            probes.extend(await ask(store, scenario, max_tokens=max_tokens))
    by_split = {
        split: scenario_summary([score for score, _ in probes if score.split == split]) for split in SPLITS
    }
    return {
        "store": kind,
        "embedder": "local (all-MiniLM-L6-v2)",
        "hint_tokens": max_tokens,
        "recall_first": RECALL_FIRST,
        "set": set_summary(scenarios),
        "load_problems": problems,
        "summary": by_split,
        "probes": [{**asdict(score), "hint": hint} for score, hint in probes],
    }


def misses(report: dict[str, Any]) -> list[str]:
    """One line per probe that missed its fact (hint or recall) or whose hint has a fault."""
    lines = []
    for probe in report["probes"]:
        faults = {kind: probe["faults"][kind] for kind in probe["faults"] if probe["faults"][kind]}
        if probe["needed_in_hint"] and probe["needed_in_recall"] and not faults:
            continue
        parts = []
        if not probe["needed_in_hint"]:
            parts.append(f"hint lacks {probe['missing_from_hint']}")
        if not probe["needed_in_recall"]:
            parts.append(f"recall top {RECALL_FIRST} lacks {probe['missing_from_recall']}")
        if faults:
            parts.append(f"faults {faults}")
        lines.append(f"  [{probe['split']}] {probe['probe']}: " + "; ".join(parts))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Run the set on the chosen stores, write the results, print the summary and every miss."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", action="append", choices=("postgres", "sqlite"))
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_HINT_TOKENS, help="the hint's size limit")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    scenarios = load_scenarios(args.data)
    for kind in args.store or ["postgres", "sqlite"]:
        report = asyncio.run(run_store(kind, scenarios, max_tokens=args.max_tokens))
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"chat_scenarios_{kind}.json"
        path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{kind} (hint {args.max_tokens} tokens) → {path}")
        for problem in report["load_problems"]:
            print(f"  load: {problem}")
        for split, summary in report["summary"].items():
            print(f"  {split}: {json.dumps(summary)}")
        print("\n".join(misses(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
