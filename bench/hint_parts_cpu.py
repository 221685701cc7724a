"""CPU of the pure parts of a hint and a recall, on the inputs real requests gave them.

`hints` times `hint_in_context` itself in this process (no HTTP): process CPU and wall per
hint, `--concurrency` at a time, with the hashing embedder or a local model (`--embedder`; the
stored vectors' identity is not checked, only CPU is measured; `--unbatched`: one model call per
query text, as before queries waiting for the model shared its next call).

`capture` serves the data of `bench/api_load.py --data-dir D` in this process (the ASGI app through
httpx, no sockets), sends N hints and N recalls, and records the inputs of the pure functions the
platform's answers run through (the memory recall's row grouping and fusions, the turn fusion,
recall's list, the hint) into a pickle. `replay` times each function on them (process CPU, best of
5, µs per call) and, with `--compare`, checks that every output equals the one saved by an earlier
`replay --save` (a speed-up must not change an answer).

    python bench/hint_parts_cpu.py hints --data-dir D --requests 300 [--texts T]     # T: the hints' texts
    python bench/hint_parts_cpu.py hints --data-dir D --requests 160 --concurrency 4 \
        --embedder all-MiniLM-L6-v2 [--unbatched]
    python bench/hint_parts_cpu.py capture --data-dir D --requests 100 --out /tmp/parts.pkl
    python bench/hint_parts_cpu.py replay /tmp/parts.pkl --save /tmp/before.pkl      # before a change
    python bench/hint_parts_cpu.py replay /tmp/parts.pkl --compare /tmp/before.pkl   # after it

The pickles are this tool's own files (never load one from elsewhere). Not part of the test suite.
Results: bench/README.md, "Platform load".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

import store.postgres.backend as pg_backend
import store.postgres.recall as pg_recall
import store.services.context_recall as context_recall
from bench.api_latency import SECRET
from bench.api_load import bodies, population_of
from cli.embedded import EmbeddedPostgres
from store.rules import hint, recall, turn_recall

Call = tuple[tuple[Any, ...], dict[str, Any]]

# name -> (the modules its callers look it up in, the function)
PARTS: dict[str, tuple[tuple[Any, ...], Callable[..., Any]]] = {
    "recall_rows": ((pg_recall,), pg_recall.recall_rows),
    "fuse_scores": ((pg_recall,), recall.fuse_scores),
    "fuse": ((pg_recall,), recall.fuse),
    "fuse_turn_scores": ((pg_backend,), turn_recall.fuse_turn_scores),
    "facts_then_turns": ((context_recall,), turn_recall.facts_then_turns),
    "build_hint": ((context_recall,), hint.build_hint),
}


def _recording(calls: dict[str, list[Call]], name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def recorded(*args: Any, **kwargs: Any) -> Any:
        if name == "recall_rows":
            args = ([dict(row) for row in args[0]],)  # psycopg's rows as plain dicts
        calls[name].append((args, kwargs))
        return function(*args, **kwargs)

    return recorded


async def capture(data_dir: Path, requests: int) -> dict[str, list[Call]]:
    """Serve `data_dir`'s database in-process, send the requests; the recorded calls."""
    from cli.commands.serve import build_app
    from cli.commands.store_session import opened_store
    from config import load_settings

    calls: dict[str, list[Call]] = defaultdict(list)
    for name, (modules, function) in PARTS.items():
        for module in modules:
            setattr(module, name, _recording(calls, name, function))
    primary = EmbeddedPostgres(data_dir=data_dir / "pg").start()
    try:
        os.environ.update(PMEM_DATABASE_URL=primary.url_for("bench"), PMEM_AUTH_JWT_SECRET=SECRET)
        settings = load_settings()
        headers = {"Authorization": f"Bearer {(data_dir / 'key').read_text()}"}
        population = population_of(100, 7)
        async with opened_store(settings, read_replicas=False, steady_pool=True) as store:
            transport = httpx.ASGITransport(app=build_app(store, settings, insecure_dev=False))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://bench", headers=headers
            ) as http:
                for endpoint in ("/v1/hint", "/v1/recall"):
                    for body in bodies(population, requests, 7 + len(endpoint)):
                        (await http.post(endpoint, json=body)).raise_for_status()
    finally:
        primary.stop()
    return dict(calls)


# the budgets `hints --texts` writes each hint at: around the default 1,500 and where a context's
# facts by standing begin to fit
TEXT_BUDGETS = (300, 700, 1000, 1500, 2000, 3000, 4000, 6000, 9000)


