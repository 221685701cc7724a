"""`/metrics`, `/healthz` and `/readyz` of the worker, served by standard pieces: prometheus_client's
WSGI exposition app behind the standard library's threading WSGI server (what prometheus_client's
own `start_http_server` runs), with two small WSGI handlers for the probes.

- `/healthz`: 200 while the worker's event loop answers within `LOOP_TIMEOUT_S` (liveness: a
  blocked or dead loop gets the pod restarted).
- `/readyz`: 200 when the readiness check passes (NATS connected, database reachable), else 503
  with the reason (readiness: stop routing / alert, do not restart).
- `/metrics`: the Prometheus text format of the worker's registry.

The server runs in a daemon thread, so a scrape or probe never waits for a busy event loop except
for the checks that must ask it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from worker.metrics import Metrics

log = logging.getLogger("pmem.health")

# Returns None when ready, else a short reason.
ReadinessCheck = Callable[[], Awaitable[str | None]]

LOOP_TIMEOUT_S = 5.0
TEXT = (("Content-Type", "text/plain; charset=utf-8"),)


def _plain(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    # a fresh header list per answer: the server adds Content-Length to the list it is given, and a
    # shared one would carry the first answer's length into every later one
    start_response(status, list(TEXT))
    return [body.encode()]


async def _loop_answers() -> None:
    return None


async def _as_coroutine(check: Callable[[], Awaitable[Any]]) -> Any:
    return await check()


def health_app(
    *, metrics: Metrics, readiness: ReadinessCheck, loop: asyncio.AbstractEventLoop
) -> WSGIApplication:
    """The WSGI application: `/metrics` (prometheus_client), `/healthz`, `/readyz`; 404 elsewhere.
    Called from the server thread; the probes run their checks on `loop`."""
    exposition = make_wsgi_app(metrics.registry)

    def on_loop(check: Callable[[], Awaitable[Any]]) -> Any:
        return asyncio.run_coroutine_threadsafe(_as_coroutine(check), loop).result(timeout=LOOP_TIMEOUT_S)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return _plain(start_response, "405 Method Not Allowed", "only GET\n")
        if path == "/metrics":
            body: Iterable[bytes] = exposition(environ, start_response)
            return body
        if path == "/healthz":
            try:
                on_loop(_loop_answers)
            except Exception:
                return _plain(start_response, "503 Service Unavailable", "event loop not answering\n")
            return _plain(start_response, "200 OK", "ok\n")
        if path == "/readyz":
            try:
                problem = on_loop(readiness)
            except Exception as exc:  # a failing check means "not ready", never a crashed server
                problem = f"readiness check failed: {type(exc).__name__}: {exc}"
            metrics.ready.set(0 if problem else 1)
            if problem:
                return _plain(start_response, "503 Service Unavailable", f"not ready: {problem}\n")
            return _plain(start_response, "200 OK", "ready\n")
        return _plain(start_response, "404 Not Found", "not found: try /metrics, /healthz or /readyz\n")

    return app


class _QuietHandler(WSGIRequestHandler):
    """No access log line per probe and scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        return None


@dataclass(kw_only=True)
class HealthServer:
    """Serves `health_app` on `host:port` (port 0: a free port, see `.port` after `start`)."""

    metrics: Metrics
    readiness: ReadinessCheck
    host: str = "0.0.0.0"  # all interfaces: probes and Prometheus come from outside the pod
    port: int = 0
    _server: WSGIServer | None = field(default=None, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    async def start(self) -> HealthServer:
        """Start listening in a daemon thread; afterwards `port` is the bound port."""
        app = health_app(metrics=self.metrics, readiness=self.readiness, loop=asyncio.get_running_loop())
        self._server = make_server(
            self.host, self.port, app, server_class=ThreadingWSGIServer, handler_class=_QuietHandler
        )
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(target=self._server.serve_forever, name="pmem-health", daemon=True)
        self._thread.start()
        log.info("health and metrics on http://%s:%d (/metrics /healthz /readyz)", self.host, self.port)
        return self

    async def stop(self) -> None:
        """Stop serving and close the socket."""
        server, self._server = self._server, None
        if server is not None:
            await asyncio.to_thread(server.shutdown)
            server.server_close()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5)
            self._thread = None
