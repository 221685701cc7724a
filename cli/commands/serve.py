"""`pmem serve`: the control plane (HTTP API and web UI) on PMEM_API_PORT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import uvicorn
from starlette.types import Message, Receive, Scope, Send
from uvicorn.supervisors import Multiprocess

from api.auth import AuthConfig
from api.metrics import MULTIPROCESS_ENV
from cli.commands.errors import collapse_whitespace, redact, run_reporting_database_errors, secrets_in
from cli.commands.store_session import command_settings, opened_store
from cli.runtime import event_loop_factory, tune_gc
from config import Settings, load_settings
from store.postgres.buffer_budget import warn_if_buffers_too_small
from worker.connection_budget import warn_if_over_budget

if TYPE_CHECKING:
    from fastapi import FastAPI

    from store.factory import Store

INSECURE_BANNER = (
    "pmem serve: WARNING --insecure-dev: no authentication. Every request without a credential acts as "
    "an ADMIN. Never expose this server beyond your own machine."
)


def register(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of `pmem serve`."""
    parser.add_argument("--host", help="address to listen on (default: PMEM_API_HOST, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default: PMEM_API_PORT, 8080)")
    parser.add_argument("--database-url", help="default: PMEM_DATABASE_URL")
    parser.add_argument(
        "--workers",
        type=int,
        help="API processes sharing the port (default: PMEM_API_WORKERS, 1); each has its own pool",
    )
    parser.add_argument(
        "--insecure-dev",
        action="store_true",
        help="start without PMEM_AUTH_JWT_SECRET/_PUBLIC_KEY: requests without credentials act as an admin",
    )
    parser.set_defaults(run=run)


def auth_config(settings: Settings, *, insecure_dev: bool = False) -> AuthConfig:
    """The API's token verification from the PMEM_AUTH_* settings."""
    return AuthConfig(
        jwt_secret=settings.auth_jwt_secret,
        jwt_public_key=settings.auth_jwt_public_key,
        issuer=settings.auth_issuer,
        audience=settings.auth_audience,
        insecure_dev=insecure_dev,
    )


def build_app(store: Store, settings: Settings, *, insecure_dev: bool) -> FastAPI:
    """The control-plane app over an open store, configured from `settings`."""
    from api.app import create_app

    return create_app(
        store=store,
        auth=auth_config(settings, insecure_dev=insecure_dev),
        max_input_tokens=settings.llm_max_input_tokens,
        hint_max_tokens=settings.hint_max_tokens,
        max_body_bytes=settings.api_max_body_bytes,
        settings_cache_s=settings.settings_cache_s,
        ui_session_s=settings.ui_session_s,
        sign_in_max_s=settings.ui_sign_in_max_s,
    )


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """What every `pmem serve` uvicorn runs with: quiet logs, the keep-alive, and a bounded
    graceful shutdown (in-flight requests get PMEM_SHUTDOWN_TIMEOUT_S)."""
    # uvicorn has no deadline for reading a request's headers: in production a reverse proxy
    # in front (docs/security.md) bounds that; idle connections close after the keep-alive
    return {
        "log_level": "warning",
        "access_log": False,
        "timeout_keep_alive": settings.api_keep_alive_s,
        "timeout_graceful_shutdown": max(1, round(settings.shutdown_timeout_s)),
    }


def listening(host: str, port: int, workers: int) -> None:
    processes = "" if workers == 1 else f", {workers} processes"
    print(
        f"pmem serve: listening on http://{host}:{port} (API /v1, UI /ui/, docs /docs{processes})",
        file=sys.stderr,
    )


async def warn_at_start_up(store: object, settings: Settings, *, processes: int) -> None:
    """The start-up checks of the Postgres server (each logs one WARNING, none stops the start):
    the connection budget of `processes` API processes and the shared buffers."""
    await warn_if_over_budget(
        store, process="pmem serve", replicas=settings.expected_replicas, processes=processes
    )
    await warn_if_buffers_too_small(store, process="pmem serve")


async def serve(settings: Settings, *, host: str, port: int, insecure_dev: bool) -> None:
    """Open the store, then serve until SIGTERM/SIGINT (uvicorn's graceful shutdown)."""
    async with opened_store(settings, read_replicas=True, steady_pool=True) as store:
        await warn_at_start_up(store, settings, processes=1)
        app = build_app(store, settings, insecure_dev=insecure_dev)
        config = uvicorn.Config(app, host=host, port=port, **uvicorn_options(settings))
        server = _Server(config)
        listening(host, port, 1)
        tune_gc()
        await server.serve()


# `pmem serve --workers N`: what the parent tells its API processes (they start from an import
# string, so only the environment reaches them)
INSECURE_DEV_ENV = "_PMEM_SERVE_INSECURE_DEV"


