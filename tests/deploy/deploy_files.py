"""Where deploy/ is and how its files are read (shared by the tests in this folder)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "k8s"
PROMETHEUS = DEPLOY / "prometheus"
DASHBOARDS = DEPLOY / "grafana" / "dashboards"

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
