"""`create_app`: the control plane's ASGI app (FastAPI), with JSON errors, a body-size limit,
security headers, request metrics and health endpoints."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.asgi import HttpMiddleware
from api.auth import ApiKeyCache, AuthConfig
from api.cookies import CookieGuard
from api.deps import AppState
from api.errors import TEAM_BOUNDARY_REFUSED, ApiError
from api.mcp_server import MCP_PATH, McpEndpoint, build_mcp, running
from api.metrics import ApiMetrics, route_template
from api.openapi import document_errors, path_methods
from api.read_routing import CHECK_MARGIN_S, RecentWriters, after_write, wants_primary
from api.routes import directory, me, platform, review, settings, tools
from store.core.store import CoreStore
from store.errors import StoreTimeout, StoreUnavailable, TeamBoundaryViolation
from store.read_scope import ReadScope, read_scope
from store.rules.hint import DEFAULT_MAX_TOKENS
from store.rules.input_errors import describe, unparsable_body
from store.services.settings_cache import SettingsCache
from store.team_scope import platform_scope, request_cell

log = logging.getLogger("pmem.api")

STATIC = Path(__file__).resolve().parent / "static"
# Swagger UI's own files, served from the installed `swagger-ui-bundle-v2` package: /docs works
# offline and under the Content-Security-Policy (no CDN, no inline script)
DOCS_FILES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
}
DOCS_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>persona-memory API</title>
<link rel="stylesheet" href="/docs/static/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/static/swagger-ui-bundle.js"></script>
<script src="/docs/static/docs.js"></script></body></html>
"""
# /metrics is scraped unauthenticated: the review-queue depth is read from the database at most
# this often, whatever the scrape rate
QUEUE_DEPTH_CACHE_S = 15.0

# Only the server's own origin: the UI ships its scripts and styles as files, nothing inline.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)


class ReadyBody(BaseModel):
    """`/readyz`: ready, or unavailable with the reason."""

    status: str
    error: str | None = None


class BodyTooLarge(Exception):
    """A request body passed the configured limit while it was being read."""


class BodyLimit(HttpMiddleware):
    """ASGI middleware: 413 for bodies over `max_bytes` (declared or streamed)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _too_large(self.max_bytes)(scope, receive, send)
            return
        seen = 0
        started = False
        exceeded = False

        async def counting_receive() -> Message:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    exceeded = True
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if exceeded:
                # the app caught BodyTooLarge (FastAPI turns a failed body read into 400): its
                # answer is replaced by the 413 it would have been
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await _too_large(self.max_bytes)(scope, receive, send)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await _too_large(self.max_bytes)(scope, receive, send)


def _too_large(max_bytes: int) -> JSONResponse:
    return JSONResponse({"error": f"request body over {max_bytes} bytes"}, status_code=413)


class Observe(HttpMiddleware):
    """ASGI middleware: request metrics by route template, the security headers, and with read
    replicas the request's `ReadScope` (the primary when the caller wrote lately: api.read_routing).

    Plain ASGI rather than `@app.middleware("http")`: that one runs every request in a task group
    and streams its response through a memory channel (with a dependency's thread hop, removed at
    the same time, 1.3–1.5 ms of the API's CPU per platform request: bench/README.md, "Platform
    load")."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: list[BaseRoute],
        metrics: ApiMetrics,
        writers: RecentWriters | None,
    ) -> None:
        super().__init__(app)
        self.routes = routes
        self.metrics = metrics
        self.writers = writers

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        writers = self.writers
        read = None if writers is None else ReadScope(primary=wants_primary(scope))
        status = 500  # what a request that raised past the app's handlers answers
        path: str | None = None

        async def observed_send(message: Message) -> None:
            nonlocal status, path
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                headers.setdefault("Referrer-Policy", "no-referrer")
                path = route_template(scope, self.routes)
                if not path.startswith("/docs") and path != "/openapi.json":
                    headers.setdefault("Cache-Control", "no-store")
                if read is not None and writers is not None and read.wrote:
                    after_write(scope, headers, writers)
            await send(message)

        try:
            # rows of no team until the caller is authenticated (`api.deps.current_principal`)
            with request_cell():
                if read is None:
                    await self.app(scope, receive, observed_send)
                else:
                    with read_scope(read):
                        await self.app(scope, receive, observed_send)
        finally:
            if path is None:
                path = route_template(scope, self.routes)
            method = scope["method"]
            self.metrics.requests.labels(method, path, str(status)).inc()
            self.metrics.duration.labels(method, path).observe(time.perf_counter() - start)


