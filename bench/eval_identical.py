"""The evaluator's LoCoMo reports of two checkouts, side by side: each unit on each store runs
`pmem eval locomo … --json` once in each checkout (its own `.venv`), with ids drawn from one seeded
generator (`bench/seeded_ids/`) and one question at a time, so equal code gives equal bytes; the
table says which reports are identical.

    python bench/eval_identical.py --base ../wt-base --new . ../shared/data/locomo/locomo10.json \
        --max-conversations 2 --embedding-cache /var/tmp/pmem-cache

Not part of the test suite. Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SEEDED_IDS = Path(__file__).resolve().parent / "seeded_ids"


def report(checkout: Path, locomo: Path, unit: str, store: str, args: argparse.Namespace) -> bytes:
    """One `pmem eval locomo --json` report of `checkout`'s code, ids seeded."""
    command = [
        str(checkout / ".venv" / "bin" / "pmem"),
        "eval",
        "locomo",
        str(locomo),
        "--unit",
        unit,
        "--store",
        store,
        "--split",
        args.split,
        "--concurrency",
        "1",
        "--max-conversations",
        str(args.max_conversations),
        "--json",
    ]
    if unit == "product":
        command += ["--include", "both", "--extractor", args.extractor]
    cache = args.embedding_cache
    command += ["--embedding-cache", str(cache)] if cache else ["--no-embedding-cache"]
    env = {**os.environ, "PYTHONPATH": str(SEEDED_IDS), "PMEM_BENCH_UUID_SEED": str(args.seed)}
    env.pop("PMEM_DATABASE_URL", None)
    done = subprocess.run(
        command, cwd=checkout, env=env, capture_output=True, timeout=args.timeout, check=False
    )
    if done.returncode != 0:
        said = done.stderr.decode()[-2000:]
        raise SystemExit(f"{checkout}: {' '.join(command[1:])} exited {done.returncode}:\n{said}")
    return done.stdout


def main() -> None:
    """Run every unit on every store in both checkouts and print which reports are identical."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("locomo", type=Path, help="the LoCoMo JSON (never committed)")
    parser.add_argument("--base", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--units", default="dialog,observation,product")
    parser.add_argument("--stores", default="postgres,sqlite")
    parser.add_argument("--split", default="all", choices=["dev", "test", "all"])
    parser.add_argument("--max-conversations", type=int, default=2)
    parser.add_argument("--embedding-cache", type=Path)
    parser.add_argument(
        "--extractor",
        default="reference",
        choices=["reference", "configured"],
        help="the product unit's extractor (reference: LoCoMo's observations, the same in every checkout)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one report may take")
    parser.add_argument("--json", type=Path, help="write the table here")
    args = parser.parse_args()
    rows = []
    for unit in args.units.split(","):
        for store in args.stores.split(","):
            started = time.monotonic()
            base = report(args.base.resolve(), args.locomo.resolve(), unit, store, args)
            new = report(args.new.resolve(), args.locomo.resolve(), unit, store, args)
            summary = next(iter(json.loads(new)["retrievers"].values()))
            row = {
                "unit": unit,
                "store": store,
                "identical": base == new,
                "recall@10": summary.get("recall@10"),
                "answer_recall@10": summary.get("answer_recall@10"),
                "seconds": round(time.monotonic() - started, 1),
            }
            if not row["identical"]:
                row["base"] = json.loads(base)
                row["new"] = json.loads(new)
            rows.append(row)
            print(
                f"{unit:12} {store:9} {'identical' if row['identical'] else 'DIFFERENT'}"
                f"  R@10 {row['recall@10']}  A@10 {row['answer_recall@10']}  ({row['seconds']} s)",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    sys.exit(0 if all(row["identical"] for row in rows) else 1)


if __name__ == "__main__":
    main()
