"""The stores meet their databases at one seam: each store is the shared store holding a backend,
and neither overrides anything of the shared store (every database-specific operation is a
method of `store.core.backend.Backend`). The shared store is composed, not assembled: it holds one
object per role (writes, review, turns, …), each inheriting only `StoreBase`, never another role,
and no store has more than three classes in its MRO."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import store.core
from extraction.embeddings import HashingEmbedder
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


def store_roles() -> set[type]:
    """The role classes of `store/core`: every class defined there that inherits `StoreBase`
    (`StoreBase` aside)."""
    roles: set[type] = set()
    for module_info in pkgutil.iter_modules(store.core.__path__, f"{store.core.__name__}."):
        module = importlib.import_module(module_info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, StoreBase):
                roles.add(cls)
    return roles - {StoreBase}


def test_no_role_inherits_another_role() -> None:
    roles = store_roles()
    assert len(roles) >= 14  # the discovery found the roles, not nothing
    inheriting_more = {role.__name__: role.__bases__ for role in roles if role.__bases__ != (StoreBase,)}
    assert inheriting_more == {}


def test_the_shared_store_holds_every_role_and_inherits_none(tmp_path: Path) -> None:
    assert CoreStore.__bases__ == (object,)
    opened = SqliteMemoryStore(f"sqlite:///{tmp_path}/roles.db", HashingEmbedder(dim=8))
    held = {type(value) for value in vars(opened).values() if isinstance(value, StoreBase)}
    assert held == store_roles()
    roles = [value for value in vars(opened).values() if isinstance(value, StoreBase)]
    assert all(role._backend is opened.backend for role in roles)  # one backend, shared


def test_every_store_has_at_most_three_classes_in_its_mro() -> None:
    assert PostgresMemoryStore.__mro__ == (PostgresMemoryStore, CoreStore, object)
    assert SqliteMemoryStore.__mro__ == (SqliteMemoryStore, CoreStore, object)
