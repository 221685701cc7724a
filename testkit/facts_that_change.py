"""Facts that change: a fixture of multi-session cases (`data/facts_that_change.json` beside this
module, written for this project) driven through the worker's pipeline
(`worker.pipeline.process_event`) with the real
`LLMExtractor` talking to the fake OpenAI-compatible server, which answers each session with the
case's scripted extraction.

For every case: session 1 states a fact, a reviewer approves what was extracted; session 2 changes it.
A case is right when all of these hold:

1. session 2 leaves the reviewed memory's value alone and proposes the new value as a pending
   revision *of that memory* (same id);
2. after the reviewer approves the revision, recall for the case's question answers with the memory
   showing the new value first, and no recalled text shows the old value;
3. the old value is still in the memory's audit history.

    python bench/facts_that_change.py [--store sqlite|postgres] [--json-out FILE]

Prints the share of cases right and, for a failed case, which check failed."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config import Settings
from evaluation.stores import fresh_store
from extraction.embeddings import HashingEmbedder
from extraction.factory import build_extractor
from testkit.fake_openai import FakeOpenAI, Reply
from worker.events import ConversationEnded
from worker.metrics import Metrics
from worker.pipeline import PipelineDeps, process_event

FIXTURE = Path(__file__).resolve().parent / "data" / "facts_that_change.json"
REVIEWER = "reviewer@example.com"


@dataclass
class CaseResult:
    """Which checks one case passed (`failures` names the others)."""

    case_id: str
    kind: str
    failures: list[str] = field(default_factory=list)

    @property
    def right(self) -> bool:
        return not self.failures


def default_embedder(provider: str | None = None) -> Any:
    """The offline MiniLM when it is installed (or asked for), else the hashing embedder."""
    from evaluation.options import local_embedder_available

    if provider == "hashing" or (provider is None and not local_embedder_available()):
        return HashingEmbedder(dim=384)
    from config import load_settings
    from extraction.embeddings import build_embedder

    return build_embedder(load_settings(embedding_provider="local"))


def load_cases(path: Path = FIXTURE) -> list[dict[str, Any]]:
    """The fixture's cases."""
    cases: list[dict[str, Any]] = json.loads(path.read_text())["cases"]
    return cases


def _event(user: uuid.UUID, session: int, messages: Sequence[dict[str, str]]) -> ConversationEnded:
    return ConversationEnded.model_validate(
        {
            "event_id": uuid.uuid4(),
            "type": "conversation.ended",
            "channel_id": uuid.uuid5(user, f"session {session}"),
            "user_id": user,
            "messages": list(messages),
        }
    )


async def run_case(case: dict[str, Any], store: Any, deps: PipelineDeps, fake: FakeOpenAI) -> CaseResult:
    """Drive one case through the pipeline and the reviewer; check the three outcomes."""
    result = CaseResult(case_id=case["id"], kind=case["kind"])
    user = uuid.uuid4()
    first, later = case["sessions"]
    fake.script_chat(Reply.json({"memories": first["extraction"]}))
    outcome = await process_event(_event(user, 1, first["messages"]), deps)
    written = {w.key: w for w in outcome.written}
    if case["key"] not in written:
        dropped = [(d.reason, getattr(d, "key", "")) for d in outcome.dropped]
        result.failures.append(
            f"session 1 wrote no memory for the key (dropped {dropped}, rejected {outcome.rejected})"
        )
        return result
    memory_id = written[case["key"]].id
    for w in outcome.written:
        await store.review.approve(w.id, actor=REVIEWER)

    fake.script_chat(Reply.json({"memories": later["extraction"]}))
    outcome = await process_event(_event(user, 2, later["messages"]), deps)
    actions = {w.id: w.action for w in outcome.written}
    current = await store.listing.get_by_id(memory_id)
    revisions = await store.review.pending_revisions(memory_id)
    if actions.get(memory_id) != "revision_proposed" or [r.new_value for r in revisions] != [
        case["new_value"]
    ]:
        result.failures.append(f"no pending revision of the reviewed memory (actions {actions})")
    if current is None or current.value != case["old_value"] or current.status != "active":
        result.failures.append("session 2 changed the reviewed memory before review")
    if result.failures:
        return result

    await store.review.approve(memory_id, actor=REVIEWER)
    hits = await store.recall(user, None, case["question"], 5)
    if not hits or hits[0].memory.id != memory_id or hits[0].memory.value != case["new_value"]:
        shown = [(h.memory.key, h.memory.value) for h in hits[:2]]
        result.failures.append(f"recall does not answer with the current value first: {shown}")
    if any(case["old_value"] in f"{h.memory.key} {h.memory.value}" for h in hits):
        result.failures.append("recall still shows the old value")
    history = await store.review.audit_log(memory_id)
    if not any(case["old_value"] in (entry.old_value or "", entry.new_value or "") for entry in history):
        result.failures.append("the old value is not in the audit history")
    return result


async def run_all(store: Any, cases: Sequence[dict[str, Any]]) -> list[CaseResult]:
    """Every case against `store` (its embedder embeds the extracted memories too)."""
    with FakeOpenAI() as fake:
        settings = Settings(
            llm_base_url=fake.base_url, llm_api_key="test", extractor="llm", llm_max_retries=0
        )
        deps = PipelineDeps(
            store=store, extractor=build_extractor(settings), embedder=store.embedder, metrics=Metrics()
        )
        try:
            return [await run_case(case, store, deps, fake) for case in cases]
        finally:
            await deps.extractor.close()


def report(results: Sequence[CaseResult]) -> dict[str, Any]:
    """Share right overall and per kind, and the failures."""
    kinds = sorted({r.kind for r in results})
    return {
        "cases": len(results),
        "right": sum(r.right for r in results),
        "share_right": sum(r.right for r in results) / len(results) if results else 0.0,
        "by_kind": {
            kind: f"{sum(r.right for r in results if r.kind == kind)}/{sum(r.kind == kind for r in results)}"
            for kind in kinds
        },
        "failures": {r.case_id: r.failures for r in results if not r.right},
    }


async def main(argv: list[str] | None = None) -> int:
    """Run the fixture on a fresh store and print the report."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--embedding-provider",
        choices=["local", "hashing"],
        default=None,
        help="default: local (offline MiniLM) when installed, else hashing",
    )
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    embedder = default_embedder(args.embedding_provider)
    async with AsyncExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pmem-facts-")))
        store = await fresh_store(embedder, stack, kind=args.store, data_dir=directory)
        results = await run_all(store, load_cases())
    document = {"store": args.store, "embedder": type(embedder).__name__, **report(results)}
    print(json.dumps(document, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
