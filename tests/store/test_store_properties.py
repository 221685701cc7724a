"""Property tests: whatever is stored, recall for (user, persona) returns only that user's and that
persona's rows, and only active ones — on Postgres and SQLite, for every retriever."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.model import Memory, MemoryFilter, NewMemory, Scope, Status
from store.rules.recall import normalize_key
from tests.store.store_testkit import Store

USERS = [uuid.UUID(int=i) for i in range(1, 4)]
PERSONAS = [uuid.UUID(int=i) for i in range(101, 103)]
WORDS = ["coffee", "lisbon", "dog", "chess", "tennis", "porto", "vegan", "piano"]
SCOPES: list[Scope] = ["user", "persona", "persona_user"]
STATUSES: list[Status] = ["active", "pending_review", "archived"]


@st.composite
def memories(draw: Any) -> NewMemory:
    scope = draw(st.sampled_from(SCOPES))
    if scope == "user":
        owner, user = draw(st.sampled_from(USERS)), None
    else:
        owner = draw(st.sampled_from(PERSONAS))
        user = draw(st.sampled_from(USERS)) if scope == "persona_user" else None
    words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
    return NewMemory(
        scope=scope,
        owner_id=owner,
        user_id=user,
        key=draw(st.sampled_from(["likes", "city", "pet", "hobby", "diet"])),
        value=" ".join(words),
        confidence=draw(st.floats(min_value=0.0, max_value=1.0)),
        status=draw(st.sampled_from(STATUSES)),
    )


def visible(
    memory_scope: str, owner: uuid.UUID, user: uuid.UUID | None, me: uuid.UUID, persona: uuid.UUID | None
) -> bool:
    """Who may read a memory of this scope and owner, written independently of the store."""
    if memory_scope == "user":
        return owner == me
    if persona is None:
        return False
    if memory_scope == "persona":
        return owner == persona
    return owner == persona and user == me


async def _clear(store: Store) -> None:
    await store.check_schema()  # SQLite creates its tables on first use
    async with store.engine.begin() as conn:
        for table in reversed(store._schema.metadata.sorted_tables):
            await conn.execute(table.delete())


scenario = st.tuples(
    st.lists(memories(), min_size=4, max_size=25),
    st.sampled_from(USERS),
    st.sampled_from([*PERSONAS, None]),
    st.one_of(
        st.just(""),
        st.lists(st.sampled_from([*WORDS, "what", "where"]), min_size=1, max_size=3).map(" ".join),
    ),
    st.sampled_from(["hybrid", "vector", "keyword"]),
)


@settings(
    max_examples=25,
    deadline=None,
    database=None,  # no example files in the checkout; each run explores afresh
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=scenario)
async def test_recall_never_leaks_other_owners_or_inactive_rows(
    store: Store, case: tuple[list[NewMemory], uuid.UUID, uuid.UUID | None, str, Any]
) -> None:
    rows, me, persona, query, retriever = case
    await _clear(store)  # one store per test, emptied for every example
    if rows:
        await store.writes.write_event(event_id=uuid.uuid4(), memories=rows)
    hits = await store.recall(me, persona, query, limit=50, retriever=retriever)
    for hit in hits:
        m = hit.memory
        assert m.status == "active", m
        assert visible(m.scope, m.owner_id, m.user_id, me, persona), (m, me, persona)
    if query == "":
        # the empty query shows every visible key once (the limit is above the population)
        expected = {normalize_key(m.key) for m in await _visible_active(store, me, persona)}
        assert sorted(normalize_key(h.memory.key) for h in hits) == sorted(expected)


async def _visible_active(store: Store, me: uuid.UUID, persona: uuid.UUID | None) -> list[Memory]:
    everything = await store.listing.list_memories(MemoryFilter(status="active", limit=1000))
    return [m for m in everything if visible(m.scope, m.owner_id, m.user_id, me, persona)]