async def hints(
    data_dir: Path, requests: int, concurrency: int, embedder: str, unbatched: bool, texts: Path | None
) -> None:
    """Process CPU and wall per `hint_in_context`, `concurrency` at a time, distinct queries;
    with `texts`, then every timed hint's text at each of `TEXT_BUDGETS` into that file (one JSON
    string a line), to compare two codes' hints."""
    import uuid

    import extraction.embeddings as embeddings
    import store.core.embedding_models as embedding_models
    from cli.commands.store_session import opened_store
    from config import load_settings
    from store.services.context_recall import ContextRecall, hint_in_context
    from store.services.settings_cache import SettingsCache

    async def unchecked(self: Any) -> None:
        return None  # the stored vectors may be another model's: only CPU is measured

    embedding_models.EmbeddingModels.check_embedding_identity = unchecked  # type: ignore[method-assign]
    if unbatched:
        embeddings.LocalEmbedder.one_batch_at_a_time = False
    primary = EmbeddedPostgres(data_dir=data_dir / "pg").start()
    try:
        os.environ.update(PMEM_DATABASE_URL=primary.url_for("bench"), PMEM_AUTH_JWT_SECRET=SECRET)
        if embedder != "hashing":
            os.environ.update(PMEM_EMBEDDING_PROVIDER="local", PMEM_EMBEDDING_MODEL=embedder)
        population = population_of(100, 7)
        async with opened_store(load_settings(), read_replicas=False, steady_pool=True) as store:
            settings = SettingsCache(ttl_s=5.0)

            def asked(body: dict[str, object], index: int) -> ContextRecall:
                # a distinct query each: no query vector remembered from another request
                return ContextRecall(
                    user_id=uuid.UUID(str(body["user_id"])),
                    persona_id=None,
                    team_id=None,
                    query=f"{body['query']} ({index})",
                    limit=10,
                )

            async def hint(body: dict[str, object], index: int) -> None:
                await hint_in_context(store, asked(body, index), max_tokens=1500, settings=settings)

            for index, body in enumerate(bodies(population, 20, 99)):  # warm: pool, statements, model
                await hint(body, -index)
            work = bodies(population, requests, 1234)
            cpu, wall = time.process_time(), time.perf_counter()
            for start in range(0, requests, concurrency):
                await asyncio.gather(
                    *(hint(b, start + i) for i, b in enumerate(work[start : start + concurrency]))
                )
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            if texts is not None:
                with texts.open("w") as out:
                    for index, body in enumerate(work):
                        for budget in TEXT_BUDGETS:
                            text = await hint_in_context(
                                store, asked(body, index), max_tokens=budget, settings=settings
                            )
                            out.write(json.dumps(text) + "\n")
    finally:
        primary.stop()
    print(
        f"{embedder}{' unbatched' if unbatched else ''}, {concurrency} at a time: "
        f"CPU {cpu * 1000 / requests:.2f} ms a hint, wall {wall * 1000 / requests:.2f} ms a hint"
    )


def _comparable(name: str, output: Any) -> Any:
    if name == "recall_rows":
        return (output.memories, output.ranks, output.scores, output.pending)
    return output


def replay(path: Path, save: Path | None, compare: Path | None) -> int:
    """Time each part on the captured calls; save or compare their outputs."""
    calls: dict[str, Sequence[Call]] = pickle.loads(path.read_bytes())
    outputs: dict[str, list[Any]] = {}
    for name, (_, function) in PARTS.items():
        found = calls.get(name, ())
        if not found:
            continue
        outputs[name] = [_comparable(name, function(*args, **kwargs)) for args, kwargs in found]
        best = float("inf")
        for _ in range(5):
            started = time.process_time()
            for args, kwargs in found:
                function(*args, **kwargs)
            best = min(best, time.process_time() - started)
        print(f"{name:18s} {best * 1e6 / len(found):8.1f} µs per call ({len(found)} calls)")
    if save is not None:
        save.write_bytes(pickle.dumps(outputs))
    if compare is not None:
        before = pickle.loads(compare.read_bytes())
        different = [name for name in outputs if outputs[name] != before.get(name)]
        print("outputs:", "the same" if not different else f"DIFFERENT in {different}")
        return 1 if different else 0
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments; capture or replay."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    timed = commands.add_parser("hints", help="CPU per hint_in_context, in this process")
    timed.add_argument("--data-dir", type=Path, required=True, help="bench/api_load.py's --data-dir")
    timed.add_argument("--requests", type=int, default=300)
    timed.add_argument("--concurrency", type=int, default=1)
    timed.add_argument("--embedder", default="hashing", help="hashing, or a local model (all-MiniLM-L6-v2)")
    timed.add_argument("--unbatched", action="store_true", help="one model call per query text")
    timed.add_argument("--texts", type=Path, help="then write each hint's text at several budgets here")
    taking = commands.add_parser("capture", help="record the parts' inputs from real requests")
    taking.add_argument("--data-dir", type=Path, required=True, help="bench/api_load.py's --data-dir")
    taking.add_argument("--requests", type=int, default=100, help="hints, then as many recalls")
    taking.add_argument("--out", type=Path, required=True)
    timing = commands.add_parser("replay", help="time the parts on recorded inputs")
    timing.add_argument("calls", type=Path)
    timing.add_argument("--save", type=Path, help="keep the outputs here")
    timing.add_argument("--compare", type=Path, help="outputs kept by an earlier --save")
    args = parser.parse_args(argv)
    if args.command == "hints":
        asyncio.run(
            hints(args.data_dir, args.requests, args.concurrency, args.embedder, args.unbatched, args.texts)
        )
        return 0
    if args.command == "capture":
        calls = asyncio.run(capture(args.data_dir, args.requests))
        args.out.write_bytes(pickle.dumps(calls))
        print({name: len(found) for name, found in calls.items()})
        return 0
    return replay(args.calls, args.save, args.compare)


if __name__ == "__main__":
    raise SystemExit(main())
