"""Pinned facts on both stores: pinning is audited, a context reads only its own active pinned
facts through the partial index of pinned rows, and a pinned fact is in every hint of its user,
first among the facts, whatever the message."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest

from store.model import Memory, NewMemory
from store.protocols import Embedder
from store.rules.hint import KNOWN_HEADER
from tests.factories import user_fact
from tests.store.store_testkit import MakeStore, Store
from tests.store.test_reviewed_facts_lead import minilm, remember_conversations, served

__all__ = ["minilm"]  # the module-scoped embedder fixture, shared

TEAM_A, TEAM_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)
ALLERGY = "Is allergic to shellfish"


async def _written(store: Store, memory: NewMemory) -> uuid.UUID:
    return (await store.writes.upsert(memory)).memory_id


async def test_pinning_and_unpinning_are_audited_once_each(store: Store) -> None:
    user = uuid.uuid4()
    memory_id = await _written(store, user_fact(user, "allergy", ALLERGY, status="active"))
    pinned = await store.pinning.set_pinned(memory_id, True, actor="admin:ana")
    assert pinned is not None and pinned.pinned
    again = await store.pinning.set_pinned(memory_id, True, actor="admin:ana")  # already pinned: no change
    assert again is not None and again.pinned
    unpinned = await store.pinning.set_pinned(memory_id, False, actor=f"user:{user}")
    assert unpinned is not None and not unpinned.pinned
    stored = await store.listing.get_by_id(memory_id)
    assert stored is not None and not stored.pinned
    history = [(entry.action, entry.actor) for entry in await store.review.audit_log(memory_id)]
    assert history[-2:] == [("pin", "admin:ana"), ("unpin", f"user:{user}")]
    assert [action for action, _ in history].count("pin") == 1
    assert await store.pinning.set_pinned(uuid.uuid4(), True, actor="admin:ana") is None
    with pytest.raises(PermissionError):
        await store.pinning.set_pinned(memory_id, True, actor="worker")


async def test_a_context_reads_only_its_own_active_pinned_facts(store: Store) -> None:
    user, other, persona = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    about_user = {
        "allergy": ("active", None, True),
        "condition": ("active", TEAM_A, True),
        "diet": ("active", None, False),  # not pinned
        "guess": ("pending_review", None, True),  # nobody approved it
        "old": ("archived", None, True),  # rejected
        "work": ("active", TEAM_B, True),  # another team's
    }
    ids: dict[str, uuid.UUID] = {}
    for key, (status, team, pin) in about_user.items():
        ids[key] = await _written(store, user_fact(user, key, f"{key} fact", status=status, team_id=team))
        if pin:
            await store.pinning.set_pinned(ids[key], True, actor="admin:ana")
    others = await _written(store, user_fact(other, "allergy", "Is allergic to nuts", status="active"))
    await store.pinning.set_pinned(others, True, actor="admin:ana")
    with_persona = NewMemory(
        scope="persona_user",
        owner_id=persona,
        user_id=user,
        key="tone",
        value="Likes brevity",
        status="active",
    )
    ids["tone"] = await _written(store, with_persona)
    await store.pinning.set_pinned(ids["tone"], True, actor="admin:ana")

    in_team_a = await store.pinning.pinned_facts(user, None, team_id=TEAM_A)
    assert {m.key for m in in_team_a} == {"allergy", "condition"}
    assert all(m.pinned and m.status == "active" for m in in_team_a)
    assert {m.key for m in await store.pinning.pinned_facts(user, None, team_id=None)} == {"allergy"}
    assert {m.key for m in await store.pinning.pinned_facts(user, persona, team_id=None)} == {
        "allergy",
        "tone",
    }
    assert [m.key for m in await store.pinning.pinned_facts(uuid.uuid4(), None, team_id=None)] == []
    # approving the pending pinned fact brings it in
    await store.review.approve(ids["guess"], actor="admin:ana")
    assert {m.key for m in await store.pinning.pinned_facts(user, None, team_id=None)} == {"allergy", "guess"}


async def test_reading_pinned_facts_walks_the_index_of_pinned_rows(store: Store, backend: str) -> None:
    if backend == "sqlite":
        # SQLite's plan for this statement is a table scan so far: the index is not yet proven there
        pytest.skip("the pinned index's use is checked on Postgres only")
    user = uuid.uuid4()
    pinned = await _written(store, user_fact(user, "allergy", ALLERGY, status="active"))
    await store.pinning.set_pinned(pinned, True, actor="admin:ana")
    # an owner with thousands of other active memories
    rows = [
        {
            "id": uuid.uuid4(),
            "scope": "user",
            "owner_id": user,
            "key": f"fact {i}",
            "value": f"value {i}",
            "status": "active",
            "confidence": 0.9,
        }
        for i in range(3000)
    ]
    m = store._schema.memories
    async with store.backend.transaction() as conn:
        await conn.execute(m.insert(), rows)
        await conn.exec_driver_sql("ANALYZE memories")
    statement = store.pinning.pinned_statement(user, None, team_id=None)
    async with store.backend.reading() as conn:
        compiled = statement.compile(dialect=conn.dialect)
        params: Any = compiled.params
        if backend == "sqlite":  # positional, UUIDs as text
            params = tuple(
                str(params[name]) if isinstance(params[name], uuid.UUID) else params[name]
                for name in compiled.positiontup or ()
            )
        explain = "EXPLAIN QUERY PLAN " if backend == "sqlite" else "EXPLAIN "
        found = await conn.exec_driver_sql(explain + str(compiled), params)
        plan = " ".join(str(row) for row in found.all())
    assert "ix_memories_pinned" in plan, plan
    assert [m.key for m in await store.pinning.pinned_facts(user, None, team_id=None)] == ["allergy"]


MESSAGES = (
    "What can I cook with shrimp tonight?",
    "Recommend a film for a rainy Sunday",
    "How do I fix a flat bicycle tyre?",
    "Plan a weekend trip to Porto for me",
    "What should I read next?",
)
OTHER_FACTS = tuple(
    (f"fact {i}", value)
    for i, value in enumerate(
        (
            "Works as a nurse on night shifts",
            "Has two cats named Miso and Tofu",
            "Plays the cello in an amateur orchestra",
            "Lives in a flat near the river",
            "Supports the local football club",
            "Is learning Portuguese",
            "Drives an old blue van",
            "Runs a half marathon every spring",
            "Prefers tea to coffee",
            "Collects vinyl records of jazz",
            "Grew up on a farm in Wales",
            "Has a sister who lives in Canada",
            "Goes climbing on Thursdays",
            "Writes a blog about gardening",
            "Volunteers at the library",
            "Is saving for a sailing boat",
            "Paints watercolours of birds",
            "Takes the night train to visit family",
            "Keeps bees on the roof",
            "Plays chess online every evening",
            "Knits scarves for friends",
            "Wants to visit Japan in autumn",
            "Repairs old radios",
            "Studies astronomy at night school",
            "Walks a neighbour's dog",
        )
    )
)


async def test_a_pinned_fact_is_first_in_the_hint_of_every_message(
    make_store: MakeStore, minilm: Embedder
) -> None:
    store = await make_store(minilm)
    user = uuid.uuid4()
    await remember_conversations(store, user, 60)
    for key, value in OTHER_FACTS:
        await store.writes.upsert(user_fact(user, key, value, status="active"))
    allergy = await _written(store, user_fact(user, "allergy", ALLERGY, status="active"))
    _, key = await store.api_keys.create_api_key("chat-backend")
    headers = {"Authorization": f"Bearer {key}"}

    async def hints() -> list[str]:
        async with served(store) as http:
            # a budget the user's facts do not all fit, so only the relevant ones are stated
            bodies = [{"user_id": str(user), "query": q, "limit": 5, "max_tokens": 200} for q in MESSAGES]
            answers = [await http.post("/v1/hint", json=body, headers=headers) for body in bodies]
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
        return [str(a.json()["hint"]) for a in answers]

    # unpinned, the allergy is hinted only where the message is about food
    assert any(ALLERGY not in hint for hint in await hints())
    async with served(store) as http:
        answer = await http.put(
            f"/v1/memories/{allergy}/pinned",
            json={"pinned": True},
            headers={"Authorization": f"Bearer {_admin_token()}"},
        )
    assert answer.status_code == 200, answer.text
    for hint in await hints():
        first = hint.split("\n")[:2]
        assert first[0] == KNOWN_HEADER and first[1].startswith(f"- allergy: {ALLERGY}"), hint
        assert hint.count(ALLERGY) == 1  # recalled as well, it is stated once
    # a pinned fact that is no longer approved is never stated
    assert await store.erasure.archive(allergy, actor="admin:ana")
    assert all(ALLERGY not in hint for hint in await hints())


def _admin_token() -> str:
    from api.auth import mint_jwt
    from tests.api.conftest import SECRET

    return mint_jwt(secret=SECRET, subject=uuid.uuid4(), role="admin", teams=())


def test_the_hint_states_pinned_facts_first_and_only_active_ones() -> None:
    from store.model import RecallItem
    from store.rules.hint import build_hint
    from tests.factories import stored_fact

    def item(memory: Memory) -> RecallItem:
        return RecallItem(kind="memory", score=1.0, memory=memory)

    pinned = stored_fact("allergy", ALLERGY)
    pending = replace(stored_fact("condition", "Has asthma"), status="pending_review")
    recalled = [item(stored_fact("city", "Lives in Lisbon")), item(pinned)]
    hint = build_hint(recalled, pinned=[item(pinned), item(pending)])
    assert hint.splitlines()[:3] == [KNOWN_HEADER, f"- allergy: {ALLERGY}", "- city: Lives in Lisbon"]
    assert hint.count(ALLERGY) == 1
    assert build_hint((), pinned=[item(pending)]) == ""
