"""Pipeline throughput: conversations per second of one `pmem worker` process against a fake LLM.

Setup (all real except the LLM): an embedded nats-server and Postgres + pgvector in a temporary
directory; the fake OpenAI-compatible server (testkit/fake_openai.py) in its own process, with
300 ms per chat completion and 20 ms per embeddings call; the worker as a subprocess
(`python -m cli.main worker`), exactly as deployed. For each concurrency: a fresh database and
fresh stream/consumer, N events published up front (the backlog), then the worker is started.

Measured:
- throughput = (N - 1) / (last commit - first commit), from `processed_events.processed_at`, so
  process start-up is excluded;
- ideal = concurrency / 0.32 s: each event waits for one LLM call (300 ms) and one embeddings call
  (20 ms) in sequence; database and NATS time count against the worker;
- worker RSS: peak resident memory of a worker process (psutil), sampled every 0.25 s;
- CPU per event of the worker process(es), the fake LLM and every Postgres process, from the
  moment every worker has finished one event to the last commit, divided by the events committed
  in that window (psutil), which shows what the run was bound by.

    python bench/pipeline_throughput.py                       # 2,000 events at 1, 8, 32, 64
    python bench/pipeline_throughput.py --events 500 --concurrency 32
    python bench/pipeline_throughput.py --concurrency 32 --workers 2   # 2 processes x 16
    python bench/pipeline_throughput.py --populated --events 1000 --concurrency 32 --workers 2

`--populated` (the work per event stays bounded whatever the owner's size): the same events twice,
against an empty store and against a populated one: one persona (persona learning on) owning 100,000
memories and every user of the events owning 2,000 (`--users`, default 20). Per-event latency
p50/p99 (the workers' pmem_event_duration_seconds, interpolated in its buckets), peak RSS, prompt
tokens per event (pmem_llm_tokens_total) and worker CPU per event are reported for both, with the
populated/empty ratio. The fake LLM writes `user` and `persona_user` facts only; `--persona-facts`
moves each persona event's last fact to the `persona` scope (the persona's near-duplicate read and
lock on half the events).
`--user-turns N` also gives every user of the populated run N remembered conversation turns (with
embeddings, in the contexts its events use), e.g. to compare `--worker-env PMEM_HISTORY=true` and
`=false` on users with a long history:

    python bench/pipeline_throughput.py --populated --events 300 --concurrency 8 --messages 20 \
        --users 2 --user-turns 100000 --worker-env PMEM_HISTORY=true
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nats
import psutil
import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cli.embedded import EmbeddedNats, EmbeddedPostgres  # noqa: E402
from store.migrate import migrate_async  # noqa: E402
from worker.streams import ensure_stream  # noqa: E402

LLM_LATENCY_S = 0.3
EMBEDDING_LATENCY_S = 0.02
PER_EVENT_IDEAL_S = LLM_LATENCY_S + EMBEDDING_LATENCY_S

FAKE_SERVER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from testkit.fake_openai import FakeOpenAI, persona_learning_responder
    fake = FakeOpenAI(
        chat_latency_s=float(sys.argv[2]),
        embedding_latency_s=float(sys.argv[3]),
        chat_latency_jitter=float(sys.argv[4]),
        chat_responder=persona_learning_responder if sys.argv[5] == "persona" else None,
    )
    fake.start()
    print(fake.base_url, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    print(dict(fake.counters), file=sys.stderr, flush=True)
    fake.stop()
    """
)

FACTS = (
    "My name is {name}.",
    "I live in {city}.",
    "I work as a {job}.",
    "I'm vegetarian.",
    "I'm allergic to {allergen}.",
    "I prefer {a} over {b}.",
    "My favourite cuisine is {cuisine}.",
)
CITIES = ("Lisbon", "Porto", "Oslo", "Lima", "Kyoto", "Austin", "Nairobi", "Hanoi")
JOBS = ("nurse", "teacher", "pilot", "data engineer", "chef", "lawyer")


