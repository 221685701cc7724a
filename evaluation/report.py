"""The report of a LoCoMo run: the `--json` document and the human-readable table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evaluation.locomo import Split
from evaluation.options import EvalUnit


def report_json(
    *,
    questions: int,
    unit: EvalUnit,
    embedder: str,
    summaries: Mapping[str, Mapping[str, Any]],
    split: Split = "all",
    store: str = "postgres",
    conversations: Sequence[str] = (),
    by_split: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The `--json` document: `{"questions": N, "unit": …, "split": …, "store": …, "embedder": …,
    "conversations": [sample ids], "retrievers": {retriever: summary}}`, plus with `--split all`
    `"splits": {"dev": {retriever: summary}, "test": {…}}` so one run reports both halves."""
    report: dict[str, Any] = {
        "questions": questions,
        "unit": unit,
        "split": split,
        "store": store,
        "embedder": embedder,
        "conversations": list(conversations),
        "retrievers": dict(summaries),
    }
    if by_split:
        report["splits"] = {name: dict(per) for name, per in by_split.items()}
    return report


def format_table(report: Mapping[str, Any], ks: Sequence[int]) -> str:
    """A human-readable table: one row per retriever, then one per category under it; evidence
    recall (R@k) and, where recorded, answer recall (A@k)."""
    metrics = [(prefix, label) for prefix, label in (("recall", "R"), ("answer_recall", "A"))]
    first: Mapping[str, Any] = next(iter(report["retrievers"].values()), {})
    metrics = [(prefix, label) for prefix, label in metrics if f"{prefix}@{ks[0]}" in first]
    header = f"{'':<24}" + "".join(f"{f'{label}@{k}':>8}" for _, label in metrics for k in ks)
    lines = [
        f"LoCoMo recall — unit {report['unit']}, split {report.get('split', 'all')}, "
        f"{report['questions']} questions, store {report.get('store', 'postgres')}, "
        f"embedder {report['embedder']}",
        header,
    ]

    def cells(entry: Mapping[str, Any]) -> str:
        return "".join(
            f"{entry[f'{prefix}@{k}']:>8.3f}" if f"{prefix}@{k}" in entry else f"{'—':>8}"
            for prefix, _ in metrics
            for k in ks
        )

    for retriever, summary in report["retrievers"].items():
        lines.append(f"{retriever:<24}" + cells(summary))
        for name, entry in summary["by_category"].items():
            label = f"  {name} ({entry['questions']})"
            lines.append(f"{label:<24}" + cells(entry))
    for split, per_retriever in report.get("splits", {}).items():
        for retriever, summary in per_retriever.items():
            label = f"{split}: {retriever} ({summary['questions']})"
            lines.append(f"{label:<24}" + cells(summary))
    if "extraction" in report:
        used = report["extraction"]
        lines.append(
            f"extraction ({report.get('extractor')}): {used['events']} events, "
            f"{used['prompt_tokens_per_event']:.0f} prompt / {used['completion_tokens_per_event']:.0f} "
            f"completion tokens and {used['llm_calls_per_event']:.2f} LLM calls per event"
        )
    return "\n".join(lines)


def has_questions(per_retriever: Mapping[str, Mapping[str, Any]]) -> bool:
    """True when any retriever's summary counts a question (an empty split reports nothing)."""
    return any(summary["questions"] for summary in per_retriever.values())
