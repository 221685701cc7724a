"""`pmem worker`: consume conversation.ended events and extract memories until SIGTERM/SIGINT.

Configuration comes from the PMEM_* environment (docs/configuration.md); the flags override the most common
ones. The database must be migrated first (`pmem migrate`, or --migrate).
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from cli.runtime import event_loop_factory, tune_gc
from config import Settings, load_settings
from worker.logs import configure_logging

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
    """Start the worker within PMEM_STARTUP_TIMEOUT_S and run it until SIGTERM/SIGINT; a signal
    at any point, start-up included, ends the process promptly."""
    from worker.lifecycle import signals_set
    from worker.startup import start_bounded

    stop = asyncio.Event()
    with signals_set(stop):
        worker = await start_bounded(settings, stop, migrate_first=migrate_first)
        if worker is not None:
            tune_gc()
            await worker.run_until(stop)


def run(args: argparse.Namespace) -> int:
    """Run the worker; exit 0 after a graceful shutdown (or a signal during start-up), 2 on a
    configuration error, 3 when a dependency (NATS, the database) cannot be reached at start-up or
    start-up passed PMEM_STARTUP_TIMEOUT_S (cli/commands/errors.py's codes). Either failure is
    ONE log line on stderr."""
    overrides: dict[str, object] = {}
    if args.concurrency is not None:
        overrides["concurrency"] = args.concurrency
    if args.http_port is not None:
        overrides["http_port"] = args.http_port
    settings = load_settings(**overrides)
    configure_logging(settings.log_level, json_format=settings.log_json)
    from store.migrate import SchemaError
    from worker.startup import StartupError
    from worker.streams import ConfigurationError

    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(serve(settings, migrate_first=args.migrate))
    except (ConfigurationError, SchemaError) as exc:
        log.error("pmem worker: %s", " ".join(str(exc).split()))
        return 2
    except StartupError as exc:
        log.error("pmem worker: %s", exc)
        return 3
    return 0
