"""`pmem serve`: the control plane (HTTP API and web UI) on PMEM_API_PORT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Generator

import uvicorn

from api.auth import AuthConfig
from worker.commands.errors import run_reporting_database_errors
from worker.commands.store_session import opened_store
from worker.connection_budget import warn_if_over_budget
from worker.settings import Settings, load_settings

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


async def serve(settings: Settings, *, host: str, port: int, insecure_dev: bool) -> None:
    """Open the store, then serve until SIGTERM/SIGINT (uvicorn's graceful shutdown)."""
    from api.app import create_app

    async with opened_store(settings) as store:
        await warn_if_over_budget(store, process="pmem serve", replicas=settings.expected_replicas)
        app = create_app(
            store=store,
            auth=auth_config(settings, insecure_dev=insecure_dev),
            max_input_tokens=settings.llm_max_input_tokens,
            max_body_bytes=settings.api_max_body_bytes,
            settings_cache_s=settings.settings_cache_s,
            ui_session_s=settings.ui_session_s,
            sign_in_max_s=settings.ui_sign_in_max_s,
        )
        # uvicorn has no deadline for reading a request's headers: in production a reverse proxy
        # in front (README, Security) bounds that; idle connections close after the keep-alive
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            timeout_keep_alive=settings.api_keep_alive_s,
        )
        server = _Server(config)
        print(
            f"pmem serve: listening on http://{host}:{port} (API /v1, UI /ui/, docs /docs)", file=sys.stderr
        )
        await server.serve()


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
    overrides: dict[str, object] = {"database_url": args.database_url} if args.database_url else {}
    settings = load_settings(**overrides)
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

    def start() -> int:
        asyncio.run(serve(settings, host=host, port=port, insecure_dev=args.insecure_dev))
        return 0

    return run_reporting_database_errors("serve", start)
