"""How often the worker's near-duplicate read finds a stored near duplicate in a large owner.

    python bench/dedup_recall.py --data-dir /tmp/popdb [--ef 40 64 100] [--queries 40]

Reads the populated database that `bench/populated_reads.py` keeps in `--data-dir` (a persona with
100,000 memories of random unit vectors). For `--queries` of the persona's stored vectors it makes
a near duplicate (1 % Gaussian noise, cosine ≈ 0.98) and an unrelated vector, and for each HNSW
`ef_search` runs the persona's branch of the near-duplicate read (`ORDER BY embedding <=> q LIMIT
8`, the owner filter, the iterative scan the store's sessions use) against the exact ranking
(`+ 0` keeps the planner off the index). It prints how often the stored vector is among the 8
found, the recall@8 of both kinds of query, and the mean time of the HNSW read.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.populated_reads import DATABASE  # noqa: E402
from store.schema import vector_literal  # noqa: E402
from worker.embedded import EmbeddedPostgres  # noqa: E402

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
    args = parser.parse_args()
    postgres = EmbeddedPostgres(data_dir=args.data_dir / "pg" / "data").start()
    rng = np.random.default_rng(args.seed)
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
            by_index = f"SELECT id FROM memories WHERE {WHERE} ORDER BY embedding <=> %s::vector LIMIT {K}"
            exactly = (
                f"SELECT id FROM memories WHERE {WHERE} ORDER BY (embedding <=> %s::vector) + 0 LIMIT {K}"
            )
            for memory_id, near, other in queries:
                for vector, recalls in ((near, near_recall), (other, other_recall)):
                    literal = vector_literal(list(vector))
                    started = time.perf_counter()
                    hnsw = [r[0] for r in conn.execute(by_index, (persona, literal)).fetchall()]
                    seconds += time.perf_counter() - started
                    exact = [r[0] for r in conn.execute(exactly, (persona, literal)).fetchall()]
                    recalls.append(len(set(hnsw) & set(exact)) / K)
                    if vector is near:
                        found += memory_id in hnsw
            print(
                f"ef_search {ef}: near duplicate found {found} / {len(queries)}, recall@{K} "
                f"{np.mean(near_recall):.3f} (near-duplicate queries) / {np.mean(other_recall):.3f} "
                f"(unrelated), HNSW read {1000 * seconds / (2 * len(queries)):.1f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
