"""The settings cache shared by the worker and recall: expiry, bounds, one reload per expiry."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from store.errors import StoreTimeout
from store.model import ContextFacts, MemorySettings, RecallHit, RecallQuery, TurnHit
from store.services.context_recall import ContextRecall, items_in_context
from store.services.settings_cache import SettingsCache
from store.services.ttl_cache import TtlCache

USER = uuid.uuid4()
PERSONA = uuid.uuid4()
TEAM = uuid.uuid4()


class CountingLoads:
    """`load` callables that count their calls and return the settings currently set."""

    def __init__(self) -> None:
        self.calls = 0
        self.value = MemorySettings()

    async def __call__(self) -> MemorySettings:
        self.calls += 1
        return self.value


async def test_settings_are_kept_for_ttl_then_reloaded() -> None:
    now = [100.0]
    cache = SettingsCache(ttl_s=10, clock=lambda: now[0])
    load = CountingLoads()
    load.value = MemorySettings(persona_learning=True)
    assert await cache.settings((None, PERSONA), load) == MemorySettings(persona_learning=True)
    load.value = MemorySettings(persona_learning=False)
    now[0] += 9.9
    assert await cache.settings((None, PERSONA), load) == MemorySettings(persona_learning=True)
    now[0] += 0.2
    assert await cache.settings((None, PERSONA), load) == MemorySettings(persona_learning=False)
    assert load.calls == 2


async def test_a_full_cache_starts_over_and_ttl_zero_keeps_nothing() -> None:
    cache = SettingsCache(ttl_s=10, max_entries=2, clock=lambda: 100.0)
    load = CountingLoads()
    for key in [(None, None), (TEAM, None), (TEAM, PERSONA)]:  # the third clears the first two
        await cache.settings(key, load)
    await cache.settings((TEAM, PERSONA), load)
    await cache.settings((None, None), load)
    assert load.calls == 4
    off = SettingsCache(ttl_s=0)
    await off.settings((None, None), load)
    await off.settings((None, None), load)
    assert load.calls == 6


async def test_an_expired_entry_is_reloaded_once_while_the_others_get_the_old_one() -> None:
    now = [100.0]
    cache = SettingsCache(ttl_s=10, clock=lambda: now[0])
    key = (None, PERSONA)
    loads: list[asyncio.Future[MemorySettings]] = []

    async def load() -> MemorySettings:
        loads.append(asyncio.get_running_loop().create_future())
        return await loads[-1]

    first = asyncio.create_task(cache.settings(key, load))
    await asyncio.sleep(0)
    loads[0].set_result(MemorySettings(persona_learning=False))
    assert await first == MemorySettings(persona_learning=False)
    assert await cache.settings(key, load) == MemorySettings(persona_learning=False)  # fresh
    assert len(loads) == 1

    now[0] += 10.01  # expired: one caller reloads, the others meanwhile get the expired value
    reloading = asyncio.create_task(cache.settings(key, load))
    await asyncio.sleep(0)
    others = [await asyncio.wait_for(cache.settings(key, load), 5) for _ in range(5)]
    assert others == [MemorySettings(persona_learning=False)] * 5 and len(loads) == 2
    loads[1].set_result(MemorySettings(persona_learning=True))
    assert await reloading == MemorySettings(persona_learning=True)
    assert await cache.settings(key, load) == MemorySettings(persona_learning=True)
    assert len(loads) == 2


async def test_a_failed_reload_leaves_the_next_caller_to_reload() -> None:
    now = [100.0]
    cache = SettingsCache(ttl_s=10, clock=lambda: now[0])
    key = (None, None)
    await cache.settings(key, CountingLoads())
    now[0] += 11

    async def failing() -> MemorySettings:
        raise StoreTimeout("statement timeout")

    async def loading() -> MemorySettings:
        return MemorySettings(enabled=False)

    with pytest.raises(StoreTimeout):
        await cache.settings(key, failing)
    assert await cache.settings(key, loading) == MemorySettings(enabled=False)


class SettingsOnlyStore:
    """A store that counts `settings_for` calls and the recalls it is asked for (of the
    contexts whose memory is on); recall returns nothing."""

    def __init__(self) -> None:
        self.reads: list[tuple[uuid.UUID | None, uuid.UUID | None]] = []
        self.recalls: list[uuid.UUID | None] = []
        # the roles a recall asks: this one object answers for the settings and the turns
        self.settings = self
        self.turns = self

    async def settings_for(self, team_id: uuid.UUID | None, persona_id: uuid.UUID | None) -> MemorySettings:
        self.reads.append((team_id, persona_id))
        return MemorySettings(enabled=team_id is None)

    async def recall(
        self, *_asked: object, team_id: uuid.UUID | None = None, **_options: object
    ) -> list[RecallHit]:
        """Nothing, whatever is asked: these tests count settings reads."""
        self.recalls.append(team_id)
        return []

    async def recall_turns(self, *_asked: object, **_options: object) -> list[TurnHit]:
        """Nothing, whatever is asked."""
        return []

    async def context_facts(self, asked: RecallQuery, **_options: object) -> ContextFacts:
        """Nothing, whatever is asked: these tests count settings reads."""
        self.recalls.append(asked.team_id)
        return ContextFacts(relevant=[], standing=None, pinned=[], pending={})


async def test_recall_reads_each_team_and_persona_settings_once_while_fresh() -> None:
    store = SettingsOnlyStore()
    cache = SettingsCache(ttl_s=60)
    for team_id in (None, TEAM, None, TEAM):
        asked = ContextRecall(user_id=USER, persona_id=PERSONA, team_id=team_id, query="x", limit=5)
        assert await items_in_context(store, asked, settings=cache) == []
    assert store.reads == [(None, PERSONA), (TEAM, PERSONA)]
    assert store.recalls == [None, None]  # memory is off in TEAM's context


async def test_a_load_that_spans_a_forget_is_not_remembered() -> None:
    cache = SettingsCache(ttl_s=3600)
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow_old_read() -> MemorySettings:
        started.set()
        await release.wait()
        return MemorySettings(enabled=True)  # read before the write below

    reading = asyncio.create_task(cache.settings((None, None), slow_old_read))
    await started.wait()
    cache.forget()  # the settings were written meanwhile
    release.set()
    assert (await reading).enabled
    load = CountingLoads()
    load.value = MemorySettings(enabled=False)
    assert not (await cache.settings((None, None), load)).enabled and load.calls == 1


async def test_the_ttl_cache_keeps_a_loaded_none_and_expires_what_is_put() -> None:
    now = [0.0]
    cache: TtlCache[str, int | None] = TtlCache(ttl_s=10, clock=lambda: now[0])
    loads: list[str] = []

    async def unknown() -> int | None:
        loads.append("unknown")
        return None

    assert await cache.get_or_load("k", unknown) is None
    assert await cache.get_or_load("k", unknown) is None
    assert loads == ["unknown"] and cache.get("k") == (None,)
    cache.put("n", 3)
    assert cache.get("n") == (3,)
    now[0] = 10.0
    assert cache.get("n") is None and cache.get("missing") is None
    off: TtlCache[str, int] = TtlCache(ttl_s=0)
    off.put("n", 1)
    assert off.get("n") is None
