"""The stores meet their databases at one seam: each store is the shared store holding a backend,
and neither overrides anything of the shared store (every database-specific operation is a
method of `store.core.backend.Backend`). The shared store is flat: its parts inherit only
`StoreBase`, never one another."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import store.core
from store.core.base import StoreBase
from store.core.store import CoreStore
from store.postgres.store import PostgresMemoryStore
from store.sqlite.store import SqliteMemoryStore


def overridden(store: type[CoreStore]) -> set[str]:
    """The shared store's attributes that `store` defines again (its constructor aside)."""
    return {name for name in vars(store) if hasattr(CoreStore, name) and not name.startswith("__")}


def test_neither_store_overrides_the_shared_store() -> None:
    assert overridden(PostgresMemoryStore) == set()
    assert overridden(SqliteMemoryStore) == set()


def test_each_store_is_one_level_below_the_shared_store() -> None:
    assert PostgresMemoryStore.__bases__ == (CoreStore,)
    assert SqliteMemoryStore.__bases__ == (CoreStore,)


def test_the_check_sees_an_override() -> None:
    class Overriding(CoreStore):
        async def ping(self) -> None:
            """Pretend."""

    assert overridden(Overriding) == {"ping"}


def store_parts() -> set[type]:
    """The part classes of `store/core`: every class defined there that inherits `StoreBase`
    (`StoreBase` and `CoreStore` aside)."""
    parts: set[type] = set()
    for module_info in pkgutil.iter_modules(store.core.__path__, f"{store.core.__name__}."):
        module = importlib.import_module(module_info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, StoreBase):
                parts.add(cls)
    return parts - {StoreBase, CoreStore}


def depth(cls: type) -> int:
    """The longest chain of bases from `cls` down to `object`."""
    return 0 if cls is object else 1 + max(depth(base) for base in cls.__bases__)


def test_no_part_inherits_another_part() -> None:
    parts = store_parts()
    assert len(parts) >= 12  # the discovery found the parts, not nothing
    inheriting_more = {part.__name__: part.__bases__ for part in parts if part.__bases__ != (StoreBase,)}
    assert inheriting_more == {}


def test_the_shared_store_is_composed_of_every_part() -> None:
    assert set(CoreStore.__bases__) == store_parts()


def test_each_store_is_at_most_four_levels_above_object() -> None:
    assert depth(PostgresMemoryStore) <= 4
    assert depth(SqliteMemoryStore) <= 4


def test_the_depth_counts_the_longest_chain() -> None:
    class Part(StoreBase):
        pass

    class PartOnPart(Part):
        pass

    class Other(StoreBase):
        pass

    class Composed(Other, PartOnPart):
        pass

    assert depth(StoreBase) == 1
    assert depth(Composed) == 4
