"""The stores meet their databases at one seam: each store is the shared store holding a backend,
and neither overrides anything of the shared store (every database-specific operation is a
method of `store.core.backend.Backend`)."""

from __future__ import annotations

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
