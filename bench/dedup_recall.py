"""How often the worker's near-duplicate read finds a stored near duplicate in a large owner.

    python bench/dedup_recall.py --data-dir /tmp/popdb [--ef 40 64 100] [--queries 40]

Reads the populated database that `bench/populated_reads.py` keeps in `--data-dir` (a persona with
100,000 memories of random unit vectors). For `--queries` of the persona's stored vectors it makes
a near duplicate (1 % Gaussian noise, cosine ≈ 0.98) and an unrelated vector, and for each HNSW
`ef_search` runs the persona's branch of the near-duplicate read (`ORDER BY embedding <=> q LIMIT
8`, the owner filter, the iterative scan the store's sessions use) against the exact ranking
(`+ 0` keeps the planner off the index). It prints how often the stored vector is among the 8
found, the recall@8 of both kinds of query, and the mean time of the HNSW read.

    python bench/dedup_recall.py --data-dir /tmp/popdb \\
        --embedding-cache /tmp/evalcache/local-all-MiniLM-L6-v2-384.npz

With `--embedding-cache` (the cache `pmem eval locomo --embedding-cache DIR` writes: ~24,500
LoCoMo turns and observations embedded by all-MiniLM-L6-v2) the persona is made of those REAL
embeddings instead, in a database of its own (`dedup_real`, created and migrated on first use; or
with `--database populated` beside the populated store's 140,000 random vectors, in one index),
and the near duplicates are the same texts reworded (the last word dropped) and embedded again by
MiniLM (needs the `local` extra), as a restated fact would be. Only rewordings at cosine ≥ 0.95 to
their original (the dedup threshold under another key) count.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.populated_reads import DATABASE  # noqa: E402
from cli.embedded import EmbeddedPostgres  # noqa: E402
from store.migrate import migrate_async  # noqa: E402
from store.postgres.params import vector_literal  # noqa: E402

K = 8
WHERE = (
    "scope = 'persona' AND owner_id = %s AND user_id IS NULL AND team_id IS NULL "
    "AND status = 'active' AND embedding IS NOT NULL"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data-dir", type=Path, required=True, help="the data directory of populated_reads.py"
    )
    parser.add_argument("--ef", type=int, nargs="+", default=[40, 64, 100], help="hnsw.ef_search values")
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument(
        "--embedding-cache", type=Path, help="a persona of real MiniLM embeddings (see the docstring)"
    )
    parser.add_argument(
        "--database",
        default=REAL,
        help=f"where that persona goes (default {REAL}, a database of its own; {DATABASE}: beside the "
        "populated store's rows, in the same HNSW index)",
    )
    args = parser.parse_args()
    postgres = EmbeddedPostgres(data_dir=args.data_dir / "pg" / "data").start()
    rng = np.random.default_rng(args.seed)
    if args.embedding_cache:
        real_embeddings(postgres, args)
        return
    with psycopg.connect(postgres.url_for(DATABASE), autocommit=True) as conn:
        row = conn.execute(
            "SELECT owner_id FROM memories WHERE scope = 'persona' "
            "GROUP BY owner_id ORDER BY count(*) DESC LIMIT 1"
        ).fetchone()
        if row is None:
            raise SystemExit(f"no persona memories in {args.data_dir}: run bench/populated_reads.py first")
        persona = row[0]
        stored = conn.execute(
            f"SELECT id, embedding::text FROM memories WHERE {WHERE} ORDER BY random() LIMIT %s",
            (persona, args.queries),
        ).fetchall()
        queries = []
        for memory_id, text in stored:
            vector = np.array([float(x) for x in text.strip("[]").split(",")])
            near = vector + rng.normal(0, 0.01, vector.shape)
            other = rng.normal(size=vector.shape)
            queries.append((memory_id, near / np.linalg.norm(near), other / np.linalg.norm(other)))
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        for ef in args.ef:
            conn.execute(f"SET hnsw.ef_search = {int(ef)}")
            found, near_recall, other_recall, seconds = 0, [], [], 0.0
            for memory_id, near, other in queries:
                for vector, recalls in ((near, near_recall), (other, other_recall)):
                    hnsw, exact, took = both_rankings(conn, "id", persona, vector)
                    seconds += took
                    recalls.append(len(set(hnsw) & set(exact)) / K)
                    if vector is near:
                        found += memory_id in hnsw
            print(
                f"ef_search {ef}: near duplicate found {found} / {len(queries)}, recall@{K} "
                f"{np.mean(near_recall):.3f} (near-duplicate queries) / {np.mean(other_recall):.3f} "
                f"(unrelated), HNSW read {1000 * seconds / (2 * len(queries)):.1f} ms",
                flush=True,
            )


REAL = "dedup_real"
REAL_PERSONA = "00000000-0000-0000-0000-0000000be5a1"


def real_embeddings(postgres: EmbeddedPostgres, args: argparse.Namespace) -> None:
    """The check on a persona of real MiniLM embeddings (see the module docstring)."""
    import asyncio
    import uuid

    from pgvector.psycopg import register_vector

    from evaluation.cache import load_vectors
    from extraction.embeddings import LocalEmbedder

    cache = load_vectors(args.embedding_cache)
    texts = sorted(text for text in cache if "\x00" not in text)  # COPY refuses NUL in text
    url = postgres.url_for(args.database)
    try:
        with psycopg.connect(url) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        postgres.create_database(args.database)
    asyncio.run(migrate_async(url, 384))
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        count = conn.execute("SELECT count(*) FROM memories WHERE owner_id = %s", (REAL_PERSONA,)).fetchone()
        if not count or count[0] == 0:
            print(f"storing {len(texts):,} texts as the persona's active memories", flush=True)
            with (
                conn.cursor() as cur,
                cur.copy(
                    "COPY memories (id, scope, owner_id, key, value, confidence, status, embedding, "
                    "created_at, updated_at) FROM STDIN"
                ) as copy,
            ):
                for i, text in enumerate(texts):
                    vector = np.asarray(cache[text], dtype=np.float32)
                    row = (uuid.uuid4(), "persona", REAL_PERSONA, f"text {i}", text, 0.8, "active",
                           vector_literal(list(vector)), "2026-01-01", "2026-01-01")  # fmt: skip
                    copy.write_row(row)
            conn.execute("ANALYZE memories")
        rng = np.random.default_rng(args.seed)
        picks = rng.choice(len(texts), size=min(len(texts), args.queries * 3), replace=False)
        originals = [texts[int(i)] for i in picks]
        reworded = [reword(t) for t in originals]
        vectors = np.asarray(asyncio.run(LocalEmbedder().embed(reworded)), dtype=np.float32)
        queries = []
        for text, vector in zip(originals, vectors, strict=True):
            original = np.asarray(cache[text], dtype=np.float32)
            if float(vector @ original / np.linalg.norm(original)) >= 0.95:
                queries.append((text, vector))
        queries = queries[: args.queries]
        print(f"{len(queries)} rewordings at cosine >= 0.95 to their stored original", flush=True)
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        for ef in args.ef:
            conn.execute(f"SET hnsw.ef_search = {int(ef)}")
            found = exact_found = 0
            recalls, seconds = [], 0.0
            for text, vector in queries:
                hnsw, exact, took = both_rankings(conn, "value", REAL_PERSONA, vector)
                seconds += took
                found += text in hnsw
                exact_found += text in exact
                recalls.append(len(set(hnsw) & set(exact)) / K)
            print(
                f"ef_search {ef}: original found {found} / {len(queries)} by HNSW ({exact_found} by "
                f"the exact ranking), recall@{K} {np.mean(recalls):.3f}, "
                f"HNSW read {1000 * seconds / max(1, len(queries)):.1f} ms",
                flush=True,
            )


def both_rankings(
    conn: psycopg.Connection[Any], column: str, persona: Any, vector: Any
) -> tuple[list[Any], list[Any], float]:
    """`column` of the persona's K nearest active rows to `vector` through HNSW and exactly (`+ 0`
    keeps the planner off the index), and the seconds the HNSW read took."""
    literal = vector_literal([float(x) for x in vector])
    rows = f"SELECT {column} FROM memories WHERE {WHERE}"
    started = time.perf_counter()
    hnsw = [
        r[0] for r in conn.execute(f"{rows} ORDER BY embedding <=> %s::vector LIMIT {K}", (persona, literal))
    ]
    seconds = time.perf_counter() - started
    exact_sql = f"{rows} ORDER BY (embedding <=> %s::vector) + 0 LIMIT {K}"
    exact = [r[0] for r in conn.execute(exact_sql, (persona, literal))]
    return hnsw, exact, seconds


def reword(text: str) -> str:
    """A restatement of `text`: its last word dropped (a sentence of one word is kept)."""
    words = text.split()
    return " ".join(words[:-1]) if len(words) > 3 else text + " indeed"


if __name__ == "__main__":
    main()
