"""The README's metrics table against what the processes register: every metric of `pmem worker`
(worker/metrics.py) and of `pmem serve` (api/metrics.py) has exactly one row, under the right
process, with exactly its labels, and no row names a metric nobody exports."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from api.metrics import ApiMetrics
from worker.metrics import Metrics

BACKTICKED = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Row:
    """One row of the README's metrics table."""

    name: str
    process: str
    labels: frozenset[str]


def readme_rows(readme: Path) -> list[Row]:
    """The rows of the table under `## Metrics`."""
    text = readme.read_text()
    section = text[text.index("\n## Metrics\n") :]
    section = section[: section.index("\n## ", 1)]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| `pmem_"):
            continue
        for name in BACKTICKED.findall(cells[0]):
            rows.append(Row(name, cells[1], frozenset(BACKTICKED.findall(cells[2]))))
    return rows


def registered() -> list[Row]:
    """Every metric the processes register, by the name it is exported under (counters with
    `_total`), with its labels."""
    rows = []
    for process, metrics in (("worker", Metrics()), ("API", ApiMetrics())):
        for metric in vars(metrics).values():
            if isinstance(metric, MetricWrapperBase):
                name = metric._name + ("_total" if metric._type == "counter" else "")
                rows.append(Row(name, process, frozenset(metric._labelnames)))
    return rows


def test_the_readme_lists_every_registered_metric_once_with_its_labels(readme: Path) -> None:
    rows = readme_rows(readme)
    names = [row.name for row in rows]
    assert sorted({n for n in names if names.count(n) > 1}) == [], "listed twice"
    expected = {row.name: row for row in registered()}
    listed = {row.name: row for row in rows}
    assert sorted(set(expected) - set(listed)) == [], "registered but not in the README"
    assert sorted(set(listed) - set(expected)) == [], "in the README but not registered"
    assert [listed[name] for name in sorted(expected)] == [expected[name] for name in sorted(expected)]


def test_every_metric_object_is_registered() -> None:
    """What `registered()` sees is what the registries export (no metric hides elsewhere)."""
    for metrics in (Metrics(), ApiMetrics()):
        families = {family.name for family in metrics.registry.collect()}
        objects = {m._name for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)}
        assert families == objects


def test_the_table_parser_sees_a_row(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        "# R\n\n## Metrics\n\n| metric | process | labels | |\n|---|---|---|---|\n"
        "| `pmem_x_total` | worker | `a`, `b` | counts `c` |\n\n## Next\n"
    )
    assert readme_rows(readme) == [Row("pmem_x_total", "worker", frozenset({"a", "b"}))]
