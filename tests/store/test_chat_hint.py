"""The hint serves the next chat message, on both stores: reviewed facts first within their own
budget, turns only what is new (no repeated question, no filler)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from store.model import NewTurn
from store.rules.hint import EARLIER_HEADER, KNOWN_HEADER
from store.rules.tokens import count_tokens
from store.services.context_recall import ContextRecall, hint_in_context, items_in_context
from tests.factories import user_fact
from tests.store.store_testkit import Store

START = datetime(2026, 3, 1, 18, 0, tzinfo=UTC)
DINNER_TALK = [
    ("What should I cook tonight?", "A chickpea curry with spinach is quick tonight."),
    ("Any idea for a quick lunch?", "A lentil salad with lemon keeps well."),
    ("I have leftover rice.", "Fry it with peas and tofu."),
]


async def test_the_allergy_is_hinted_and_recalled_first_for_a_shrimp_question(store: Store) -> None:
    user = uuid.uuid4()
    for key, value in (("diet", "Is vegan"), ("allergy", "Is allergic to shellfish")):
        await store.writes.upsert(user_fact(user, key, value, status="active"))
    for day in range(12):
        question, answer = DINNER_TALK[day % len(DINNER_TALK)]
        channel = uuid.uuid4()
        at = START + timedelta(days=day)
        lines = [question, answer, "Thanks!", "Enjoy your meal!"]
        turns = [
            NewTurn(
                channel_id=channel,
                user_id=user,
                persona_id=None,
                team_id=None,
                role="user" if position % 2 else "assistant",
                text=text,
                at=at,
                position=position,
                speaker=None if position % 2 else "Chef",
            )
            for position, text in enumerate(lines, start=1)
        ]
        await store.writes.write_event(event_id=uuid.uuid4(), memories=[], turns=turns)
    asked = ContextRecall(
        user_id=user, persona_id=None, team_id=None, query="What can I cook with shrimp?", limit=10
    )
    items = await items_in_context(store, asked)
    assert "Is allergic to shellfish" in [i.memory.value for i in items[:10] if i.memory]
    hint = await hint_in_context(store, asked, max_tokens=1500)
    assert hint.startswith(KNOWN_HEADER) and "Is allergic to shellfish" in hint
    assert count_tokens(hint) <= 1500
    assert "Enjoy your meal" not in hint and "Thanks!" not in hint
    again = ContextRecall(
        user_id=user, persona_id=None, team_id=None, query="What should I cook tonight?", limit=10
    )
    repeated = await hint_in_context(store, again, max_tokens=1500)
    assert EARLIER_HEADER in repeated and "What should I cook tonight?" not in repeated
    assert "chickpea curry" in repeated  # the answer stays


async def test_a_fact_with_a_change_awaiting_review_is_marked_in_recall_and_hint(store: Store) -> None:
    user = uuid.uuid4()
    await store.writes.upsert(user_fact(user, "lives in", "Berlin", status="active"))
    await store.writes.write_event(event_id=uuid.uuid4(), memories=[user_fact(user, "lives in", "Munich")])
    [revision] = await store.review.pending_revisions()
    asked = ContextRecall(user_id=user, persona_id=None, team_id=None, query="where do I live", limit=10)
    [item] = [i for i in await items_in_context(store, asked) if i.memory]
    assert item.pending_change is not None and item.pending_change.id == revision.id
    hint = await hint_in_context(store, asked, max_tokens=1500)
    assert "- lives in: Berlin — a change to Munich awaits review" in hint
