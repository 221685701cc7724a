"""What the long-running processes run on (`cli.runtime`): uvloop's loop, and a garbage collector
that leaves start-up's objects alone — the worker and `pmem serve` alike."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
from collections.abc import Callable, Iterator

import pytest

from cli.commands import serve as serve_command
from cli.runtime import GC_YOUNG_THRESHOLD, event_loop_factory, tune_gc
from store.migrate import migrate
from tests.api.conftest import SECRET
from tests.database_role import DATABASE_ROLE


@pytest.fixture
def restored_gc() -> Iterator[tuple[int, int, int]]:
    """The collector's settings before the test, put back after it."""
    before = gc.get_threshold()
    try:
        yield before
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_started_process_freezes_start_up_objects_and_collects_young_ones_less_often(
    restored_gc: tuple[int, int, int],
) -> None:
    tune_gc()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, restored_gc[1], restored_gc[2])
    assert restored_gc[0] < GC_YOUNG_THRESHOLD


def test_the_loop_is_uvloops_where_it_is_installed() -> None:
    import uvloop

    factory = event_loop_factory()
    assert factory is not None
    loop = factory()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_one_serve_process_answers_on_uvloop_and_httptools_with_the_tuned_collector(
    new_database: Callable[[], str],
    monkeypatch: pytest.MonkeyPatch,
    restored_gc: tuple[int, int, int],
) -> None:
    import uvloop

    url = new_database()
    migrate(url, 384)
    for name in [name for name in os.environ if name.startswith("PMEM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PMEM_DATABASE_ROLE", DATABASE_ROLE)
    monkeypatch.setenv("PMEM_AUTH_JWT_SECRET", SECRET)
    seen: dict[str, object] = {}

    async def serving(self: serve_command._Server) -> None:
        # where uvicorn would start accepting requests: the store is open, the app built
        self.config.load()
        seen["http"] = self.config.http_protocol_class.__module__
        seen["loop"] = asyncio.get_running_loop()
        seen["young_threshold"] = gc.get_threshold()[0]
        seen["frozen"] = gc.get_freeze_count()

    monkeypatch.setattr(serve_command._Server, "serve", serving)
    args = argparse.Namespace(host="127.0.0.1", port=0, database_url=url, workers=1, insecure_dev=False)
    assert serve_command.run(args) == 0
    assert isinstance(seen["loop"], uvloop.Loop)
    assert seen["http"] == "uvicorn.protocols.http.httptools_impl"  # C, not h11's pure Python
    assert seen["young_threshold"] == GC_YOUNG_THRESHOLD
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 0
