"""Team boundaries (a memory written in one team's conversation stays in that team) and the
deployment's settings defaults, on both stores."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.model import MemorySettings, NewMemory, OwnerRef, ReviewQuery, UserMemoryQuery
from tests.factories import user_fact
from tests.store.store_testkit import MakeStore, Store

TEAM_A, TEAM_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)

# examples share the function-scoped store fixture: each writes under a fresh owner
STORE_EXAMPLES = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# (team or none, key) rows one example writes
TEAMED_KEYS = st.lists(
    st.tuples(st.sampled_from([TEAM_A, TEAM_B, None]), st.sampled_from(["a", "b", "c"])),
    min_size=1,
    max_size=8,
)


def team_memory(user: uuid.UUID, key: str, value: str, team: uuid.UUID | None) -> NewMemory:
    return user_fact(user, key, value, status="active", team_id=team)


async def test_a_teams_memory_is_recalled_only_in_that_team(store: Store) -> None:
    user = uuid.uuid4()
    await store.writes.upsert(team_memory(user, "employer", "Works at Acme", TEAM_A))
    await store.writes.upsert(team_memory(user, "hometown", "Grew up in Lyon", None))
    in_a = {h.memory.key for h in await store.recall(user, None, "", 10, team_id=TEAM_A)}
    in_b = {h.memory.key for h in await store.recall(user, None, "", 10, team_id=TEAM_B)}
    no_team = {h.memory.key for h in await store.recall(user, None, "", 10)}
    assert in_a == {"employer", "hometown"}
    assert in_b == {"hometown"} and no_team == {"hometown"}
    searched = {h.memory.key for h in await store.recall(user, None, "where does the user work", 10)}
    assert "employer" not in searched


async def test_the_same_key_in_two_teams_is_two_rows_never_a_revision(store: Store) -> None:
    user = uuid.uuid4()
    first = await store.writes.upsert(team_memory(user, "employer", "Works at Acme", TEAM_A))
    second = await store.writes.upsert(user_fact(user, "employer", "Works at Beta", team_id=TEAM_B))
    assert second.action == "created" and second.memory_id != first.memory_id
    memory = await store.listing.get_by_id(first.memory_id)
    assert memory is not None and memory.value == "Works at Acme" and memory.team_id == TEAM_A


async def test_memories_for_dedup_stay_inside_the_team(store: Store) -> None:
    user = uuid.uuid4()
    await store.writes.upsert(team_memory(user, "employer", "Works at Acme", TEAM_A))
    await store.writes.upsert(team_memory(user, "pet", "Has a cat", None))
    owners = [OwnerRef(scope="user", owner_id=user)]
    in_b = await store.listing.prompt_memories(owners, team_id=TEAM_B, words=[], limit=100)
    in_a = await store.listing.prompt_memories(owners, team_id=TEAM_A, words=[], limit=100)
    assert {m.key for m in in_b} == {"pet"}
    assert {m.key for m in in_a} == {"employer", "pet"}


@STORE_EXAMPLES
@given(
    rows=TEAMED_KEYS,
    context=st.sampled_from([TEAM_A, TEAM_B, None]),
)
async def test_recall_and_dedup_never_cross_a_team_boundary(
    store: Store, rows: list[tuple[uuid.UUID | None, str]], context: uuid.UUID | None
) -> None:
    user = uuid.uuid4()  # a fresh owner per example: examples share the store
    written: dict[uuid.UUID, uuid.UUID | None] = {}
    for team, key in rows:
        result = await store.writes.upsert(team_memory(user, key, f"value {key}", team))
        written[result.memory_id] = team
    # the oracle: a plain filter over what this example wrote
    visible = {mid for mid, team in written.items() if team is None or team == context}
    recalled = await store.recall(user, None, "", 50, team_id=context)
    existing = await store.listing.prompt_memories(
        [OwnerRef(scope="user", owner_id=user)], team_id=context, words=[], limit=100
    )
    assert {m.id for m in existing} == visible
    assert {h.memory.id for h in recalled} <= visible
    assert all(h.memory.team_id in (None, context) for h in recalled)


async def test_the_deployment_min_confidence_is_the_default_under_global_team_and_persona_rows(
    make_store: MakeStore,
) -> None:
    store = await make_store(settings_defaults=MemorySettings(min_confidence=0.85))
    persona = uuid.uuid4()
    assert (await store.settings.settings_for(TEAM_A, persona)).min_confidence == 0.85
    await store.settings.put_settings(level="team", target_id=TEAM_A, min_confidence=0.3)
    assert (await store.settings.settings_for(TEAM_A, persona)).min_confidence == 0.3
    assert (await store.settings.settings_for(TEAM_B, persona)).min_confidence == 0.85
    await store.settings.put_settings(level="persona", target_id=persona, min_confidence=0.6)
    assert (await store.settings.settings_for(TEAM_A, persona)).min_confidence == 0.6


def test_pmem_min_confidence_reaches_the_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    from config import load_settings

    monkeypatch.setenv("PMEM_MIN_CONFIDENCE", "0.9")
    monkeypatch.setenv("PMEM_RETENTION_PENDING_DAYS", "7")
    defaults = load_settings().memory_defaults()
    assert (defaults.min_confidence, defaults.pending_days) == (0.9, 7)


@STORE_EXAMPLES
@given(
    rows=TEAMED_KEYS,
    admin_of=st.sampled_from([frozenset({TEAM_A}), frozenset({TEAM_B}), frozenset({TEAM_A, TEAM_B}), None]),
)
async def test_the_review_queue_and_lists_never_cross_a_team_boundary(
    store: Store, rows: list[tuple[uuid.UUID | None, str]], admin_of: frozenset[uuid.UUID] | None
) -> None:
    user = uuid.uuid4()
    written: dict[uuid.UUID, uuid.UUID | None] = {}
    for team, key in rows:
        result = await store.writes.upsert(user_fact(user, key, f"v {key}", team_id=team))
        written[result.memory_id] = team
    page = await store.review.review_queue(ReviewQuery(teams=admin_of, user_id=user, limit=50))
    # the oracle: a team admin sees their teams' rows only, an admin (None) sees every row
    expected = {mid for mid, team in written.items() if admin_of is None or team in admin_of}
    assert {item.memory_id for item in page.items} == expected
    for team in (TEAM_A, TEAM_B):
        listed = await store.listing.list_for_user(UserMemoryQuery(user_id=user, team_id=team, limit=50))
        assert {m.id for m in listed.items} == {mid for mid, t in written.items() if t == team}
