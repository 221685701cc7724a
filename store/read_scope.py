"""`ReadScope`: what one request's reads may use, and whether it wrote.

A store with read replicas (`PostgresMemoryStore(read_urls=…)`) serves some reads from a replica:
recall, the hint, listing, export and the review queue. The caller that needs its own write in a
read (a person's page after an edit, a reviewer's queue after a decision) opens a scope with
`primary=True`; the store marks `wrote` when a write transaction of the scope commits, so the caller
learns that what follows should read from the primary. Outside a scope (the worker, the commands)
nothing is recorded and the store decides alone. Backend-agnostic: the SQLite store ignores it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(slots=True)
class ReadScope:
    """One request's read preference (`primary`: every read goes to the primary) and whether a write
    committed in it (`wrote`)."""

    primary: bool = False
    wrote: bool = False


_SCOPE: ContextVar[ReadScope | None] = ContextVar("pmem_read_scope", default=None)


def current_scope() -> ReadScope | None:
    """The scope the running task is in, if any."""
    return _SCOPE.get()


@contextmanager
def read_scope(scope: ReadScope) -> Iterator[ReadScope]:
    """Run the block (and the tasks it starts) in `scope`."""
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


def reads_need_primary() -> bool:
    """Whether the current scope asks every read to go to the primary."""
    scope = _SCOPE.get()
    return scope is not None and scope.primary


def note_write() -> None:
    """Record, in the current scope, that a write committed."""
    scope = _SCOPE.get()
    if scope is not None:
        scope.wrote = True
