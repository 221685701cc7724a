"""The tools in a team's context, on both stores: a save carries the team, lookups and recall never
cross it, forget touches only what the user owns there, `review_tool_saves` and memory turned off;
and the display-name directory."""

from __future__ import annotations

import uuid

from store.model import DirectoryEntry, MemoryFilter, SettingsRow
from store.services.tools import MemoryTools, ToolContext
from tests.store.store_testkit import Store, mem

TEAM_A, TEAM_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


def tools_in(
    store: Store, user: uuid.UUID, team: uuid.UUID | None, persona: uuid.UUID | None = None
) -> MemoryTools:
    return MemoryTools(ToolContext(user_id=user, persona_id=persona, team_id=team, store=store))


async def test_the_team_bounds_every_tool(store: Store) -> None:
    user = uuid.uuid4()
    await store.writes.upsert(
        mem(owner=user, key="diet", value="Is vegetarian")
    )  # no team: visible everywhere
    await store.writes.upsert(mem(owner=user, key="office", value="Berlin", team=TEAM_B))
    tools = tools_in(store, user, TEAM_A)
    saved = await tools.memory_save("hometown", "Ghent")
    memory = await store.listing.get_by_id(uuid.UUID(saved["id"]))
    assert memory is not None and memory.team_id == TEAM_A and memory.status == "active"
    recalled = await tools.memory_recall()
    assert sorted(m["key"] for m in recalled["memories"]) == ["diet", "hometown"]
    assert (await tools.recall("me", "office"))["found"] is False
    assert (await tools.recall("me", "diet"))["found"] is True
    assert (await tools.forget("me", "office"))["forgotten"] == 0
    assert [
        m.value for m in await store.listing.list_memories(MemoryFilter(owner_id=user, key="office"))
    ] == ["Berlin"]
    # in team B, team A's memory is out of reach
    other = tools_in(store, user, TEAM_B)
    assert (await other.forget("me", "hometown"))["forgotten"] == 0
    assert (await other.recall("me", "office"))["found"] is True
    assert (await tools.forget("me", "hometown"))["forgotten"] == 1


async def test_review_tool_saves_and_memory_off(store: Store) -> None:
    user, persona = uuid.uuid4(), uuid.uuid4()
    await store.settings.replace_settings(SettingsRow(level="team", target_id=TEAM_A, review_tool_saves=True))
    pending = await tools_in(store, user, TEAM_A, persona).remember("me", "pet", "a cat")
    assert pending["status"] == "pending_review"
    memory = await store.listing.get_by_id(uuid.UUID(pending["id"]))
    assert memory is not None and memory.status == "pending_review"
    active = await tools_in(store, user, TEAM_B, persona).remember("me", "pet", "a cat")
    assert active["status"] == "active"
    await store.settings.replace_settings(SettingsRow(level="team", target_id=TEAM_B, enabled=False))
    off = tools_in(store, user, TEAM_B)
    assert (await off.memory_save("city", "Porto"))["saved"] is False
    assert (await off.memory_recall())["memories"] == []
    assert await store.listing.list_memories(MemoryFilter(owner_id=user, key="city")) == []


async def test_directory_keeps_the_latest_name(store: Store) -> None:
    team, persona = uuid.uuid4(), uuid.uuid4()
    await store.directory.set_names(
        [
            DirectoryEntry(kind="team", id=team, name="Acme"),
            DirectoryEntry(kind="persona", id=persona, name="Chef"),
        ]
    )
    await store.directory.set_names([DirectoryEntry(kind="team", id=team, name="Acme support")])
    assert await store.directory.names("team", [team, persona]) == {team: "Acme support"}
    assert [(e.id, e.name) for e in await store.directory.directory("persona")] == [(persona, "Chef")]
    assert await store.directory.names("user", []) == {}