@dataclass(frozen=True, kw_only=True)
class Result:
    """One concurrency's figures."""

    concurrency: int
    workers: int
    events: int
    seconds: float
    conv_per_s: float
    ideal_per_s: float
    percent_of_ideal: float
    peak_rss_mb: float
    worker_cpu_ms_per_event: float
    fake_llm_cpu_ms_per_event: float
    postgres_cpu_ms_per_event: float
    populated: bool = False
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    # exact (the histogram's sum / count); p50 and p99 are interpolated inside its buckets
    mean_ms: float = 0.0
    prompt_tokens_per_event: float = 0.0
    # p50 / p99 / exact mean ms of each stage the workers time (LLM, embeddings, each database
    # operation)
    stages: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    @property
    def busy_handlers(self) -> float:
        """Handlers busy on average (Little's law: throughput × mean event time), out of the
        concurrency: below it, handlers waited for messages, not the other way round."""
        return self.conv_per_s * self.mean_ms / 1000


# messages per generated conversation (`--messages`)
EVENT_SHAPE = {"messages": 4, "teams": 0}
SMALL_TALK = (
    ("How was your day?", "Busy but fine, thanks for asking."),
    ("Any plans for the evening?", "Maybe a film, nothing special."),
    ("Did you see the news about the new bridge?", "Yes, it opens next spring."),
    ("What would you recommend for the weekend?", "A long walk and a good book."),
)


