"""The Kubernetes manifests against the real schemas: the Kubernetes API's JSON schemas (PyPI
`kubernetes-validate`, strict: unknown fields are errors) and KEDA's ScaledObject CRD (PyPI
`cloudcoil-models-keda`, models generated from KEDA's CRDs, version in pyproject), plus the
consistency kustomize does not check: every ConfigMap/Secret and key a pod references exists, every
selector matches a pod template, every named port exists, the ScaledObject scales the worker on
the stream and consumer the worker's configuration names, the API's autoscaler and disruption
budget fit its Deployment, the migrate Job is named after the release it runs, and the declared
replica counts match the connection budget the README states."""

from __future__ import annotations

import copy
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from cloudcoil.models.keda.v1alpha1 import ScaledObject

from extraction.embeddings import HashingEmbedder
from store.postgres.store import PostgresMemoryStore
from tests.deploy.deploy_files import (
    K8S,
    all_k8s_objects,
    find_object,
    k8s_documents,
    k8s_manifest_files,
)
from worker.connection_budget import pool_capacity

# The Kubernetes version the manifests target (schemas shipped by kubernetes-validate).
KUBERNETES_VERSION = "1.33"
ROOT = K8S.parents[1]
# the release the manifests deploy: the image tag they run and the migrate Job's name
RELEASE = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = "persona-memory"
MIGRATE_JOB = f"pmem-migrate-{RELEASE}"
KEDA_KINDS = {("keda.sh/v1alpha1", "ScaledObject"): ScaledObject}


def _closed(schema: Any) -> Any:
    """A copy of a JSON schema where every object with declared properties rejects other keys (what
    the API server's structural-schema pruning would silently drop: a typo'd field)."""
    if isinstance(schema, dict):
        out = {key: _closed(value) for key, value in schema.items()}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    return schema


def keda_schema(kind: tuple[str, str]) -> dict[str, Any]:
    """JSON schema of a KEDA resource, closed against unknown fields; `metadata` stays open (the
    Kubernetes ObjectMeta is checked for the other kinds)."""
    schema = KEDA_KINDS[kind].model_json_schema(by_alias=True, mode="validation")
    closed: dict[str, Any] = _closed(schema)
    closed["properties"]["metadata"] = {"type": "object"}
    return closed


def validate_object(obj: dict[str, Any]) -> None:
    """Raise if `obj` does not match its schema (Kubernetes or KEDA)."""
    kind = (obj["apiVersion"], obj["kind"])
    if kind in KEDA_KINDS:
        jsonschema.validate(obj, keda_schema(kind))
        # and through the models themselves (enums, required fields as KEDA declares them)
        KEDA_KINDS[kind].model_validate(obj)
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def _objects_with_ids() -> list[Any]:
    return [
        pytest.param(doc, id=f"{path.name}:{doc['kind']}/{doc['metadata']['name']}")
        for path in k8s_manifest_files()
        for doc in k8s_documents(path)
    ]


@pytest.mark.parametrize("obj", _objects_with_ids())
def test_every_manifest_matches_its_schema(obj: dict[str, Any]) -> None:
    validate_object(obj)


@pytest.mark.parametrize(
    ("kind", "name", "breaks"),
    [
        ("Deployment", "pmem-worker", lambda o: o["spec"]["template"]["spec"].update(terminationGrace=45)),
        ("Deployment", "pmem-api", lambda o: o["spec"].update(replicas="two")),
        ("CronJob", "pmem-retention", lambda o: o["spec"].pop("jobTemplate")),
        ("ScaledObject", "pmem-worker", lambda o: o["spec"].update(minReplicas=1)),
        ("ScaledObject", "pmem-worker", lambda o: o["spec"]["triggers"][0].pop("type")),
        ("ScaledObject", "pmem-worker", lambda o: o["spec"]["scaleTargetRef"].pop("name")),
        ("HorizontalPodAutoscaler", "pmem-api", lambda o: o["spec"].pop("maxReplicas")),
        ("HorizontalPodAutoscaler", "pmem-api", lambda o: o["spec"].update(targetCPU=70)),
        ("PodDisruptionBudget", "pmem-api", lambda o: o["spec"].update(minAvailable=[1])),
        ("Job", MIGRATE_JOB, lambda o: o["spec"]["template"]["spec"].pop("containers")),
    ],
    ids=[
        "unknown-field",
        "wrong-type",
        "missing-required",
        "keda-typo",
        "keda-no-type",
        "keda-no-target",
        "hpa-no-max",
        "hpa-unknown-field",
        "pdb-wrong-type",
        "job-no-containers",
    ],
)
def test_the_schema_check_rejects_a_broken_manifest(kind: str, name: str, breaks: Any) -> None:
    broken = copy.deepcopy(find_object(kind, name))
    breaks(broken)
    with pytest.raises((jsonschema.ValidationError, ValueError)):
        validate_object(broken)


