"""What the long-running processes (`pmem worker`, `pmem serve`) run on: uvloop's event loop where
it is installed, and a cyclic garbage collector told to leave start-up's objects alone."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

# Python's default (700) runs a young-generation collection every few requests or events; each one
# also walks everything the process keeps. The objects of a request or an event die by reference
# counting, so fewer, larger collections cost little memory and CPU less per event and per request
# (bench/README.md).
GC_YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """Once started: move what start-up created (modules, schema, clients) out of the cyclic
    collector's sight for good, and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop where it is installed (less CPU per worker event and per API request;
    bench/README.md), else None: the standard loop."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
