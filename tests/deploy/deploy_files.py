"""Where deploy/ is and how its files are read (shared by the tests in this folder)."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from api.metrics import ApiMetrics
from worker.metrics import Metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "k8s"
PROMETHEUS = DEPLOY / "prometheus"
DASHBOARDS = DEPLOY / "grafana" / "dashboards"

# Grafana's interval variables, as the dashboard's time range would set them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}
# a pmem_ metric name in PromQL (string literals removed first: a label value is no metric)
METRIC = re.compile(r"\bpmem_[a-zA-Z0-9_]+\b")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')

PROMETHEUS_INSTALL_HINT = (
    "Prometheus is not installed: `apt-get install -y prometheus` (Debian; gives prometheus and "
    "promtool). .ci/run installs it."
)


def k8s_documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty YAML documents of one manifest file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def k8s_manifest_files() -> list[Path]:
    """Every Kubernetes manifest (the kustomization file itself is not a resource)."""
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def all_k8s_objects() -> list[dict[str, Any]]:
    """Every object of every manifest, the example Secrets included."""
    return [doc for path in k8s_manifest_files() for doc in k8s_documents(path)]


def find_object(kind: str, name: str) -> dict[str, Any]:
    """The one object of `kind` named `name`."""
    found = [o for o in all_k8s_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name} in deploy/k8s, found {len(found)}"
    return found[0]


def prometheus_tool(name: str) -> str:
    """Path of `promtool` or `prometheus`; skipped with the install command when missing (a failure
    under CI, where .ci/run installs it)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(PROMETHEUS_INSTALL_HINT)
        pytest.skip(PROMETHEUS_INSTALL_HINT)
    return path


def registries() -> dict[str, CollectorRegistry]:
    """The metric registries of the product's processes, fresh: what each one's /metrics exports."""
    return {"pmem worker": Metrics().registry, "pmem serve": ApiMetrics().registry}


def exported_series_names() -> set[str]:
    """Every series name the product exports, with the suffixes of counters (`_total`) and
    histograms (`_bucket`, `_sum`, `_count`)."""
    names: set[str] = set()
    for registry in registries().values():
        for family in registry.collect():
            if family.type == "counter":
                names.add(family.name + "_total")
            elif family.type == "histogram":
                names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
            else:
                names.add(family.name)
    return names


def metric_names_in(expr: str) -> set[str]:
    """The pmem_ metric names a PromQL expression reads."""
    return set(METRIC.findall(STRING.sub('""', expr)))


@dataclass(frozen=True)
class PanelQuery:
    """One target of one Grafana panel."""

    dashboard: str
    panel_id: int
    title: str
    ref_id: str
    expr: str  # Grafana variables substituted

    @property
    def label(self) -> str:
        return f"{self.dashboard}: {self.title} ({self.ref_id})"


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS.glob("*.json"))


def dashboard_queries() -> list[PanelQuery]:
    """Every target of every panel of every dashboard, Grafana variables substituted."""
    queries: list[PanelQuery] = []
    for path in dashboard_files():
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"]
                for variable, value in GRAFANA_VARIABLES.items():
                    expr = expr.replace(variable, value)
                queries.append(PanelQuery(path.stem, panel["id"], panel["title"], target["refId"], expr))
    return queries
