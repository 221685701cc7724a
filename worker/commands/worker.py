"""`pmem worker`: consume conversation.ended events and extract memories until SIGTERM/SIGINT.

Configuration comes from the PMEM_* environment (see README); the flags override the most common
ones. The database must be migrated first (`pmem migrate`, or --migrate).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from worker.logs import configure_logging
from worker.settings import Settings, load_settings

log = logging.getLogger("pmem.worker")


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of `pmem worker`."""
    parser.add_argument("--concurrency", type=int, help="events in flight (default: PMEM_CONCURRENCY)")
    parser.add_argument(
        "--http-port", type=int, help="metrics/health port, 0 = any (default: PMEM_HTTP_PORT)"
    )
    parser.add_argument(
        "--migrate", action="store_true", help="create or upgrade the schema before consuming"
    )
    parser.set_defaults(run=run)


async def serve(settings: Settings, *, migrate_first: bool = False) -> None:
    """Build the worker from `settings` and run it until a signal arrives."""
    from worker.app import build_worker

    if migrate_first:
        from store.migrate import migrate_async

        report = await migrate_async(settings.database_url, settings.embedding_dim)
        log.info("schema ready: %s", report)
    worker = await build_worker(settings)
    await worker.run_until_signalled()


def run(args: argparse.Namespace) -> int:
    """Run the worker; exit 0 after a graceful shutdown, 2 on a configuration error."""
    overrides: dict[str, object] = {}
    if args.concurrency is not None:
        overrides["concurrency"] = args.concurrency
    if args.http_port is not None:
        overrides["http_port"] = args.http_port
    settings = load_settings(**overrides)
    configure_logging(settings.log_level, json_format=settings.log_json)
    import nats.errors

    from store.migrate import SchemaError
    from worker.app import ConfigurationError

    try:
        asyncio.run(serve(settings, migrate_first=args.migrate))
    except (ConfigurationError, SchemaError) as exc:
        log.error("%s", exc)
        print(f"pmem worker: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError, nats.errors.Error) as exc:
        # cannot reach NATS/Postgres at start-up, or a bad setting: say which and stop
        log.error("cannot start the worker: %s: %s", type(exc).__name__, exc)
        print(f"pmem worker: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0