def test_kustomization_lists_every_manifest_but_the_example_secrets() -> None:
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    assert all((K8S / name).is_file() for name in listed)
    expected = {p.name for p in k8s_manifest_files()} - {"secret.example.yaml"}
    assert sorted(listed) == sorted(expected)


def pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    """(object name, pod spec) of every workload."""
    for obj in all_k8s_objects():
        spec = obj.get("spec", {})
        if obj["kind"] in ("Deployment", "Job"):
            yield obj["metadata"]["name"], spec["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield obj["metadata"]["name"], spec["jobTemplate"]["spec"]["template"]["spec"]


def data_keys(kind: str, name: str) -> set[str]:
    obj = find_object(kind, name)
    return set(obj.get("data", {})) | set(obj.get("stringData", {}))


def test_every_referenced_configmap_and_secret_key_exists() -> None:
    checked = 0
    for workload, pod in pod_specs():
        for container in pod["containers"]:
            for source in container.get("envFrom", []):
                for ref_kind, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                    if ref_kind in source:
                        assert data_keys(kind, source[ref_kind]["name"]), f"{workload}: empty {kind}"
                        checked += 1
            for env in container.get("env", []):
                value_from = env.get("valueFrom", {})
                for ref_kind, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                    if ref_kind in value_from:
                        ref = value_from[ref_kind]
                        assert ref["key"] in data_keys(kind, ref["name"]), (
                            f"{workload}: {kind} {ref['name']} has no key {ref['key']}"
                        )
                        checked += 1
    assert checked >= 10


def test_services_select_pods_and_name_their_ports() -> None:
    workloads = [o for o in all_k8s_objects() if o["kind"] == "Deployment"]
    for service in (o for o in all_k8s_objects() if o["kind"] == "Service"):
        selector = service["spec"]["selector"]
        matches = [
            d for d in workloads if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert matches, f"Service {service['metadata']['name']} selects no Deployment"
        ports = {
            p["name"]
            for d in matches
            for c in d["spec"]["template"]["spec"]["containers"]
            for p in c["ports"]
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports
        annotated = service["metadata"]["annotations"]["prometheus.io/port"]
        container_ports = {
            str(p["containerPort"])
            for d in matches
            for c in d["spec"]["template"]["spec"]["containers"]
            for p in c["ports"]
        }
        assert annotated in container_ports


def test_deployments_select_their_own_pods_and_probe_named_ports() -> None:
    for deployment in (o for o in all_k8s_objects() if o["kind"] == "Deployment"):
        template = deployment["spec"]["template"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        for container in template["spec"]["containers"]:
            names = {p["name"] for p in container["ports"]}
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert container["readinessProbe"]["httpGet"]["port"] in names
            assert container["livenessProbe"]["httpGet"]["port"] in names


def test_the_api_listens_on_its_configured_port() -> None:
    api = find_object("Deployment", "pmem-api")
    container = api["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["serve"]
    port = find_object("ConfigMap", "pmem-api")["data"]["PMEM_API_PORT"]
    assert [p["containerPort"] for p in container["ports"]] == [int(port)]


def test_retention_runs_daily_and_never_twice_at_once() -> None:
    cron = find_object("CronJob", "pmem-retention")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["retention"]
    assert len(cron["spec"]["schedule"].split()) == 5


def test_scaled_object_scales_the_worker_on_its_own_consumer() -> None:
    scaled = find_object("ScaledObject", "pmem-worker")
    worker = find_object("Deployment", "pmem-worker")
    config = find_object("ConfigMap", "pmem-worker")["data"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    assert "replicas" not in worker["spec"], "KEDA owns the replica count; a fixed one fights it"
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "nats-jetstream"
    meta = trigger["metadata"]
    assert meta["stream"] == config["PMEM_STREAM"]
    assert meta["consumer"] == config["PMEM_DURABLE"]
    assert meta["account"] == "$G"  # no accounts configured on the server (README: sizing)
    assert meta["natsServerMonitoringEndpoint"].endswith(":8222")
    assert (
        meta["natsServerMonitoringEndpoint"].split(":")[0]
        == config["PMEM_NATS_URL"].split("//")[1].split(":")[0]
    )
    assert int(meta["lagThreshold"]) == int(config["PMEM_CONCURRENCY"])
    assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]
    assert int(config["PMEM_DB_POOL_SIZE"]) >= int(config["PMEM_CONCURRENCY"])


def test_pods_outlive_the_worker_shutdown_timeout() -> None:
    deployment = find_object("Deployment", "pmem-worker")
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > float(find_object("ConfigMap", "pmem-worker")["data"]["PMEM_SHUTDOWN_TIMEOUT_S"])


def test_files_are_where_the_readme_says(readme: Path) -> None:
    text = readme.read_text()
    for path in k8s_manifest_files():
        if path.name != "secret.example.yaml":
            assert path.name in text, f"README does not mention deploy/k8s/{path.name}"


def test_the_api_scales_on_cpu_and_keeps_a_pod_through_disruptions() -> None:
    api = find_object("Deployment", "pmem-api")
    hpa = find_object("HorizontalPodAutoscaler", "pmem-api")
    pdb = find_object("PodDisruptionBudget", "pmem-api")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == ("apps/v1", "Deployment", "pmem-api")
    assert "replicas" not in api["spec"], "the HorizontalPodAutoscaler owns the replica count"
    [metric] = hpa["spec"]["metrics"]
    assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    assert 0 < metric["resource"]["target"]["averageUtilization"] < 100
    # utilization is measured against the request: every container must have one
    for container in api["spec"]["template"]["spec"]["containers"]:
        assert container["resources"]["requests"]["cpu"]
    assert 2 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    # the budget selects exactly the API's pods and still lets one of the minimum be evicted
    pod_labels = api["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    for other in all_k8s_objects():
        if other["kind"] == "Deployment" and other["metadata"]["name"] != "pmem-api":
            labels = other["spec"]["template"]["metadata"]["labels"]
            assert not pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert 1 <= pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"]


def images() -> list[str]:
    """Every container image the manifests run."""
    return [c["image"] for _, pod in pod_specs() for c in pod["containers"]]


def test_the_migrate_job_is_named_after_the_release_it_runs() -> None:
    """A Job's template is immutable: the next release's Job must be a new object, so its name
    carries the image tag it runs (and every workload runs the same release)."""
    assert images() and set(images()) == {f"{IMAGE}:{RELEASE}"}
    [job] = [o for o in all_k8s_objects() if o["kind"] == "Job"]
    assert job["metadata"]["name"] == MIGRATE_JOB
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["migrate"]
    assert container["image"].rsplit(":", 1)[1] == job["metadata"]["name"].removeprefix("pmem-migrate-")
    for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        assert labels["app.kubernetes.io/version"] == RELEASE
    # a Job name is a DNS subdomain of at most 63 characters (it becomes the pods' job-name label)
    assert len(MIGRATE_JOB) <= 63


def test_the_readme_applies_this_release_s_migrate_job(readme: Path) -> None:
    text = readme.read_text()
    assert f"job/{MIGRATE_JOB}" in text
    assert "pmem-migrate-<version>" in text


def test_kustomize_builds_every_object() -> None:
    """`kubectl kustomize` (kustomize built into kubectl) renders the directory; skipped where
    kubectl is not installed."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    built = subprocess.run(
        [kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    rendered = sorted(
        (doc["kind"], doc["metadata"]["name"]) for doc in yaml.safe_load_all(built) if doc is not None
    )
    expected = sorted(
        (doc["kind"], doc["metadata"]["name"])
        for doc in all_k8s_objects()
        if doc["kind"] != "Secret"  # created by the operator (secret.example.yaml)
    )
    assert rendered == expected
    assert ("Job", MIGRATE_JOB) in rendered


def test_the_manifests_declare_their_connection_budget(readme: Path) -> None:
    """PMEM_EXPECTED_REPLICAS is each Deployment's most replicas (what the start-up warning
    multiplies the pool by), and the README states the max_connections these manifests need."""
    worker = find_object("ConfigMap", "pmem-worker")["data"]
    api = find_object("ConfigMap", "pmem-api")["data"]
    workers = find_object("ScaledObject", "pmem-worker")["spec"]["maxReplicaCount"]
    api_pods = find_object("HorizontalPodAutoscaler", "pmem-api")["spec"]["maxReplicas"]
    assert int(worker["PMEM_EXPECTED_REPLICAS"]) == workers
    assert int(api["PMEM_EXPECTED_REPLICAS"]) == api_pods
    # pmem serve's and pmem retention's store: store.factory's pool (nothing connects here)
    serve_pool, _ = pool_capacity(PostgresMemoryStore("postgresql://pmem@db/pmem", HashingEmbedder(dim=8)))
    assert serve_pool == 20
    api_processes = int(api.get("PMEM_API_WORKERS", "1"))
    needed = workers * int(worker["PMEM_DB_POOL_SIZE"]) + api_pods * api_processes * serve_pool + serve_pool
    text = " ".join(readme.read_text().split())
    assert f"needs `max_connections` ≥ {needed}" in text
    assert "pmem serve replicas × PMEM_API_WORKERS × 20" in text
