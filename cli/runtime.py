"""What the long-running processes (`pmem worker`, `pmem serve`) run on: uvloop's event loop where
it is installed, and a cyclic garbage collector told to leave start-up's objects alone."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

# Python's default (700) runs a young-generation collection every few requests or events, and now
# and then a full one, which walks everything the process keeps (~200,000 objects in `pmem serve`:
# 50 ms or more, the requests queued behind it too). Frozen, start-up's objects are never walked
# again; the objects of a request or an event die by reference counting, so fewer, larger young
# collections cost little memory and less CPU (bench/README.md).
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
