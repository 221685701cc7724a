"""Memory settings per (team, persona) kept for a few seconds: the worker reads them for every event
and recall for every request, and they change rarely. One cache for both, so a change takes effect
within the same `PMEM_SETTINGS_CACHE_S` everywhere and an expiry costs one database read."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from store.model import MemorySettings
from store.services.ttl_cache import TtlCache

SettingsKey = tuple[uuid.UUID | None, uuid.UUID | None]
"""(team_id, persona_id): what the effective settings depend on."""


@dataclass(kw_only=True)
class SettingsCache:
    """Memory settings per (team, persona) for `ttl_s` seconds (0: not kept). A change takes effect
    within `ttl_s` (and the one reload that follows)."""

    ttl_s: float
    max_entries: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _cache: TtlCache[SettingsKey, MemorySettings] = field(init=False)

    def __post_init__(self) -> None:
        self._cache = TtlCache(ttl_s=self.ttl_s, max_entries=self.max_entries, clock=self.clock)

    async def settings(
        self, key: SettingsKey, load: Callable[[], Awaitable[MemorySettings]]
    ) -> MemorySettings:
        """The cached settings, else `load()`'s, remembered (one reload per expiry; a load that
        spans a `forget` is not remembered: see `TtlCache.get_or_load`)."""
        return await self._cache.get_or_load(key, load)

    def forget(self) -> None:
        """Drop every entry: the next caller reads the database (after a settings write here)."""
        self._cache.clear()
