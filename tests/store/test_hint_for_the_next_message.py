"""The hint and recall for the user's next chat message on both stores with MiniLM, as a chat
platform sees them: the approved allergy is in the hint and in recall's first 10 for a shrimp
question asked before; the earlier question is not hinted again (nor a shorter form of it), filler
in any language never is, a fact whose change awaits review is marked, and a user with 200 approved
facts still gets the one the message needs within the budget."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from store.protocols import Embedder
from store.rules.hint import EARLIER_HEADER, KNOWN_HEADER
from store.rules.tokens import count_tokens
from store.services.context_recall import ContextRecall, hint_in_context, items_in_context
from tests.factories import user_fact
from tests.store.store_testkit import MakeStore, Store
from tests.store.test_reviewed_facts_lead import minilm
from tests.store.test_store_turns import turn

__all__ = ["minilm"]  # the module-scoped embedder fixture, shared

pytestmark = pytest.mark.slow

START = datetime(2026, 8, 2, 19, 0, tzinfo=UTC)
ALLERGY = "Is allergic to shellfish"
FILLER = ("Thanks!", "Enjoy your meal! 🍤", "¡Buen provecho!", "Thanks, chef!", "Happy cooking! 👩‍🍳")
# earlier conversations: a question, the chef's answer, then the user's and the chef's filler
FOOD_TALK = (
    ("What can I cook with shrimp?", "Garlic shrimp, shrimp tacos or a shrimp stir-fry are all quick."),
    ("What should I cook for dinner tonight?", "A chickpea stew with smoked paprika and crusty bread."),
    ("Any idea for a quick lunch?", "A lentil salad with lemon keeps well."),
    ("Should I invest in crypto?", "Only what you can afford to lose, after your emergency fund."),
)
OTHER_FACTS = (
    ("diet", "Is vegan"),
    ("home city", "Lives in Lisbon"),
    ("children", "Cooks for two kids, Rui and Sofia"),
    ("kitchen", "Has a tiny kitchen with two burners"),
    ("cuisine", "Favourite cuisine is Ethiopian"),
)


async def remember_food_talk(store: Store, user: uuid.UUID) -> None:
    """Twelve conversations of `FOOD_TALK` with filler, embedded as the worker embeds them."""
    for day in range(12):
        question, answer = FOOD_TALK[day % len(FOOD_TALK)]
        lines = [question, answer, FILLER[day % len(FILLER)], FILLER[(day + 1) % len(FILLER)]]
        channel = uuid.uuid4()
        at = START + timedelta(days=day)
        said = [
            turn(user, position, text, channel=channel, at=at + timedelta(minutes=position))
            for position, text in enumerate(lines, start=1)
        ]
        vectors = await store.embedder.embed([t.text for t in said])
        await store.writes.write_event(
            event_id=uuid.uuid4(),
            memories=[],
            turns=[replace(t, embedding=v) for t, v in zip(said, vectors, strict=True)],
        )


def asked(user: uuid.UUID, message: str, limit: int = 20) -> ContextRecall:
    return ContextRecall(user_id=user, persona_id=None, team_id=None, query=message, limit=limit)


async def test_the_shrimp_question_brings_the_allergy_and_no_repeat_or_filler(
    make_store: MakeStore, minilm: Embedder
) -> None:
    store = await make_store(minilm)
    user = uuid.uuid4()
    for key, value in (*OTHER_FACTS, ("allergy", ALLERGY)):
        await store.writes.upsert(user_fact(user, key, value, status="active"))
    await remember_food_talk(store, user)

    message = "What can I cook with shrimp?"
    items = await items_in_context(store, asked(user, message, limit=10))
    assert ALLERGY in [item.memory.value for item in items[:10] if item.memory is not None]
    hint = await hint_in_context(store, asked(user, message), max_tokens=1000)
    assert hint.startswith(KNOWN_HEADER) and ALLERGY in hint
    assert count_tokens(hint) <= 1000
    earlier = hint.partition(EARLIER_HEADER)[2]
    assert message not in earlier  # asked before: not hinted again
    assert "shrimp stir-fry" in earlier  # the answer to it is
    assert not [text for text in FILLER if text in hint]


async def test_an_earlier_shorter_question_is_not_hinted_and_filler_never_is(
    make_store: MakeStore, minilm: Embedder
) -> None:
    store = await make_store(minilm)
    user = uuid.uuid4()
    await store.writes.upsert(
        user_fact(user, "savings", "Has an emergency fund of three months", status="active")
    )
    await remember_food_talk(store, user)
    messages = (
        "Should I invest in crypto or pay off my credit card first?",  # grows from an earlier question
        "What should I cook for dinner tonight? Something with beans?",
        "Thanks!",
        "Any idea for a quick lunch?",
    )
    for message in messages:
        hint = await hint_in_context(store, asked(user, message), max_tokens=1000)
        assert not [text for text in FILLER if text in hint], (message, hint)
        earlier = hint.partition(EARLIER_HEADER)[2]
        for question, _ in FOOD_TALK:
            # the user's earlier question that the message repeats or opens with
            if message.startswith(question):
                assert question not in earlier, (message, hint)
    crypto = await hint_in_context(store, asked(user, messages[0]), max_tokens=1000)
    assert "emergency fund" in crypto and "Should I invest in crypto?" not in crypto


async def test_a_fact_whose_change_awaits_review_is_marked(make_store: MakeStore, minilm: Embedder) -> None:
    store = await make_store(minilm)
    user = uuid.uuid4()
    await store.writes.upsert(user_fact(user, "lives in", "Lives in Berlin", status="active"))
    await store.writes.write_event(
        event_id=uuid.uuid4(), memories=[user_fact(user, "lives in", "Lives in Munich")]
    )
    message = "Which neighbourhood should I look at for a flat near where I live?"
    [item] = [i for i in await items_in_context(store, asked(user, message, limit=10)) if i.memory]
    assert item.pending_change is not None and item.pending_change.new_value == "Lives in Munich"
    hint = await hint_in_context(store, asked(user, message), max_tokens=1000)
    assert "- lives in: Lives in Berlin — a change to Lives in Munich awaits review" in hint


HOBBIES = (
    "chess", "pottery", "rock climbing", "birdwatching", "sailing", "knitting", "jazz piano", "salsa",
    "surfing", "origami", "archery", "fencing", "beekeeping", "calligraphy", "kayaking", "juggling",
    "woodworking", "astronomy", "photography", "skateboarding", "gardening", "tennis", "running",
    "cycling", "painting", "poetry", "karaoke", "bouldering", "yoga", "snooker", "curling", "rowing",
    "fishing", "hiking", "boxing", "golf", "squash", "embroidery", "magic tricks", "stamp collecting",
)  # fmt: skip
CITIES = (
    "Oslo", "Kyoto", "Lima", "Cairo", "Quebec", "Tallinn", "Hanoi", "Nairobi", "Reykjavik", "Seville",
    "Krakow", "Porto", "Bergen", "Cusco", "Fez", "Hobart", "Ljubljana", "Riga", "Split", "Valparaiso",
    "Zanzibar", "Bruges", "Cork", "Dubrovnik", "Edinburgh", "Florence", "Granada", "Havana", "Innsbruck",
    "Jaipur", "Kotor", "Luang Prabang", "Malmo", "Nara", "Oaxaca", "Plovdiv", "Quito", "Rovinj",
    "Salzburg", "Tbilisi",
)  # fmt: skip
THINGS = (
    "a red bicycle", "a vintage camera", "a telescope", "a sailboat", "a record player", "a drone",
    "a sewing machine", "an electric guitar", "a kayak", "a 3D printer", "a typewriter", "a hammock",
    "a motorbike", "a violin", "a projector", "a canoe", "a microscope", "a pinball machine",
    "a rowing machine", "a banjo", "a greenhouse", "a campervan", "a harp", "a metal detector",
    "a loom", "a kiln", "a treadmill", "a piano", "a ukulele", "a tent", "a paddleboard", "a sauna",
    "a chessboard from 1920", "a globe", "a barometer", "a snowboard", "a compass", "a lathe",
    "a trumpet", "a harmonica",
)  # fmt: skip


def many_facts() -> list[tuple[str, str]]:
    """200 approved facts about one person, none about food."""
    facts: list[tuple[str, str]] = []
    for i in range(40):
        facts.append((f"hobby {i}", f"Enjoys {HOBBIES[i]} on weekends"))
        facts.append((f"trip {i}", f"Visited {CITIES[i]} in {2000 + i % 25}"))
        facts.append((f"owns {i}", f"Owns {THINGS[i]}"))
        facts.append((f"friend {i}", f"Has a friend who teaches {HOBBIES[(i + 7) % 40]}"))
        facts.append((f"wish {i}", f"Wants to see {CITIES[(i + 11) % 40]} again"))
    return facts


async def test_among_200_approved_facts_the_one_the_message_needs_is_hinted_within_the_budget(
    make_store: MakeStore, minilm: Embedder
) -> None:
    store = await make_store(minilm)
    user = uuid.uuid4()
    crowd = many_facts()
    assert len(crowd) == 200
    for key, value in crowd:
        await store.writes.upsert(user_fact(user, key, value, status="active"))
    await store.writes.upsert(user_fact(user, "allergy", ALLERGY, status="active"))
    await remember_food_talk(store, user)
    for budget in (500, 1000):
        hint = await hint_in_context(store, asked(user, "What can I cook with shrimp?"), max_tokens=budget)
        assert ALLERGY in hint, hint
        assert count_tokens(hint) <= budget
    items = await items_in_context(store, asked(user, "What can I cook with shrimp?", limit=10))
    assert ALLERGY in [item.memory.value for item in items[:10] if item.memory is not None]


# a cook's everyday facts, all nearer "What should I cook for dinner tonight?" than a diet is
KITCHEN_LIFE = (
    ("weeknight time", "Has about 30 minutes to cook on weeknights"),
    ("hosting", "Hosts a dinner for neighbours every second Saturday"),
    ("meal prep", "Meal preps on Sunday afternoons"),
    ("pasta", "Learning to make fresh pasta"),
    ("kitchen", "Has a tiny kitchen with two burners"),
    ("oven", "Oven only goes up to 200 degrees"),
    ("pressure cooker", "Has a pressure cooker and a cast iron pan"),
    ("cuisine", "Favourite cuisine is Ethiopian"),
    ("spice", "Loves really spicy food"),
    ("bread", "Bakes sourdough every Sunday"),
    ("lunch", "Takes lunch to work in a bento box"),
    ("garden", "Grows tomatoes and peppers on the balcony"),
    ("budget", "Grocery budget is 60 euros a week"),
    ("blender", "Has a high-speed blender"),
    ("mushrooms", "Likes mushrooms only in a sauce"),
    ("leftovers", "Hates wasting leftovers"),
    ("market", "Shops at the farmers market on Saturdays"),
    ("soup", "Makes a big pot of soup every Monday"),
    ("herbs", "Grows basil and mint on the windowsill"),
    ("cookbook", "Cooks from Ottolenghi's books"),
    ("home city", "Lives in Lisbon"),
    ("work", "Works as a nurse with night shifts"),
)


@pytest.mark.parametrize("boost", [None, 0.0])
async def test_a_diet_far_from_a_dinner_question_is_recalled_among_many_kitchen_facts(
    make_store: MakeStore, minilm: Embedder, boost: float | None
) -> None:
    """ "What should I cook for dinner tonight?" is nearer every kitchen fact than "Is vegan", yet the
    diet limits every answer: a message speaking for the person lifts the facts that limit what may be
    suggested (`ScoreFusion.constraint_boost`) into recall's first 10. Without the boost it is not
    there, so this test shows the rule at work."""
    from store.rules.recall import ScoreFusion

    store = await make_store(minilm, fusion=None if boost is None else ScoreFusion(constraint_boost=boost))
    user = uuid.uuid4()
    for key, value in (*KITCHEN_LIFE, ("diet", "Is vegan")):
        await store.writes.upsert(user_fact(user, key, value, status="active"))
    items = await items_in_context(store, asked(user, "What should I cook for dinner tonight?", limit=10))
    first = [item.memory.value for item in items[:10] if item.memory is not None]
    assert ("Is vegan" in first) is (boost is None), first
