"""Markdown tables from `pmem eval locomo --split all --json` reports, as they appear in bench/README.md.

    python bench/locomo_tables.py REPORT.json [REPORT.json ...]

One row per (split, unit, store, retriever) with R@k, then recall@10 per category."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def rows(report: dict[str, Any]) -> list[tuple[str, str, str, str, dict[str, Any]]]:
    """(split, unit, store, retriever, summary) for the dev and test halves and the whole run."""
    out = []
    halves = dict(report.get("splits", {}))
    halves[report.get("split", "all")] = report["retrievers"]
    for split in ("dev", "test", "all"):
        for retriever, summary in halves.get(split, {}).items():
            out.append((split, report["unit"], report.get("store", "postgres"), retriever, summary))
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--metric", default="recall", help="summary key prefix (recall or answer_recall)")
    args = parser.parse_args(argv)
    table = [json.loads(p.read_text()) for p in args.reports]
    all_rows = [row for report in table for row in rows(report)]
    ks = sorted({int(k.split("@")[1]) for *_, s in all_rows for k in s if k.startswith(f"{args.metric}@")})
    label = "A" if args.metric == "answer_recall" else "R"
    print("| split | unit | store | retriever | " + " | ".join(f"{label}@{k}" for k in ks) + " |")
    print("|---|---|---|---|" + "---|" * len(ks))
    for split, unit, store, retriever, summary in all_rows:
        values = " | ".join(f"{summary[f'{args.metric}@{k}']:.3f}" for k in ks)
        print(f"| {split} | {unit} | {store} | {retriever} | {values} |")
    categories = sorted({c for *_, s in all_rows for c in s.get("by_category", {})})
    print()
    print("| split | unit | store | retriever | " + " | ".join(f"{c} {label}@10" for c in categories) + " |")
    print("|---|---|---|---|" + "---|" * len(categories))
    for split, unit, store, retriever, summary in all_rows:
        cells = []
        for c in categories:
            entry = summary.get("by_category", {}).get(c)
            cells.append(
                f"{entry[f'{args.metric}@10']:.3f}" if entry and f"{args.metric}@10" in entry else ""
            )
        print(f"| {split} | {unit} | {store} | {retriever} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