class ServedApp:
    """The ASGI app of one API process of `pmem serve --workers N`: it opens its own store when
    uvicorn starts it (lifespan), builds the app over it, and closes the store after the app's
    shutdown. A store that cannot open fails the process's start-up, and uvicorn stops them all."""

    def __init__(self, settings: Settings, *, insecure_dev: bool) -> None:
        self._settings = settings
        self._insecure_dev = insecure_dev
        self._app: FastAPI | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if self._app is None:
            raise RuntimeError("pmem serve: a request before the app started")
        await self._app(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        startup = await receive()
        async with contextlib.AsyncExitStack() as stack:
            try:
                store = await stack.enter_async_context(
                    opened_store(self._settings, read_replicas=True, steady_pool=True)
                )
                app = self._app = build_app(store, self._settings, insecure_dev=self._insecure_dev)
                tune_gc()
            except Exception as exc:
                message = redact(collapse_whitespace(f"{type(exc).__name__}: {exc}"), secrets_in(os.environ))
                await send({"type": "lifespan.startup.failed", "message": f"pmem serve: {message}"})
                return
            replayed = False

            async def receive_startup_first() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return startup
                return await receive()

            async def close_store_then_send(message: Message) -> None:
                if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                    await stack.aclose()  # every request is done: close the pool before the exit
                await send(message)

            await app(scope, receive_startup_first, close_store_then_send)


def served_app() -> ServedApp:
    """uvicorn's app factory in each process of `pmem serve --workers N` (settings from the
    environment the parent passed on)."""
    return ServedApp(load_settings(), insecure_dev=os.environ.get(INSECURE_DEV_ENV) == "1")


async def _check_before_forking(settings: Settings, workers: int) -> None:
    """Once, in the parent: the schema and embedding checks (a clear error before any process
    starts), the connection budget of all `workers` processes and the shared buffers."""
    async with opened_store(settings, read_replicas=False, steady_pool=True) as store:
        await warn_at_start_up(store, settings, processes=workers)


def serve_processes(settings: Settings, *, host: str, port: int, insecure_dev: bool, workers: int) -> None:
    """`workers` API processes on one port (uvicorn's supervisor: the parent binds the socket,
    the processes accept on it; one that dies is replaced). SIGTERM/SIGINT to the parent stops
    every process gracefully. Their Prometheus metrics are summed over the processes (the
    client's multiprocess mode, in a temporary directory the parent removes at exit)."""
    asyncio.run(_check_before_forking(settings, workers))
    if settings.database_url != os.environ.get("PMEM_DATABASE_URL"):
        os.environ["PMEM_DATABASE_URL"] = settings.database_url  # --database-url
    os.environ[INSECURE_DEV_ENV] = "1" if insecure_dev else "0"
    with tempfile.TemporaryDirectory(prefix="pmem-serve-metrics-") as metrics_dir:
        os.environ[MULTIPROCESS_ENV] = metrics_dir
        config = uvicorn.Config(
            f"{__name__}:served_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            **uvicorn_options(settings),
        )
        sock = config.bind_socket()
        listening(host, port, workers)
        try:
            Multiprocess(config, sockets=[sock]).run()
        finally:
            sock.close()


class _Server(uvicorn.Server):
    """uvicorn's server, but SIGTERM/SIGINT end it gracefully with exit code 0 (uvicorn re-raises the
    signal after its shutdown, so a clean stop would look like a kill)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)


def run(args: argparse.Namespace) -> int:
    """Serve the control plane."""
    settings = command_settings(args.database_url)
    configured = bool(settings.auth_jwt_secret or settings.auth_jwt_public_key)
    if not configured and not args.insecure_dev:
        print(
            "pmem serve: no authentication configured. Set PMEM_AUTH_JWT_SECRET (HS256) or "
            "PMEM_AUTH_JWT_PUBLIC_KEY (RS256/ES256, PEM), or pass --insecure-dev for a local trial.",
            file=sys.stderr,
        )
        return 2
    if args.insecure_dev:
        print(INSECURE_BANNER, file=sys.stderr)
    host = args.host or settings.api_host
    port = settings.api_port if args.port is None else args.port

    workers = settings.api_workers if args.workers is None else args.workers
    if workers < 1:
        print("pmem serve: --workers must be at least 1", file=sys.stderr)
        return 2

    def start() -> int:
        if workers == 1:
            # the processes of `--workers N` run on the same loop (uvicorn's `auto`)
            with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
                runner.run(serve(settings, host=host, port=port, insecure_dev=args.insecure_dev))
        else:
            serve_processes(settings, host=host, port=port, insecure_dev=args.insecure_dev, workers=workers)
        return 0

    return run_reporting_database_errors("serve", start)
