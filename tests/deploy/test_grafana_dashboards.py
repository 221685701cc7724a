"""The Grafana dashboards in deploy/grafana: every panel's PromQL parses (Prometheus's own parser:
the expressions become recording rules in a temporary file that `promtool check rules` reads) and
reads only metrics the product exports (the registries of `pmem worker` and `pmem serve`). That a
real Prometheus answers every query is test_prometheus_scrape.py's job."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.deploy_files import (
    PanelQuery,
    dashboard_files,
    dashboard_queries,
    exported_series_names,
    metric_names_in,
    prometheus_tool,
)


def check_rules(queries: list[PanelQuery], directory: Path) -> subprocess.CompletedProcess[str]:
    """`promtool check rules` on a file with one recording rule per query."""
    rules = [
        {"record": f"dashboard:{q.dashboard.replace('-', '_')}:panel_{q.panel_id}_{q.ref_id}", "expr": q.expr}
        for q in queries
    ]
    path = directory / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "grafana-panels", "rules": rules}]}))
    return subprocess.run(
        [prometheus_tool("promtool"), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_panel_query_parses(tmp_path: Path) -> None:
    queries = dashboard_queries()
    result = check_rules(queries, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout


def test_the_parse_check_rejects_a_broken_query(tmp_path: Path) -> None:
    broken = PanelQuery("pmem-api", 1, "broken", "A", "sum(rate(pmem_api_requests_total[1m])")
    result = check_rules([*dashboard_queries(), broken], tmp_path)
    assert result.returncode != 0
    assert "panel_1_A" in result.stdout + result.stderr


@pytest.mark.parametrize("query", dashboard_queries(), ids=lambda q: q.label)
def test_every_panel_query_reads_an_exported_metric(query: PanelQuery) -> None:
    names = metric_names_in(query.expr)
    assert names, "the query reads no pmem_ metric"
    assert sorted(names - exported_series_names()) == []


def test_the_metric_check_sees_through_label_values() -> None:
    expr = 'sum(rate(pmem_api_requests_total{route="/pmem_not_a_metric"}[1m])) / pmem_made_up'
    assert metric_names_in(expr) == {"pmem_api_requests_total", "pmem_made_up"}
    assert "pmem_made_up" not in exported_series_names()
    assert "pmem_api_request_duration_seconds_bucket" in exported_series_names()


def test_dashboards_are_well_formed() -> None:
    uids = []
    for path in dashboard_files():
        dashboard = json.loads(path.read_text())
        uids.append(dashboard["uid"])
        panels = dashboard["panels"]
        assert len({panel["id"] for panel in panels}) == len(panels), path.name
        for panel in panels:
            assert panel["targets"], f"{path.name}: {panel['title']} has no query"
            assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        # no two panels overlap on the 24-column grid
        cells = [
            (x, y)
            for panel in panels
            for x in range(panel["gridPos"]["x"], panel["gridPos"]["x"] + panel["gridPos"]["w"])
            for y in range(panel["gridPos"]["y"], panel["gridPos"]["y"] + panel["gridPos"]["h"])
        ]
        assert len(cells) == len(set(cells)), f"{path.name}: panels overlap"
        assert max(x for x, _ in cells) < 24
    assert len(uids) == len(set(uids)) >= 2


def test_the_api_dashboard_shows_what_an_operator_of_the_api_needs() -> None:
    api = [q.expr for q in dashboard_queries() if q.dashboard == "pmem-api"]
    text = "\n".join(api)
    assert "pmem_api_requests_total" in text  # request rate
    assert 'status=~"4.."' in text and 'status=~"5.."' in text  # error rates
    assert "histogram_quantile(0.5, sum by (le, route)" in text  # p50 by route
    assert "histogram_quantile(0.99, sum by (le, route)" in text  # p99 by route
    assert "pmem_review_queue_depth" in text
