"""Memory settings per (team, persona) kept for a few seconds: the worker reads them for every event
and recall for every request, and they change rarely. One cache for both, so a change takes effect
within the same `PMEM_SETTINGS_CACHE_S` everywhere and an expiry costs one database read."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from store.model import MemorySettings

SettingsKey = tuple[uuid.UUID | None, uuid.UUID | None]
"""(team_id, persona_id): what the effective settings depend on."""


@dataclass(kw_only=True)
class SettingsCache:
    """Memory settings per (team, persona) for `ttl_s` seconds (0: not kept). A change takes effect
    within `ttl_s` (and the one reload that follows)."""

    ttl_s: float
    max_entries: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _entries: dict[SettingsKey, tuple[float, MemorySettings]] = field(default_factory=dict)
    _reloading: set[SettingsKey] = field(default_factory=set)
    _forgotten: int = 0  # how many times `forget` ran: a load that spans one is not remembered

    async def settings(
        self, key: SettingsKey, load: Callable[[], Awaitable[MemorySettings]]
    ) -> MemorySettings:
        """The cached settings, else `load()`'s, remembered. While one caller reloads an expired
        entry the others get the expired value: at each expiry one caller waits for the database,
        not every caller that arrives until the read returns. A failed load leaves the next caller
        to try again."""
        entry = self._entries.get(key)
        if entry is not None and (entry[0] > self.clock() or key in self._reloading):
            return entry[1]
        self._reloading.add(key)
        forgotten = self._forgotten
        try:
            value = await load()
        finally:
            self._reloading.discard(key)
        if forgotten == self._forgotten:  # else it may have read the settings before the write
            self._remember(key, value)
        return value

    def forget(self) -> None:
        """Drop every entry: the next caller reads the database (after a settings write here)."""
        self._entries.clear()
        self._forgotten += 1

    def _remember(self, key: SettingsKey, value: MemorySettings) -> None:
        # When full, forget everything: simple and bounded (there are few teams × personas).
        if self.ttl_s <= 0:
            return
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key] = (self.clock() + self.ttl_s, value)