def create_app(
    *,
    store: CoreStore,
    auth: AuthConfig,
    max_input_tokens: int = 6000,
    hint_max_tokens: int = DEFAULT_MAX_TOKENS,
    max_body_bytes: int = 1_000_000,
    settings_cache_s: float = 5.0,
    ui_session_s: float = 8 * 3600,
    sign_in_max_s: float = 600,
    with_ui: bool = True,
) -> FastAPI:
    """The control-plane app over an open store: its state, the MCP session manager's lifespan,
    JSON errors, health and docs routes, the product's routers (and the web UI), then the
    middleware."""
    # a store with read replicas (`PostgresMemoryStore(read_urls=…)`): reads after a write go to
    # the primary for the lag bound and the check's margin (api.read_routing)
    replicas = getattr(store, "replicas", None)
    writers = None if replicas is None else RecentWriters(window_s=replicas.max_lag_s + CHECK_MARGIN_S)
    state = AppState(
        store=store,
        auth=auth,
        keys=ApiKeyCache(store.api_keys.verify_api_key),
        settings_cache=SettingsCache(ttl_s=settings_cache_s),
        max_input_tokens=max_input_tokens,
        hint_max_tokens=hint_max_tokens,
        max_body_bytes=max_body_bytes,
        ui_session_s=ui_session_s,
        sign_in_max_s=sign_in_max_s,
        recent_writers=writers,
    )
    _, mcp_manager = build_mcp(state)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with running(mcp_manager):
            yield

    app = FastAPI(
        title="persona-memory control plane",
        description="Review, user controls, settings, erasure, platform recall and the memory tools "
        "(HTTP, and MCP at /mcp) for persona-memory.",
        version="1",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.pmem = state
    metrics_set = ApiMetrics()
    if replicas is not None:
        metrics_set.watch_replicas(replicas)
    add_error_handlers(app)
    add_health_routes(app, store, metrics_set)
    add_docs_routes(app)
    add_product_routes(app, state, mcp_manager, with_ui=with_ui)
    app.add_middleware(Observe, routes=app.router.routes, metrics=metrics_set, writers=writers)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    # outermost: no parser after it sees a cookie header over the cap or a quoted value
    app.add_middleware(CookieGuard)
    document_errors(app)
    return app


def add_product_routes(
    app: FastAPI, state: AppState, mcp_manager: StreamableHTTPSessionManager, *, with_ui: bool
) -> None:
    """The product's routers (user controls, review, settings, platform recall, tools, directory),
    MCP at `MCP_PATH`, and with `with_ui` the web UI."""
    for routes in (me, review, settings, platform, tools, directory):
        app.include_router(routes.router)
    app.router.routes.append(Route(MCP_PATH, McpEndpoint(state, mcp_manager)))
    if with_ui:
        from api import ui

        app.include_router(ui.router)


def add_error_handlers(app: FastAPI) -> None:
    """Every error as `{"error": …}`: the API's own, invalid requests (never echoing the input),
    HTTP errors (405 with every method of the path), a busy or unavailable database (503 with
    Retry-After), a write refused at the team boundary (403, logged with the database's reason)
    and anything unexpected (500, details in the log only)."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"error": exc.message}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        # the caller's field names and JSON types; never the input value (it may be a secret)
        return JSONResponse({"error": describe(exc.errors())}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and isinstance(exc.__cause__, (UnicodeDecodeError, RecursionError)):
            # FastAPI's bare 400 for a body it could not decode: the documented 422, saying why
            return JSONResponse({"error": unparsable_body(exc.__cause__)}, status_code=422)
        methods = path_methods(app.openapi(), request.url.path) if exc.status_code == 405 else None
        if methods is not None:
            # every method of the path: its routes are separate, and Starlette names only one's
            allow = {"Allow": ", ".join(methods)}
            if request.method == "OPTIONS":
                return Response(status_code=204, headers=allow)
            return JSONResponse({"error": str(exc.detail)}, status_code=405, headers=allow)
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(StoreTimeout)
    @app.exception_handler(StoreUnavailable)
    async def database_busy(request: Request, exc: Exception) -> JSONResponse:
        log.warning("database %s on %s %s", type(exc).__name__, request.method, request.url.path)
        message = (
            "the database did not answer in time (PMEM_DB_STATEMENT_TIMEOUT_S); try again"
            if isinstance(exc, StoreTimeout)
            else "the database is unavailable; try again shortly"
        )
        return JSONResponse({"error": message}, status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(TeamBoundaryViolation)
    async def team_boundary(request: Request, exc: Exception) -> JSONResponse:
        # the reason names the table, never a value: Postgres words it without the row
        log.warning("team boundary on %s %s: %s", request.method, request.url.path, exc)
        return JSONResponse({"error": TEAM_BOUNDARY_REFUSED}, status_code=403)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error on %s %s: %s", request.method, request.url.path, type(exc).__name__)
        return JSONResponse({"error": "internal error; the server log has the details"}, status_code=500)


def add_health_routes(app: FastAPI, store: CoreStore, metrics_set: ApiMetrics) -> None:
    """`/healthz` (the process is up), `/readyz` (the database answers) and `/metrics`."""

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["health"],
        responses={503: {"description": "The database does not answer", "model": ReadyBody}},
    )
    async def readyz() -> JSONResponse:
        """The database answers."""
        try:
            await store.ping()
        except Exception as exc:
            log.warning("readiness check failed: %s", type(exc).__name__)
            return JSONResponse({"status": "unavailable", "error": "database unreachable"}, status_code=503)
        return JSONResponse({"status": "ready"})

    depth_read_at = [-QUEUE_DEPTH_CACHE_S]

    @app.get(
        "/metrics",
        tags=["health"],
        response_class=PlainTextResponse,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
    )
    async def metrics() -> Response:
        """Prometheus metrics: requests, latency, review-queue depth by scope (read from the
        database at most every 15 s)."""
        now = time.monotonic()
        if now - depth_read_at[0] >= QUEUE_DEPTH_CACHE_S:
            depth_read_at[0] = now
            try:
                # counts of every team's queue (no content): the platform scope, logged
                with platform_scope("the review-queue depth gauge of /metrics"):
                    counts = await store.review.pending_counts()
                for scope, count in counts.items():
                    metrics_set.queue_depth.labels(scope).set(count)
            except Exception as exc:
                log.warning("could not read the review-queue depth: %s", type(exc).__name__)
        return Response(metrics_set.exposition(), media_type=CONTENT_TYPE_LATEST)


def add_docs_routes(app: FastAPI) -> None:
    """`/docs`: Swagger UI over /openapi.json, served from the installed package (no CDN)."""

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        """Swagger UI over /openapi.json, from the server's own files."""
        return HTMLResponse(DOCS_PAGE)

    @app.get("/docs/static/{name}", include_in_schema=False)
    async def docs_static(name: str) -> Response:
        """Swagger UI's script and style (package `swagger-ui-bundle-v2`) and its start-up script."""
        if name == "docs.js":
            return FileResponse(STATIC / name, media_type="text/javascript; charset=utf-8")
        if name not in DOCS_FILES:
            return JSONResponse({"error": "not found"}, status_code=404)
        from swagger_ui_bundle import swagger_ui_path

        return FileResponse(Path(swagger_ui_path) / name, media_type=DOCS_FILES[name])
