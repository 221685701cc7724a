"""Prometheus metrics of `pmem serve` (prefix `pmem_`), on a registry of their own so each app (and
each test) has a fresh set. Names are referenced by deploy/ (the API dashboard and alert rules) and
listed in the README's metrics table; tests/deploy checks both against this registry."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

# the `route` label of a request no route matched (a 404): one series, whatever the path
UNMATCHED = "unmatched"


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
        )

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
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
