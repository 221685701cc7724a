"""A small in-process cache whose entries expire after `ttl_s`: the store's settings, owners' sizes
and the API's verified keys. Bounded by forgetting everything when full (there are few keys of
each kind, and a full reload is cheap)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(kw_only=True)
class TtlCache(Generic[K, V]):
    """Values per key for `ttl_s` seconds (0: not kept), at most `max_entries`."""

    ttl_s: float
    max_entries: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _entries: dict[K, tuple[float, V]] = field(default_factory=dict)
    _reloading: set[K] = field(default_factory=set)
    _cleared: int = 0  # how many times `clear` ran: a load that spans one is not kept

    def get(self, key: K) -> tuple[V] | None:
        """The value (in a 1-tuple, so a cached None is told apart), or None when unknown or expired."""
        entry = self._entries.get(key)
        if entry is None or entry[0] <= self.clock():
            return None
        return (entry[1],)

    def put(self, key: K, value: V) -> None:
        """Keep `value` for `ttl_s`."""
        if self.ttl_s <= 0:
            return
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key] = (self.clock() + self.ttl_s, value)

    async def get_or_load(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        """The cached value, else `load()`'s, kept. While one caller reloads an expired entry the
        others get the expired value: at each expiry one caller waits for the load, not every
        caller that arrives until it returns. A failed load leaves the next caller to try again."""
        entry = self._entries.get(key)
        if entry is not None and (entry[0] > self.clock() or key in self._reloading):
            return entry[1]
        self._reloading.add(key)
        cleared = self._cleared
        try:
            value = await load()
        finally:
            self._reloading.discard(key)
        if cleared == self._cleared:  # else it may have read what the clearing write replaced
            self.put(key, value)
        return value

    def clear(self) -> None:
        """Drop every entry: the next caller loads again (after a write of what is cached)."""
        self._entries.clear()
        self._cleared += 1
