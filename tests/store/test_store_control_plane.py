"""The store operations behind the control plane, on both stores: the review queue, a person's own
memories and export, erasure, retention, settings rows and API keys."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from store.errors import StoreError
from store.model import MemorySettings, ReviewQuery, SettingsRow, UserMemoryQuery
from store.rules.pagination import BadCursor
from tests.store.store_testkit import MakeStore, Store, mem

TEAM_A, TEAM_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


async def test_review_queue_lists_pending_memories_and_revisions_newest_first_across_pages(
    store: Store,
) -> None:
    user = uuid.uuid4()
    for i in range(5):
        await store.writes.upsert(
            mem(owner=user, key=f"fact {i}", value=f"value {i}", status="pending_review")
        )
    reviewed = await store.writes.upsert(mem(owner=user, key="city", value="Lives in Porto"))
    proposal = await store.writes.upsert(
        mem(owner=user, key="city", value="Lives in Lisbon", status="pending_review")
    )
    seen: list[uuid.UUID] = []
    cursor = None
    while True:
        page = await store.review.review_queue(ReviewQuery(limit=3, cursor=cursor))
        seen += [item.id for item in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)) == 6
    assert seen[0] == proposal.revision_id  # the newest
    first = (await store.review.review_queue(ReviewQuery(limit=10))).items
    revision = next(item for item in first if item.kind == "revision")
    assert (revision.memory_id, revision.old_value, revision.new_value) == (
        reviewed.memory_id,
        "Lives in Porto",
        "Lives in Lisbon",
    )
    assert [item.created_at for item in first] == sorted((item.created_at for item in first), reverse=True)
    assert (await store.review.review_target(revision.id)) == (
        await store.listing.get_by_id(reviewed.memory_id)
    )
    assert await store.review.pending_counts() == {"user": 6, "persona": 0, "persona_user": 0}


async def test_review_queue_filters_in_sql_by_team_scope_persona_user_and_confidence(store: Store) -> None:
    user, other, persona = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await store.writes.upsert(
        mem(owner=user, key="a", value="in team a", status="pending_review", team=TEAM_A)
    )
    await store.writes.upsert(
        mem(owner=other, key="b", value="in team b", status="pending_review", team=TEAM_B)
    )
    await store.writes.upsert(
        mem(owner=user, key="c", value="no team", status="pending_review", confidence=0.4)
    )
    await store.writes.upsert(
        mem(
            scope="persona",
            owner=persona,
            key="d",
            value="persona fact",
            status="pending_review",
            team=TEAM_A,
        )
    )

    async def keys(**filters: object) -> set[str]:
        return {item.key for item in (await store.review.review_queue(ReviewQuery(**filters))).items}  # type: ignore[arg-type]

    assert await keys() == {"a", "b", "c", "d"}
    assert await keys(teams=frozenset({TEAM_A})) == {"a", "d"}
    assert await keys(teams=frozenset()) == set()
    assert await keys(team_id=TEAM_B) == {"b"}
    assert await keys(scope="persona") == {"d"}
    assert await keys(persona_id=persona) == {"d"}
    assert await keys(user_id=user) == {"a", "c"}
    assert await keys(min_confidence=0.5) == {"a", "b", "d"}


async def test_a_forged_cursor_is_refused(store: Store) -> None:
    with pytest.raises(BadCursor):
        await store.review.review_queue(ReviewQuery(cursor="not-a-cursor"))


async def test_the_worker_can_never_decide(store: Store) -> None:
    user = uuid.uuid4()
    pending = await store.writes.upsert(mem(owner=user, key="k", value="v", status="pending_review"))
    for decide in (store.review.approve, store.review.reject):
        with pytest.raises(PermissionError):
            await decide(pending.memory_id, actor="worker")
    with pytest.raises(PermissionError):
        await store.review.edit(pending.memory_id, "w", actor="worker", activate=True)
    memory = await store.listing.get_by_id(pending.memory_id)
    assert memory is not None and memory.status == "pending_review"


async def test_a_persons_edit_activates_the_memory_and_supersedes_an_open_proposal(store: Store) -> None:
    user = uuid.uuid4()
    reviewed = await store.writes.upsert(mem(owner=user, key="city", value="Lives in Porto"))
    await store.writes.upsert(mem(owner=user, key="city", value="Lives in Lisbon", status="pending_review"))
    edited = await store.review.edit(reviewed.memory_id, "Lives in Braga", actor="user:me", activate=True)
    assert edited is not None and (edited.value, edited.status) == ("Lives in Braga", "active")
    assert await store.review.pending_revisions(reviewed.memory_id) == []


async def test_a_persons_list_and_export_cover_every_status_and_nobody_else(store: Store) -> None:
    user, other, persona = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await store.writes.upsert(mem(owner=user, key="a", value="active fact"))
    await store.writes.upsert(mem(owner=user, key="b", value="pending fact", status="pending_review"))
    await store.writes.upsert(
        mem(scope="persona_user", owner=persona, user=user, key="c", value="about me here")
    )
    await store.writes.upsert(mem(owner=other, key="a", value="someone else"))
    await store.writes.upsert(mem(scope="persona", owner=persona, key="p", value="persona fact"))
    page = await store.listing.list_for_user(UserMemoryQuery(user_id=user))
    assert {m.value for m in page.items} == {"active fact", "pending fact", "about me here"}
    only_persona = await store.listing.list_for_user(UserMemoryQuery(user_id=user, persona_id=persona))
    assert [m.key for m in only_persona.items] == ["c"]
    export = await store.listing.export_user(user)
    assert {m.value for m in export.memories} == {"active fact", "pending fact", "about me here"}
    assert {e.key for e in export.audit} == {"a", "b", "c"}


async def test_erasing_a_user_removes_text_everywhere_and_leaves_tombstones(store: Store) -> None:
    user, persona = uuid.uuid4(), uuid.uuid4()
    first = await store.writes.upsert(mem(owner=user, key="secret hobby", value="Collects rare stamps"))
    await store.writes.upsert(
        mem(owner=user, key="secret hobby", value="Collects rare coins", status="pending_review")
    )
    await store.writes.upsert(
        mem(scope="persona_user", owner=persona, user=user, key="pet", value="Owns a parrot")
    )
    keep = await store.writes.upsert(mem(owner=uuid.uuid4(), key="pet", value="Owns a dog"))
    erased = await store.erasure.erase_user(user, actor="admin:1")
    assert erased == 2
    assert (await store.listing.list_for_user(UserMemoryQuery(user_id=user))).items == ()
    log = await store.review.audit_log(first.memory_id)
    assert log[-1].action == "erase" and log[-1].actor == "admin:1"
    assert all(e.key is None and e.old_value is None and e.new_value is None for e in log)
    assert await store.listing.get_by_id(keep.memory_id) is not None


async def test_retention_rejects_old_pending_and_erases_old_archived_per_team_settings(
    make_store: MakeStore,
) -> None:
    store = await make_store(settings_defaults=MemorySettings(pending_days=30, archived_days=60))
    user = uuid.uuid4()
    old_pending = await store.writes.upsert(
        mem(owner=user, key="old", value="old pending", status="pending_review")
    )
    team_pending = await store.writes.upsert(
        mem(owner=user, key="team", value="team pending", status="pending_review", team=TEAM_A)
    )
    archived = await store.writes.upsert(mem(owner=user, key="gone", value="archived fact"))
    await store.erasure.archive(archived.memory_id)
    await store.settings.replace_settings(SettingsRow(level="team", target_id=TEAM_A, pending_days=90))
    now = datetime.now(UTC)

    first = await store.erasure.retention(now=now + timedelta(days=45))
    assert (first.rejected_memories, first.erased_memories) == (1, 0)
    rejected = await store.listing.get_by_id(old_pending.memory_id)
    assert rejected is not None and rejected.status == "archived"

    second = await store.erasure.retention(now=now + timedelta(days=61))
    assert (second.rejected_memories, second.erased_memories) == (0, 2)
    assert await store.listing.get_by_id(archived.memory_id) is None
    kept = await store.listing.get_by_id(team_pending.memory_id)
    assert kept is not None and kept.status == "pending_review"  # the team keeps pending for 90 days

    again = await store.erasure.retention(now=now + timedelta(days=61))
    assert (again.rejected_memories, again.rejected_revisions, again.erased_memories) == (0, 0, 0)


async def test_settings_rows_replace_exactly_and_null_inherits(store: Store) -> None:
    persona = uuid.uuid4()
    await store.settings.replace_settings(
        SettingsRow(level="global", target_id=None, min_confidence=0.7, enabled=True)
    )
    await store.settings.replace_settings(
        SettingsRow(level="persona", target_id=persona, persona_learning=True)
    )
    assert (await store.settings.settings_row("persona", persona)).persona_learning is True
    assert (await store.settings.settings_for(None, persona)).min_confidence == 0.7
    await store.settings.replace_settings(SettingsRow(level="global", target_id=None))
    assert (await store.settings.settings_row("global", None)).min_confidence is None
    assert (await store.settings.settings_for(None, persona)).min_confidence == 0.5
    with pytest.raises(ValueError, match="pending_days"):
        await store.settings.replace_settings(SettingsRow(level="global", target_id=None, pending_days=0))


async def test_known_personas_only_is_off_by_default_and_inherited_from_the_team(store: Store) -> None:
    team = uuid.uuid4()
    assert (await store.settings.settings_for(team, None)).known_personas_only is False
    await store.settings.replace_settings(SettingsRow(level="team", target_id=team, known_personas_only=True))
    assert (await store.settings.settings_row("team", team)).known_personas_only is True
    assert (await store.settings.settings_for(team, uuid.uuid4())).known_personas_only is True
    assert (await store.settings.settings_for(uuid.uuid4(), None)).known_personas_only is False


async def test_api_keys_verify_until_revoked_and_are_stored_hashed(store: Store) -> None:
    record, key = await store.api_keys.create_api_key("chat-backend")
    assert key.startswith("pmem_sk_") and record.prefix in key
    assert (await store.api_keys.verify_api_key(key)) is not None
    assert await store.api_keys.verify_api_key(key + "x") is None
    with pytest.raises(StoreError, match="active API key named"):
        await store.api_keys.create_api_key("chat-backend")
    assert await store.api_keys.revoke_api_key("chat-backend") is True
    assert await store.api_keys.verify_api_key(key) is None
    assert [k.revoked_at is not None for k in await store.api_keys.list_api_keys()] == [True]
