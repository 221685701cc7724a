"""The redactor's cost on hostile text, and the worker's throughput on hostile events.

1. Every hostile shape of `testkit/hostile_text.py` (each repeats the start of one secret
   pattern, so a scanner that restarts inside its own run or backtracks over it pays
   quadratically) at 4,000 / 20,000 / 100,000 characters, through `admit` (the gate every door
   uses: invisible characters, whitespace fold, secret detection, redaction). CPU time of this
   process (`time.process_time`), best of `--repeat`: on a shared machine the other processes'
   load is not the scanner's cost. Targets for the worst shape: 5 / 20 / 100 ms.
2. The worker's pipeline (`worker.pipeline.process_event`: redaction of the transcript, the LLM
   call, screening, embeddings, the write) on `--events` events of `--messages` messages of
   `--chars` characters each: hostile (the shapes the gate's review used: `-eyJ` repeated and
   `1 ` repeated, alternating) against benign chat text of the same size. The LLM is the fake
   OpenAI-compatible server (testkit/fake_openai.py, its rule-based responder, no added
   latency), over real HTTP with the real `openai` client; the store is SQLite in a temporary
   directory; embeddings are the hashing embedder. Wall time per event, best of the events
   (sequential, one at a time). Target: hostile within 1.5x of benign.

    python bench/redactor_cost.py                      # both parts
    python bench/redactor_cost.py --events 3 --messages 10 --chars 20000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# testkit is not installed with the package: run from a checkout, found beside bench/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config import Settings
from extraction.embeddings import HashingEmbedder
from extraction.factory import build_extractor
from store.migrate import migrate_async
from store.rules.admission import admit
from store.sqlite.store import SqliteMemoryStore
from testkit.fake_openai import FakeOpenAI
from testkit.hostile_text import HOSTILE_SHAPES, benign_text, hostile_text
from worker.events import ConversationEnded
from worker.metrics import Metrics
from worker.pipeline import PipelineDeps, process_event

SIZES = (4_000, 20_000, 100_000)
TARGETS_MS = (5.0, 20.0, 100.0)


def cpu_ms(text: str, repeat: int) -> float:
    """The best CPU time of `admit(text)` over `repeat` runs, in ms."""
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        admit(text)
        best = min(best, time.process_time() - started)
    return best * 1000


def pattern_table(repeat: int) -> None:
    """Part 1: every shape at every size."""
    print("| shape | " + " | ".join(f"{size:,} chars" for size in SIZES) + " |")
    print("|---|" + "---:|" * len(SIZES))
    worst = [0.0] * len(SIZES)
    for shape in HOSTILE_SHAPES:
        costs = [cpu_ms(hostile_text(shape, size), repeat) for size in SIZES]
        worst = [max(w, c) for w, c in zip(worst, costs, strict=True)]
        print(f"| {shape} | " + " | ".join(f"{c:.1f} ms" for c in costs) + " |")
    benign = [cpu_ms(benign_text(size), repeat) for size in SIZES]
    print("| benign chat text | " + " | ".join(f"{c:.1f} ms" for c in benign) + " |")
    print("| **worst shape** | " + " | ".join(f"**{c:.1f} ms**" for c in worst) + " |")
    print("| target | " + " | ".join(f"≤ {t:.0f} ms" for t in TARGETS_MS) + " |")
    met = all(c <= t for c, t in zip(worst, TARGETS_MS, strict=True))
    print(f"\nworst shape within the targets: {'yes' if met else 'NO'}")


def event(messages: list[str]) -> ConversationEnded:
    """A conversation.ended event of `messages`, user and assistant in turn."""
    at = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)
    body: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "type": "conversation.ended",
        "occurred_at": at.isoformat(),
        "team_id": str(uuid.uuid4()),
        "channel_id": str(uuid.uuid4()),
        "user_id": str(uuid.uuid4()),
        "persona_id": None,
        "messages": [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": text,
                "at": (at + timedelta(seconds=i)).isoformat(),
            }
            for i, text in enumerate(messages)
        ],
    }
    return ConversationEnded.model_validate(body)


async def pipeline_seconds(
    events: list[ConversationEnded], fake: FakeOpenAI, directory: str, name: str
) -> float:
    """The best wall time of one event through the pipeline, events run one at a time."""
    url = f"sqlite:///{directory}/{name}.db"
    embedder = HashingEmbedder(dim=64)
    await migrate_async(url, embedder.dim)
    store = SqliteMemoryStore(url, embedder)
    settings = Settings(llm_base_url=fake.base_url, llm_api_key="bench", database_url=url)
    extractor = build_extractor(settings)
    deps = PipelineDeps(store=store, extractor=extractor, embedder=embedder, metrics=Metrics())
    best = float("inf")
    try:
        for one in events:
            started = time.perf_counter()
            await process_event(one, deps)
            best = min(best, time.perf_counter() - started)
    finally:
        await extractor.close()
        await store.close()
    return best


async def throughput(events: int, messages: int, chars: int) -> None:
    """Part 2: hostile events against benign ones of the same size."""
    hostile_shapes = ("jwt-restart", "card-single-digits")
    hostile = [
        event([hostile_text(hostile_shapes[i % 2], chars) for i in range(messages)]) for _ in range(events)
    ]
    benign = [event([benign_text(chars) for _ in range(messages)]) for _ in range(events)]
    with tempfile.TemporaryDirectory(prefix="pmem-redactor-") as directory, FakeOpenAI() as fake:
        await pipeline_seconds(benign[:1], fake, directory, "warm-up")
        benign_s = await pipeline_seconds(benign, fake, directory, "benign")
        hostile_s = await pipeline_seconds(hostile, fake, directory, "hostile")
    ratio = hostile_s / benign_s
    print(f"\n{events} events of {messages} messages x {chars:,} characters, one at a time (best event):")
    print("| events | seconds per event | events per second |")
    print("|---|---:|---:|")
    print(f"| benign | {benign_s:.3f} | {1 / benign_s:.2f} |")
    print(f"| hostile (`-eyJ`…, `1 `…) | {hostile_s:.3f} | {1 / hostile_s:.2f} |")
    print(f"\nhostile / benign: {ratio:.2f}x (target ≤ 1.5x): {'yes' if ratio <= 1.5 else 'NO'}")


def main() -> None:
    """Run the parts asked for."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs per shape and size (best counts)")
    parser.add_argument("--events", type=int, default=3)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--chars", type=int, default=20_000)
    parser.add_argument("--patterns-only", action="store_true")
    parser.add_argument("--pipeline-only", action="store_true")
    args = parser.parse_args()
    if not args.pipeline_only:
        pattern_table(args.repeat)
    if not args.patterns_only:
        asyncio.run(throughput(args.events, args.messages, args.chars))


if __name__ == "__main__":
    main()
