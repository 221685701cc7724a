"""Which top-level directory may import which: tests/ never import bench/ (what both need lives in
`testkit` or `evaluation`); nothing shipped imports `testkit`, and the wheel leaves it out;
`worker/` (the event consumer) imports neither the command line nor the API; `extraction/` imports
no `worker` module."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# every package the wheel ships (pyproject's package list): none may import the test kit
SHIPPED = ("api", "cli", "config", "evaluation", "extraction", "pmem_client", "prompts", "store", "worker")


def imported_modules(path: Path) -> Iterator[str]:
    """Every module an `import` or `from … import` in `path` names (relative imports skipped)."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def importers(
    directories: tuple[str, ...], banned: str, *, skip: tuple[str, ...] = (), root: Path = ROOT
) -> list[str]:
    """`file: module` for every import of `banned` (or a module under it) in `directories` of `root`."""
    found: list[str] = []
    for directory in directories:
        for path in sorted((root / directory).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative.startswith(skip):
                continue
            found.extend(
                f"{relative}: {module}"
                for module in imported_modules(path)
                if module == banned or module.startswith(banned + ".")
            )
    return found


def test_tests_never_import_bench() -> None:
    assert importers(("tests",), "bench") == []


def test_nothing_shipped_imports_the_test_kit() -> None:
    assert importers(SHIPPED, "testkit") == []


def test_the_worker_imports_neither_the_command_line_nor_the_api() -> None:
    assert [hit for banned in ("cli", "api") for hit in importers(("worker",), banned)] == []


def test_the_extractor_imports_no_worker_module() -> None:
    assert importers(("extraction",), "worker") == []


def test_the_checks_see_each_banned_import_in_a_tree(tmp_path: Path) -> None:
    """A tree that breaks every rule above: each check names the offending file."""
    planted = {
        "pmem_client/uses_kit.py": "from testkit.fakes import FakeStore\n",
        "worker/uses_cli.py": "import cli.commands.serve\n",
        "worker/uses_api.py": "from api import operations\n",
        "extraction/uses_worker.py": "from worker.planning import plan\n",
        "store/core/uses_backend.py": "from store.sqlite.backend import SqliteStore\n",
    }
    for relative, text in planted.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    assert importers(SHIPPED, "testkit", root=tmp_path) == ["pmem_client/uses_kit.py: testkit.fakes"]
    assert [hit for banned in ("cli", "api") for hit in importers(("worker",), banned, root=tmp_path)] == [
        "worker/uses_cli.py: cli.commands.serve",
        "worker/uses_api.py: api",
    ]
    assert importers(("extraction",), "worker", root=tmp_path) == [
        "extraction/uses_worker.py: worker.planning"
    ]
    assert importers(("store/core",), "store.sqlite", root=tmp_path) == [
        "store/core/uses_backend.py: store.sqlite.backend"
    ]


def test_the_wheel_leaves_the_test_kit_out() -> None:
    """setuptools' own package discovery, configured as pyproject says, finds every shipped
    package and nothing of the test kit."""
    found = wheel_packages()
    assert not [name for name in found if name == "testkit" or name.startswith("testkit.")]
    assert set(SHIPPED) <= set(found)


def wheel_packages() -> list[str]:
    """The packages `pip wheel .` would put in the wheel: pyproject's `packages.find` settings."""
    from setuptools import find_namespace_packages, find_packages

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    # pyproject's `packages.find` looks for namespace packages too unless told otherwise
    find = find_namespace_packages if config.get("namespaces", True) else find_packages
    return find(str(ROOT), include=config.get("include", ("*",)), exclude=config.get("exclude", ()))


def test_the_check_sees_an_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nfrom bench.fake import thing\nimport bench\nfrom . import near\n")
    assert list(imported_modules(probe)) == ["os", "bench.fake", "bench"]


# what only a backend may import: its database's driver, SQL dialect and in-process ranking
BACKEND_ONLY = ("store.postgres", "store.sqlite", "psycopg", "aiosqlite", "sqlite3", "pgvector", "numpy")
# the shared store code's one use of numpy: the mean direction of two embeddings (not a ranking)
CORE_NUMPY = ("store/core/forgetting.py",)


def test_the_shared_store_code_never_imports_a_backend() -> None:
    found = [
        hit
        for banned in BACKEND_ONLY
        for hit in importers(("store/core",), banned)
        if not (banned == "numpy" and hit.startswith(CORE_NUMPY))
    ]
    assert found == []


def test_the_rules_know_no_store_code_and_no_backend() -> None:
    banned = ("store.core", "store.postgres", "store.sqlite", "psycopg", "aiosqlite")
    assert [hit for module in banned for hit in importers(("store/rules",), module)] == []


def test_the_worker_and_the_extractor_never_import_the_shared_store_code() -> None:
    assert importers(("worker", "extraction"), "store.core") == []


def test_the_check_sees_a_backend_import_in_the_shared_store_code(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from store.postgres.params import float4_array\nimport numpy as np\n")
    assert [m for m in imported_modules(probe) if m.startswith(BACKEND_ONLY)] == [
        "store.postgres.params",
        "numpy",
    ]
