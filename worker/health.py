"""A minimal HTTP server (asyncio streams, no framework) for `/metrics`, `/healthz` and `/readyz`.

- `/healthz`: 200 while the event loop answers (liveness: restart the pod when this stops).
- `/readyz`: 200 when the readiness check passes (NATS connected, database reachable), else 503
  with the reason (readiness: stop routing / alert, do not restart).
- `/metrics`: the Prometheus text format of the worker's registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from worker.metrics import CONTENT_TYPE, Metrics

log = logging.getLogger("pmem.health")

# Returns None when ready, else a short reason.
ReadinessCheck = Callable[[], Awaitable[str | None]]

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Response:
    """An HTTP response: status, content type and body."""

    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


async def route(method: str, path: str, *, metrics: Metrics, readiness: ReadinessCheck) -> Response:
    """The response for one request (no I/O besides the readiness check)."""
    path = path.split("?", 1)[0]
    if method not in ("GET", "HEAD"):
        return Response(status=405, body=b"only GET\n")
    if path == "/healthz":
        return Response(status=200, body=b"ok\n")
    if path == "/readyz":
        try:
            problem = await readiness()
        except Exception as exc:  # a failing check means "not ready", never a crashed server
            problem = f"readiness check failed: {type(exc).__name__}: {exc}"
        metrics.ready.set(0 if problem else 1)
        if problem:
            return Response(status=503, body=f"not ready: {problem}\n".encode())
        return Response(status=200, body=b"ready\n")
    if path == "/metrics":
        return Response(status=200, body=metrics.exposition(), content_type=CONTENT_TYPE)
    return Response(status=404, body=b"not found: try /metrics, /healthz or /readyz\n")


@dataclass(kw_only=True)
class HealthServer:
    """Serves `route` on `host:port` (port 0: a free port, see `.port` after `start`)."""

    metrics: Metrics
    readiness: ReadinessCheck
    host: str = "0.0.0.0"  # all interfaces: probes and Prometheus come from outside the pod
    port: int = 0
    _server: asyncio.Server | None = field(default=None, init=False)

    async def start(self) -> HealthServer:
        """Start listening; afterwards `port` is the bound port."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("health and metrics on http://%s:%d (/metrics /healthz /readyz)", self.host, self.port)
        return self

    async def stop(self) -> None:
        """Stop listening and close open connections."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=2)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), timeout=10)
            parts = request_line.decode("latin-1").split()
            # drain the headers; we do not need any of them
            while True:
                line = await asyncio.wait_for(reader.readline(), timeout=10)
                if line in (b"\r\n", b"\n", b""):
                    break
            if len(parts) < 2:
                response = Response(status=405, body=b"bad request\n")
                method = "GET"
            else:
                method = parts[0].upper()
                response = await route(method, parts[1], metrics=self.metrics, readiness=self.readiness)
            head = (
                f"HTTP/1.1 {response.status} {_REASONS.get(response.status, '')}\r\n"
                f"Content-Type: {response.content_type}\r\n"
                f"Content-Length: {len(response.body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode("latin-1")
            writer.write(head if method == "HEAD" else head + response.body)
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
