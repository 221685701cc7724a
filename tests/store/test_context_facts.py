"""A hint's facts read together (`context_facts`: on Postgres, inside the recall's own statement)
are exactly what the three reads return apart: the memories most relevant to the message, the
first by standing and the pinned ones, with a persona's overrides and keys that normalise alike."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import asdict, replace

from store.model import ContextFacts, Memory, NewMemory, RecallQuery
from store.postgres.recall import recall_rows
from tests.factories import stored_fact, user_fact
from tests.store.store_testkit import Store

TEAM = uuid.UUID(int=0xC)
QUERIES = ("Where does the user live and work?", "What does the user eat?", "", "the of")


async def _context(store: Store) -> tuple[uuid.UUID, uuid.UUID]:
    """A user with facts of their own, of a persona and of the persona with them (one overriding
    the user's, two keys that normalise alike, one with letters beyond ASCII), in no team and in
    TEAM; some pinned."""
    user, persona = uuid.uuid4(), uuid.uuid4()
    facts = [
        user_fact(user, "diet", "Eats no meat", confidence=0.8),
        user_fact(user, "Diet  plan", "Eats fish on Fridays", confidence=0.7),
        user_fact(user, "diet plan", "Cooks lentils every week", confidence=0.6),
        user_fact(user, "home city", "Lives in Porto", confidence=0.9),
        user_fact(user, "employer", "Works at a bakery in Porto", confidence=0.95, team_id=TEAM),
        user_fact(user, "sport", "Swims in the sea", confidence=0.5),
        NewMemory(scope="persona_user", owner_id=persona, user_id=user, key="diet", value="Is vegan now"),
        NewMemory(scope="persona_user", owner_id=persona, user_id=user, key="pet", value="Has a cat"),
        NewMemory(scope="persona", owner_id=persona, user_id=None, key="style", value="Speaks briefly"),
        user_fact(user, "Lieblingsgetränk", "Trinkt Apfelschorle", confidence=0.4),
        user_fact(user, "café", "Goes to Café Majestic", confidence=0.3),
    ]
    for fact in facts:
        written = await store.writes.upsert(replace(fact, status="active"))
        if fact.key in ("home city", "pet", "employer"):
            await store.pinning.set_pinned(written.memory_id, True, actor="admin:ana")
    # restated with other values: proposed changes awaiting review
    for fact in (facts[3], facts[5], facts[6]):
        await store.writes.upsert(
            replace(fact, value=f"{fact.value}, or so it seems", status="pending_review")
        )
    return user, persona


async def test_the_facts_read_together_are_the_reads_apart(store: Store) -> None:
    user, persona = await _context(store)
    for persona_id, team_id, query, limit, standing, pinned in itertools.product(
        (None, persona), (None, TEAM), QUERIES, (0, 2, 10), (0, 2, 5, 6, 7, 8, 40), (False, True)
    ):
        asked = RecallQuery(user_id=user, persona_id=persona_id, team_id=team_id, text=query, limit=limit)
        together = await store.context_facts(asked, standing=standing, pinned=pinned)
        relevant = await store.recall(user, persona_id, query, limit, team_id=team_id)
        first = await store.recall(user, persona_id, "", standing, team_id=team_id) if standing else None
        if first is not None and len(first) >= standing:
            first = None  # as many facts as asked for or more: the hint lists the relevant ones
        pins = await store.pinning.pinned_facts(user, persona_id, team_id=team_id) if pinned else []
        ids = {hit.memory.id for hit in [*relevant, *(first or ())]} | {memory.id for memory in pins}
        pending = await store.review.pending_changes(ids)
        case = (persona_id is not None, team_id, query, limit, standing, pinned)
        apart = ContextFacts(relevant=relevant, standing=first, pinned=pins, pending=pending)
        assert together == apart, case
    # the context is rich enough to tell the reads apart
    asked = RecallQuery(user_id=user, persona_id=persona, team_id=TEAM, text=QUERIES[0], limit=10)
    facts = await store.context_facts(asked, standing=40, pinned=True)
    assert len(facts.pinned) == 3 and facts.standing is not None and len(facts.standing) > 3
    assert len(facts.pending) == 3
    assert {hit.memory.value for hit in facts.standing} >= {"Is vegan now", "Speaks briefly"}


def test_a_branch_reads_its_own_rows_and_with_overrides_every_row_of_their_keys() -> None:
    diet, plan, other_plan, city = (
        stored_fact(key, value)
        for key, value in (
            ("diet", "Eats no meat"),
            ("Diet  plan", "Fish on Fridays"),
            ("diet plan", "Lentils"),
            ("home city", "Porto"),
        )
    )

    def row(memory: Memory, source: str | None, rank: int | None) -> dict[str, object]:
        return {**asdict(memory), "source": source, "rank": rank, "score": 1.0}

    found = recall_rows(
        [
            row(diet, "vector", 1),
            row(plan, "top", 1),
            row(diet, "top", 2),
            row(other_plan, None, None),
            row(city, "pinned", 1),
        ]
    )
    assert found.ranking("top") == [plan.id, diet.id]
    assert found.rows_for(["vector", "text"], overrides=False) == [diet]
    assert found.rows_for(["top"], overrides=False) == [diet, plan]
    assert found.rows_for(["top"], overrides=True) == [diet, plan, other_plan]
    assert found.rows_for(["pinned"], overrides=True) == [city]
