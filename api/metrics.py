"""Prometheus metrics of `pmem serve` (prefix `pmem_`), on a registry of their own so each app (and
each test) has a fresh set. Names are referenced by deploy/ (the API dashboard and alert rules) and
listed in the metrics table of docs/operations.md; tests/deploy checks both against this registry."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

# the `route` label of a request no route matched (a 404): one series, whatever the path
UNMATCHED = "unmatched"
# set (by `pmem serve --workers N`, before its processes start): the processes write their metrics
# to files there and `/metrics` answers with their sum, whichever process serves it
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(kw_only=True)
class ApiMetrics:
    """Request counts and latency by method and route template, and the review-queue depth."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter(
            "pmem_api_requests_total",
            "HTTP requests by route and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.duration = Histogram(
            "pmem_api_request_duration_seconds",
            "HTTP request latency by route",
            ["method", "route"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "pmem_review_queue_depth",
            "Pending memories and proposed changes by scope",
            ["scope"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.read_fallbacks = Counter(
            "pmem_read_fallbacks_total",
            "Reads a read replica could have served that went to the primary, by reason",
            ["reason"],
            registry=r,
        )
        self.replica_lag = Gauge(
            "pmem_read_replica_lag_seconds",
            "Replay lag of each read replica at its last check (-1: unreachable)",
            ["replica"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self._replicas: Any = None

    def watch_replicas(self, replicas: Any) -> None:
        """Count the fallbacks of a store's `ReadReplicas` and report each replica's lag."""
        for reason in replicas.fallbacks:
            self.read_fallbacks.labels(reason)
        replicas.on_fallback = lambda reason: self.read_fallbacks.labels(reason).inc()
        self._replicas = replicas

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (every process's sum under `pmem serve
        --workers N`)."""
        if self._replicas is not None:
            for replica in self._replicas.replicas:
                lag = -1.0 if replica.lag_s is None else float(replica.lag_s)
                self.replica_lag.labels(replica.label).set(lag)
        if os.environ.get(MULTIPROCESS_ENV):
            summed = CollectorRegistry()
            MultiProcessCollector(summed)  # type: ignore[no-untyped-call]
            return generate_latest(summed)
        return generate_latest(self.registry)


def route_template(scope: Scope, routes: Iterable[BaseRoute]) -> str:
    """The template of the route that handled a request (`/v1/memories/{memory_id}`, `/mcp`), never
    the concrete path, so the `route` label stays bounded.

    FastAPI's routes record themselves in the scope; a plain Starlette route (the MCP endpoint,
    `/openapi.json`) does not, so the app's top-level routes are matched again, which costs a few
    regular-expression matches and only for those requests. No match: `unmatched`."""
    path = getattr(scope.get("route"), "path", None)
    if isinstance(path, str):
        return path
    for route in routes:
        if isinstance(route, Route) and route.matches(scope)[0] is not Match.NONE:
            return route.path
    return UNMATCHED