def make_events(
    n: int,
    seed: int,
    *,
    users_count: int | None = None,
    personas_count: int = 4,
    messages: int = 4,
    teams: int = 0,
) -> list[dict[str, Any]]:
    """n conversations over n/4 users (or `users_count`) (half with a persona), 2 facts each,
    `messages` messages each (the facts, then small talk), each user's in one of `teams` teams (0:
    no team), deterministic."""
    users = [uuid.UUID(int=seed * 1_000_000 + i) for i in range(users_count or max(1, n // 4))]
    team_ids = [uuid.UUID(int=seed * 1_000_000 + 800_000 + i) for i in range(teams)]
    personas = [uuid.UUID(int=seed * 1_000_000 + 900_000 + i) for i in range(personas_count)]
    events = []
    for i in range(n):
        fact_a = FACTS[i % len(FACTS)]
        fact_b = FACTS[(i * 3 + 1) % len(FACTS)]
        words = {
            "name": f"Person{i % len(users)}",
            "city": CITIES[i % len(CITIES)],
            "job": JOBS[i % len(JOBS)],
            "allergen": "peanuts" if i % 2 else "shellfish",
            "a": "tea",
            "b": "coffee",
            "cuisine": "Thai" if i % 3 else "Italian",
        }
        events.append(
            {
                "event_id": str(uuid.uuid4()),
                "type": "conversation.ended",
                "channel_id": str(uuid.uuid4()),
                "user_id": str(users[i % len(users)]),
                "team_id": str(team_ids[(i % len(users)) % teams]) if teams else None,
                "persona_id": str(personas[i % len(personas)]) if i % 2 else None,
                "messages": [
                    {"role": "user", "content": fact_a.format(**words) + " " + fact_b.format(**words)},
                    {"role": "assistant", "content": "Thanks, noted."},
                    *(
                        {"role": role, "content": SMALL_TALK[(k // 2) % len(SMALL_TALK)][k % 2]}
                        for k in range(max(0, messages - 2))
                        for role in ["user" if k % 2 == 0 else "assistant"]
                    ),
                ],
            }
        )
    return events


async def publish(nats_url: str, names: dict[str, str], events: list[dict[str, Any]]) -> None:
    """Create the streams and publish every event (JetStream-acked) before the worker starts."""
    nc = await nats.connect(nats_url)
    try:
        await ensure_stream(nc.jsm(), names["PMEM_STREAM"], [names["PMEM_SUBJECT"]], create=True)
        js = nc.jetstream()
        for start in range(0, len(events), 200):
            await asyncio.gather(
                *(
                    js.publish(
                        names["PMEM_SUBJECT"],
                        json.dumps(e).encode(),
                        headers={"Nats-Msg-Id": e["event_id"]},
                        timeout=10,
                    )
                    for e in events[start : start + 200]
                )
            )
    finally:
        await nc.close()


WORDS = [
    "lisbon",
    "porto",
    "oslo",
    "lima",
    "kyoto",
    "austin",
    "nairobi",
    "hanoi",
    "nurse",
    "teacher",
    "pilot",
    "engineer",
    "chef",
    "lawyer",
    "vegetarian",
    "peanuts",
    "shellfish",
    "tea",
    "coffee",
    "thai",
    "italian",
    "weekend",
    "walk",
    "book",
    "recipe",
    "refund",
    "order",
    "shipping",
    "invoice",
    "account",
    "password",
    "reset",
    "billing",
    "plan",
    "upgrade",
    "travel",
    "hotel",
    "flight",
    "music",
    "film",
    "garden",
    "dog",
    "cat",
    "running",
    "cycling",
    "yoga",
    "piano",
    "guitar",
    "painting",
    "chess",
    "football",
    "swimming",
    "hiking",
]


# rows of the populated store: a persona with 100,000, users with 2,000 each, turns per user
ROWS = {"persona": 100_000, "user": 2000, "turns": 0}
LEARNING_ON = "INSERT INTO memory_settings (level, target_id, persona_learning) VALUES ('persona', %s, true)"


async def populate(
    database_url: str, *, persona: uuid.UUID, users: list[uuid.UUID], persona_rows: int, per_user: int
) -> float:
    """Seed the store: `persona_rows` persona memories and `per_user` per user, with random unit
    vectors and text from a shared vocabulary (so full-text matches are plentiful); persona
    learning on for the persona. Binary COPY with the HNSW index dropped and rebuilt after.
    Returns the seconds it took."""
    import numpy as np
    from pgvector.psycopg import register_vector_async

    started = time.monotonic()
    rng = np.random.default_rng(7)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await register_vector_async(conn)
        # rebuilt after the COPY exactly as the migrations defined it
        found = await (
            await conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_memories_embedding_hnsw'"
            )
        ).fetchone()
        assert found is not None, "the store has no HNSW index: migrate first"
        await conn.execute("DROP INDEX ix_memories_embedding_hnsw")
        owners = [("persona", persona, persona_rows), *(("user", u, per_user) for u in users)]
        columns = "id, scope, owner_id, key, value, confidence, status, embedding, created_at, updated_at"
        types = [
            "uuid",
            "text",
            "uuid",
            "text",
            "text",
            "float4",
            "text",
            "vector",
            "timestamptz",
            "timestamptz",
        ]
        now = time.time()
        from datetime import UTC, datetime

        copy_sql = f"COPY memories ({columns}) FROM STDIN WITH (FORMAT BINARY)"
        async with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            copy.set_types(types)
            for scope, owner, count in owners:
                vectors = rng.standard_normal((count, 384)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                picks = rng.integers(0, len(WORDS), size=(count, 6))
                for i in range(count):
                    words = [WORDS[j] for j in picks[i]]
                    at = datetime.fromtimestamp(now - i, UTC)
                    await copy.write_row(
                        (
                            uuid.uuid4(),
                            scope,
                            owner,
                            f"{words[0]} {words[1]} {i}",
                            "Talked about " + " and ".join(words[2:]),
                            0.8,
                            "active",
                            vectors[i],
                            at,
                            at,
                        )
                    )
        await conn.execute("SET maintenance_work_mem = '512MB'")
        await conn.execute(found[0])
        await conn.execute(LEARNING_ON, (persona,))
        await conn.execute("ANALYZE memories")
    return time.monotonic() - started


# remembered turns per conversation when the store is seeded with history (--user-turns)
TURNS_PER_CONVERSATION = 10


async def populate_turns(
    database_url: str, *, contexts: dict[uuid.UUID, list[uuid.UUID | None]], per_user: int
) -> float:
    """Seed `per_user` remembered conversation turns for each user of `contexts`, spread evenly
    over the user's contexts (its events' personas, None for none), in conversations of
    `TURNS_PER_CONVERSATION` turns, one second apart, newest now; random unit vectors and text
    from the shared vocabulary. Binary COPY with the table's secondary indexes dropped and rebuilt
    after, exactly as the migrations defined them. Returns the seconds it took."""
    from datetime import UTC, datetime

    import numpy as np
    from pgvector.psycopg import register_vector_async

    started = time.monotonic()
    rng = np.random.default_rng(11)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await register_vector_async(conn)
        indexes = await (
            await conn.execute(
                "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename = 'conversation_turns' "
                "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)"
            )
        ).fetchall()
        for name, _ in indexes:
            await conn.execute(f'DROP INDEX "{name}"')
        columns = "id, channel_id, event_id, user_id, persona_id, role, text, at, position, embedding"
        types = ["uuid", "uuid", "uuid", "uuid", "uuid", "text", "text", "timestamptz", "int4", "vector"]
        now = time.time()
        copy_sql = f"COPY conversation_turns ({columns}) FROM STDIN WITH (FORMAT BINARY)"
        async with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            copy.set_types(types)
            for user, personas in contexts.items():
                vectors = rng.standard_normal((per_user, 384)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                picks = rng.integers(0, len(WORDS), size=(per_user, 4))
                channel = event = uuid.uuid4()
                for i in range(per_user):
                    position = i % TURNS_PER_CONVERSATION + 1
                    if position == 1:
                        channel, event = uuid.uuid4(), uuid.uuid4()
                    # whole conversations per context: the context changes between conversations
                    persona = personas[(i // TURNS_PER_CONVERSATION) % len(personas)]
                    words = [WORDS[j] for j in picks[i]]
                    await copy.write_row(
                        (
                            uuid.uuid4(),
                            channel,
                            event,
                            user,
                            persona,
                            "user" if position % 2 else "assistant",
                            f"We talked about {words[0]}, {words[1]} and {words[2]} on the {words[3]}",
                            datetime.fromtimestamp(now - (per_user - i), UTC),
                            position,
                            vectors[i],
                        )
                    )
        await conn.execute("SET maintenance_work_mem = '512MB'")
        for _, definition in indexes:
            await conn.execute(definition)
        await conn.execute("ANALYZE conversation_turns")
    return time.monotonic() - started


async def scrape(port: int) -> str:
    """The /metrics text of a worker."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), timeout=10)
    writer.close()
    return data.decode(errors="replace").split("\r\n\r\n", 1)[-1]


async def print_statements(database_url: str, events: int) -> None:
    """The run's statements by total execution time (pg_stat_statements), per event."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        rows = await (
            await conn.execute(
                "SELECT total_exec_time, total_plan_time, calls, shared_blks_hit + shared_blks_read, "
                "regexp_replace(left(query, 90), '\\s+', ' ', 'g') FROM pg_stat_statements "
                "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "ORDER BY total_exec_time + total_plan_time DESC LIMIT 12"
            )
        ).fetchall()
    print(
        "  statements (execution + planning ms per event, calls per event, buffers per call, text):",
        flush=True,
    )
    for exec_ms, plan_ms, calls, buffers, query in rows:
        per_call = buffers / max(1, calls)
        print(
            f"    {exec_ms / events:6.2f} + {plan_ms / events:5.2f} ms  {calls / events:5.2f}  "
            f"{per_call:8.0f}  {query}",
            flush=True,
        )


async def all_working(ports: list[int]) -> bool:
    """Whether every worker has handled at least one event (pmem_events_total)."""
    for port in ports:
        try:
            text = await scrape(port)
        except OSError:  # its health server is not listening yet: still starting
            return False
        if not any(
            line.startswith("pmem_events_total{") and float(line.rsplit(" ", 1)[1]) > 0
            for line in text.splitlines()
        ):
            return False
    return True


def histogram(texts: list[str], name: str, labels: str = "") -> list[tuple[float, float]]:
    """Cumulative (upper bound, count) buckets of a histogram (the series whose labels include
    `labels`, e.g. `operation="write_event"`), summed over workers."""
    buckets: dict[float, float] = {}
    for text in texts:
        for line in text.splitlines():
            if line.startswith(f"{name}_bucket{{") and labels in line:
                le = line.split('le="', 1)[1].split('"', 1)[0]
                bound = float("inf") if le == "+Inf" else float(le)
                buckets[bound] = buckets.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    return sorted(buckets.items())


def mean(texts: list[str], name: str, labels: str = "") -> float:
    """The exact mean of a histogram (its `_sum` over its `_count`, summed over workers)."""
    totals = {"sum": 0.0, "count": 0.0}
    for text in texts:
        for line in text.splitlines():
            for part in totals:
                if line.startswith(f"{name}_{part}") and labels in line:
                    totals[part] += float(line.rsplit(" ", 1)[1])
    return totals["sum"] / totals["count"] if totals["count"] else 0.0


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """Prometheus-style histogram_quantile: linear interpolation inside the bucket."""
    if not buckets or buckets[-1][1] == 0:
        return 0.0
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            share = (rank - lower_count) / (count - lower_count) if count > lower_count else 0.0
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return lower_bound


def counter(texts: list[str], sample: str) -> float:
    """A counter sample (exact series text, e.g. `pmem_llm_tokens_total{kind="prompt"}`) summed."""
    total = 0.0
    for text in texts:
        for line in text.splitlines():
            if line.startswith(sample + " "):
                total += float(line.rsplit(" ", 1)[1])
    return total


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def commits(database_url: str) -> tuple[int, float | None, float | None]:
    """(processed events, first commit, last commit) as unix times."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*), extract(epoch FROM min(processed_at)), extract(epoch FROM max(processed_at))"
            " FROM processed_events"
        )
        row = await cursor.fetchone()
    assert row is not None
    first = float(row[1]) if row[1] is not None else None
    last = float(row[2]) if row[2] is not None else None
    return int(row[0]), first, last


def postgres_cpu_s(postgres: EmbeddedPostgres) -> float:
    """CPU seconds used so far by the bench's Postgres: its postmaster and every live backend (the
    worker's pooled connections live for the whole run)."""
    pid = int((postgres.data_dir / "postmaster.pid").read_text().split()[0])
    postmaster = psutil.Process(pid)
    total = 0.0
    for process in [postmaster, *postmaster.children(recursive=True)]:
        try:
            total += cpu_s(process)
        except psutil.NoSuchProcess:
            continue
    return total


def cpu_s(process: psutil.Process) -> float:
    """CPU seconds of one process (user + system)."""
    times = process.cpu_times()
    return float(times.user + times.system)


async def run_one(  # noqa: PLR0915 - one measured run in order: services, publish, drain, sample, tear down
    *,
    concurrency: int,
    workers: int,
    n: int,
    nats_url: str,
    postgres: EmbeddedPostgres,
    llm_url: str,
    log_dir: Path,
    fake_pid: int,
    populated: bool = False,
    profile: bool = False,
    statements: bool = False,
    users_count: int | None = None,
    worker_env: dict[str, str] | None = None,
) -> Result:
    """Publish n events, then run `workers` worker subprocesses sharing the durable consumer, with
    `concurrency` events in flight in total, until every event committed."""
    tag = uuid.uuid4().hex[:8]
    database_url = postgres.create_database(f"bench_{tag}")
    await migrate_async(database_url, 384)
    seed = 7 if users_count else concurrency  # the same events for the empty and the populated run
    events = make_events(
        n,
        seed=seed,
        users_count=users_count,
        personas_count=1 if users_count else 4,
        messages=EVENT_SHAPE["messages"],
        teams=EVENT_SHAPE["teams"],
    )
    if users_count:
        users = sorted({uuid.UUID(e["user_id"]) for e in events})
        persona = next(uuid.UUID(e["persona_id"]) for e in events if e["persona_id"])
        if populated:
            took = await populate(
                database_url,
                persona=persona,
                users=users,
                persona_rows=ROWS["persona"],
                per_user=ROWS["user"],
            )
            print(
                f"populated: {ROWS['persona']:,} persona memories, {len(users)} users "
                f"x {ROWS['user']:,} in {took:.0f}s",
                flush=True,
            )
            if ROWS["turns"]:
                contexts: dict[uuid.UUID, list[uuid.UUID | None]] = {}
                for e in events:
                    seen = contexts.setdefault(uuid.UUID(e["user_id"]), [])
                    context = uuid.UUID(e["persona_id"]) if e["persona_id"] else None
                    if context not in seen:
                        seen.append(context)
                took = await populate_turns(database_url, contexts=contexts, per_user=ROWS["turns"])
                print(
                    f"populated: {len(users)} users x {ROWS['turns']:,} conversation turns in {took:.0f}s",
                    flush=True,
                )
        else:  # persona learning on in both runs
            async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
                await conn.execute(LEARNING_ON, (persona,))
    names = {
        "PMEM_SUBJECT": f"bench{tag}.conversation.ended",
        "PMEM_STREAM": f"BENCH{tag}",
        "PMEM_OUTPUT_STREAM": f"BENCH{tag}_OUT",
        "PMEM_DLQ_SUBJECT": f"bench{tag}.dlq",
        "PMEM_EXTRACTED_SUBJECT": f"bench{tag}.extracted",
        "PMEM_DURABLE": f"bench{tag}",
    }
    await publish(nats_url, names, events)
    if statements:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await conn.execute("SELECT pg_stat_statements_reset()")
    per_worker = max(1, concurrency // workers)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PMEM_", "OPENAI_"))},
        **names,
        "PMEM_NATS_URL": nats_url,
        "PMEM_DATABASE_URL": database_url,
        "PMEM_CONCURRENCY": str(per_worker),
        "PMEM_EXTRACTOR": "llm",
        "PMEM_LLM_BASE_URL": llm_url,
        "PMEM_LLM_API_KEY": "bench",
        "PMEM_LLM_MODEL": "fake-model",
        "PMEM_EMBEDDING_PROVIDER": "openai",
        "PMEM_EMBEDDING_MODEL": "fake-embedding",
        "PMEM_EMBEDDING_DIM": "384",
        "PMEM_LOG_LEVEL": "WARNING",
        **(worker_env or {}),
    }
    procs = []
    ports = [free_port() for _ in range(workers)]
    for index in range(workers):
        log_path = log_dir / f"worker-c{concurrency}-{index}.log"
        with log_path.open("wb") as log:
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "cli.main",
                    "worker",
                    cwd=REPO,
                    env={**env, "PMEM_HTTP_PORT": str(ports[index])},
                    stdout=log,
                    stderr=log,
                )
            )
    ps = [psutil.Process(proc.pid) for proc in procs]
    # --profile: py-spy samples each worker (collapsed stacks, idle frames left out)
    profilers = [
        await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "py-spy"),
            *("record", "--pid", str(proc.pid), "--format", "raw", "--rate", "200", "--nonblocking"),
            *("-o", str(log_dir / f"profile-c{concurrency}-{index}.txt")),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for index, proc in enumerate(procs)
        if profile
    ]
    fake = psutil.Process(fake_pid)
    start_cpu = end_cpu = (0.0, 0.0, 0.0)  # workers, fake LLM, Postgres
    started = False
    measured_from = 0
    peak_rss = 0
    first = last = None
    deadline = time.monotonic() + 60 + n * PER_EVENT_IDEAL_S / concurrency * 12
    try:
        while True:
            peak_rss = max(peak_rss, *(p.memory_info().rss for p in ps))
            done, first, last = await commits(database_url)
            if not started and done > 0 and await all_working(ports):
                # every worker has finished an event: start-up and imports (the slower process
                # may still be importing when the faster one commits) are outside the window
                start_cpu = (sum(cpu_s(p) for p in ps), cpu_s(fake), postgres_cpu_s(postgres))
                measured_from = done
                started = True
            if done >= n:
                end_cpu = (sum(cpu_s(p) for p in ps), cpu_s(fake), postgres_cpu_s(postgres))
                metrics = [await scrape(port) for port in ports]
                break
            if any(proc.returncode is not None for proc in procs):
                raise RuntimeError(f"a worker exited early; see {log_dir}/worker-c{concurrency}-*.log")
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {done}/{n} events after the deadline; see {log_dir}")
            await asyncio.sleep(0.25)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), timeout=30)
            except TimeoutError:
                proc.kill()
        for profiler in profilers:  # py-spy writes its file when the worker exits
            await asyncio.wait_for(profiler.wait(), timeout=60)
    assert first is not None and last is not None
    if statements:
        await print_statements(database_url, n)
    seconds = last - first
    rate = (n - 1) / seconds if seconds > 0 else float("inf")
    ideal = per_worker * workers / PER_EVENT_IDEAL_S
    in_window = max(1, n - measured_from)
    per_event = [round(1000 * (e - s) / in_window, 1) for s, e in zip(start_cpu, end_cpu, strict=True)]
    durations = histogram(metrics, "pmem_event_duration_seconds")
    timed = {"llm": ("pmem_llm_duration_seconds", ""), "embeddings": ("pmem_embedding_duration_seconds", "")}
    operations = re.findall(r'pmem_db_duration_seconds_count\{operation="([^"]+)"', "".join(metrics))
    for operation in sorted(set(operations)):
        timed[f"db {operation}"] = ("pmem_db_duration_seconds", f'operation="{operation}"')
    stages: dict[str, tuple[float, float, float]] = {}
    for stage, (name, labels) in timed.items():
        buckets = histogram(metrics, name, labels)
        if buckets:
            p50, p99 = quantile(buckets, 0.5), quantile(buckets, 0.99)
            stages[stage] = (
                round(1000 * p50, 1),
                round(1000 * p99, 1),
                round(1000 * mean(metrics, name, labels), 1),
            )
    prompt_tokens = counter(metrics, 'pmem_llm_tokens_total{kind="prompt"}')
    return Result(
        concurrency=per_worker * workers,
        workers=workers,
        events=n,
        seconds=round(seconds, 2),
        conv_per_s=round(rate, 1),
        ideal_per_s=round(ideal, 1),
        percent_of_ideal=round(100 * rate / ideal, 1),
        peak_rss_mb=round(peak_rss / 2**20, 1),
        worker_cpu_ms_per_event=per_event[0],
        fake_llm_cpu_ms_per_event=per_event[1],
        postgres_cpu_ms_per_event=per_event[2],
        populated=populated,
        p50_ms=round(1000 * quantile(durations, 0.5), 1),
        p99_ms=round(1000 * quantile(durations, 0.99), 1),
        mean_ms=round(1000 * mean(metrics, "pmem_event_duration_seconds"), 1),
        prompt_tokens_per_event=round(prompt_tokens / max(1, n), 1),
        stages=stages,
    )


async def run_all(
    args: argparse.Namespace, *, nats_url: str, postgres: EmbeddedPostgres, llm_url: str, fake_pid: int
) -> list[Result]:
    """Every requested concurrency in turn, printing each result as it comes."""
    results = []
    runs = [(c, False) for c in args.concurrency]
    if args.populated:
        runs = [(c, populated) for c in args.concurrency for populated in (False, True)]
    for concurrency, populated in runs:
        result = await run_one(
            concurrency=concurrency,
            workers=args.workers,
            n=args.events,
            nats_url=nats_url,
            postgres=postgres,
            llm_url=llm_url,
            log_dir=Path(args.log_dir),
            profile=args.profile,
            statements=args.statements,
            worker_env=dict(args.worker_env),
            fake_pid=fake_pid,
            populated=populated,
            users_count=args.users if args.populated else None,
        )
        results.append(result)
        print(
            f"concurrency {result.concurrency:>3} ({result.workers} worker process(es)): "
            f"{result.conv_per_s:>6.1f} conv/s "
            f"(ideal {result.ideal_per_s:>6.1f}, {result.percent_of_ideal:>5.1f}%), "
            f"{result.events} events in {result.seconds:.1f}s, peak RSS/worker {result.peak_rss_mb:.0f} MB, "
            f"CPU/event: worker {result.worker_cpu_ms_per_event:.1f} ms, fake LLM "
            f"{result.fake_llm_cpu_ms_per_event:.1f} ms, Postgres {result.postgres_cpu_ms_per_event:.1f} ms, "
            f"latency p50/p99/mean {result.p50_ms:.0f}/{result.p99_ms:.0f}/{result.mean_ms:.0f} ms, "
            f"handlers busy {result.busy_handlers:.1f} of {result.concurrency}, "
            f"prompt tokens/event {result.prompt_tokens_per_event:.0f}"
            + (" [populated]" if result.populated else ""),
            flush=True,
        )
        print(
            "  stages p50/p99/mean ms: "
            + ", ".join(
                f"{name} {p50:.0f}/{p99:.0f}/{avg:.1f}" for name, (p50, p99, avg) in result.stages.items()
            ),
            flush=True,
        )
    return results


@contextlib.contextmanager
def script_server(script: str, *args: str) -> Iterator[tuple[str, int]]:
    """`python -c script args` as a server that prints its base URL first and stops when its stdin
    closes (a fake LLM in its own process, so neither side pays for the other's CPU); yields
    (that URL, its pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError("the fake OpenAI-compatible server did not start")
        yield url, proc.pid
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def setting_pair(text: str) -> tuple[str, str]:
    """`NAME=VALUE` of `--worker-env` (argparse reports the error with the option's name)."""
    name, sep, value = text.partition("=")
    if not sep or not name.startswith("PMEM_"):
        raise argparse.ArgumentTypeError(f"expected PMEM_NAME=VALUE, got {text!r}")
    return name, value


def main(args: argparse.Namespace) -> list[Result]:
    """Start the services and the fake LLM, run every concurrency, stop everything."""
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pmem-bench-") as tmp:
        root = Path(tmp)
        nats_server = EmbeddedNats(store_dir=root / "nats").start()
        postgres = EmbeddedPostgres(data_dir=root / "pg" / "data").start()
        if args.statements:
            postgres.configure(
                {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track_planning": "on"}
            )
        persona = "persona" if args.persona_facts else ""
        fake_args = (str(REPO), str(LLM_LATENCY_S), str(EMBEDDING_LATENCY_S), str(args.llm_jitter), persona)
        try:
            with script_server(FAKE_SERVER, *fake_args) as (llm_url, fake_pid):
                return asyncio.run(
                    run_all(
                        args, nats_url=nats_server.url, postgres=postgres, llm_url=llm_url, fake_pid=fake_pid
                    )
                )
        finally:
            postgres.stop()
            nats_server.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=2000, help="events per concurrency (default 2000)")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 8, 32, 64], help="PMEM_CONCURRENCY values to run"
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes sharing the consumer (concurrency is split)"
    )
    parser.add_argument(
        "--populated",
        action="store_true",
        help="run each concurrency against an empty and a populated store",
    )
    parser.add_argument("--users", type=int, default=20, help="users of the events with --populated")
    parser.add_argument(
        "--messages", type=int, default=4, help="messages per conversation (default 4; the facts come first)"
    )
    parser.add_argument(
        "--teams",
        type=int,
        default=0,
        help="each user's events in one of this many teams (default 0: no team), e.g. to compare "
        "--worker-env PMEM_DATABASE_ROLE=pmem_app (row-level security) with the owner",
    )
    parser.add_argument("--persona-rows", type=int, default=100_000, help="persona memories with --populated")
    parser.add_argument("--user-rows", type=int, default=2000, help="memories per user with --populated")
    parser.add_argument(
        "--user-turns",
        type=int,
        default=0,
        help="remembered conversation turns per user of the events with --populated (default 0), "
        "e.g. 100000 to measure PMEM_HISTORY on a user with a long history",
    )
    parser.add_argument(
        "--llm-jitter",
        type=float,
        default=0.0,
        help="each LLM latency drawn from 300 ms x (1 ± this), the same mean (default 0: always 300 ms)",
    )
    parser.add_argument(
        "--persona-facts",
        action="store_true",
        help="the fake LLM puts each persona event's last fact in the persona scope (persona learning "
        "is on for the populated persona): the persona's near-duplicate read and lock on every such event",
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--log-dir", default=tempfile.gettempdir(), help="where the worker logs go")
    parser.add_argument(
        "--statements",
        action="store_true",
        help="load pg_stat_statements and print each run's statements by total execution time",
    )
    parser.add_argument(
        "--worker-env",
        action="append",
        default=[],
        type=setting_pair,
        metavar="NAME=VALUE",
        help="a setting for the workers (repeatable), e.g. PMEM_DB_POOL_SIZE=32",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample each worker with py-spy (pip install py-spy) into LOG_DIR/profile-*.txt",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    options = parse_args()
    ROWS.update(persona=options.persona_rows, user=options.user_rows, turns=options.user_turns)
    EVENT_SHAPE.update(messages=options.messages, teams=options.teams)
    figures = main(options)
    print()
    print(
        "| store | concurrency | worker processes | events | conv/s | % of ideal | p50 / p99 latency "
        "| peak RSS per worker | prompt tokens/event | CPU per event: workers / fake LLM / Postgres |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in figures:
        print(
            f"| {'populated' if r.populated else 'empty'} | {r.concurrency} | {r.workers} | {r.events} "
            f"| {r.conv_per_s} | {r.percent_of_ideal}% | {r.p50_ms:.0f} / {r.p99_ms:.0f} ms "
            f"| {r.peak_rss_mb:.0f} MB | {r.prompt_tokens_per_event:.0f} | {r.worker_cpu_ms_per_event} / "
            f"{r.fake_llm_cpu_ms_per_event} / {r.postgres_cpu_ms_per_event} ms |"
        )
    if options.json:
        options.json.write_text(
            json.dumps([asdict(r) | {"busy_handlers": r.busy_handlers} for r in figures], indent=2) + "\n"
        )
