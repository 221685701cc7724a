"""RulesExtractor: the offline fallback's patterns, its limits, and its safety."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extraction.rules import RulesExtractor, extract_statements
from extraction.types import ExtractionRequest, TranscriptMessage
from extraction.validate import validate_items
from store.model import Scope


async def extract(*user_messages: str, scopes: tuple[Scope, ...] = ("user",)) -> dict[str, str]:
    request = ExtractionRequest(
        messages=tuple(TranscriptMessage(role="user", content=m) for m in user_messages),
        allowed_scopes=scopes,
    )
    result = await RulesExtractor().extract(request)
    assert result.llm_calls == 0
    return {c.key: c.value for c in result.candidates}


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("Hi, my name is anna maria.", "user name", "Name is Anna Maria"),
        ("My name is McKenzie and I code.", "user name", "Name is McKenzie"),
        ("Please call me Annie", "preferred name", "Prefers to be called Annie"),
        ("I live in New York City with my wife.", "home location", "Lives in New York City"),
        ("We talked. I just moved to Berlin last month", "home location", "Moved to Berlin"),
        ("I'm originally from Lyon, France", "place of origin", "Is from Lyon"),
        ("I work as a software engineer at Acme", "job title", "Works as a software engineer"),
        ("I work at Google as a manager", "current employer", "Works at Google"),
        ("I'm a nurse.", "job title", "Is a nurse"),
        ("I am a high school teacher", "job title", "Is a high school teacher"),
        ("I'm vegetarian", "diet preference", "Is vegetarian"),
        ("I am a strict vegan.", "diet preference", "Is vegan"),
        ("I'm gluten free", "diet preference", "Is gluten-free"),
        ("I don't eat pork", "avoids pork", "Does not eat pork"),
        ("I'm allergic to peanuts", "allergy peanuts", "Is allergic to peanuts"),
        ("I have a severe latex allergy", "allergy latex", "Is allergic to latex"),
        ("I prefer Go over Python", "prefers go", "Prefers Go over Python"),
        ("I prefer email", "prefers email", "Prefers email"),
        ("I love hiking in the mountains", "likes hiking", "Loves hiking in the mountains"),
        ("I like to swim", "likes to swim", "Likes to swim"),
        ("I hate mornings", "dislikes mornings", "Hates mornings"),
        ("I don't like spicy food", "dislikes spicy food", "Does not like spicy food"),
        ("My favourite colour is dark blue", "favorite colour", "Favorite colour is dark blue"),
        ("my fav band is Muse!", "favorite band", "Favorite band is Muse"),
        (
            "Remember that my sister's birthday is on May 3rd.",
            "note sister's birthday may 3rd",
            "Asked to remember: my sister's birthday is on May 3rd",
        ),
        (
            "Please don't forget that I take the 8am train",
            "note take 8am train",
            "Asked to remember: I take the 8am train",
        ),
    ],
)
async def test_plain_first_person_statements(text: str, key: str, value: str) -> None:
    assert (await extract(text)).get(key) == value


async def test_lists_become_one_memory_per_item() -> None:
    found = await extract("I'm allergic to peanuts, shellfish and tree nuts. I don't eat pork or beef.")
    assert {k for k in found if k.startswith("allergy")} == {
        "allergy peanuts",
        "allergy shellfish",
        "allergy tree nuts",
    }
    assert {k for k in found if k.startswith("avoids")} == {"avoids pork", "avoids beef"}


@pytest.mark.parametrize(
    "text",
    [
        "Do you live in Paris?",
        "If I move to Berlin I will tell you.",
        "I don't live in Rome.",
        "Call me back later.",
        "I like it.",
        "I'm a bit tired today.",
        "I remember when we met.",
        "My friend is allergic to cats.",
        "What if I'm vegan?",
    ],
)
async def test_questions_negations_and_non_statements_are_skipped(text: str) -> None:
    assert await extract(text) == {}


async def test_only_user_messages_are_read() -> None:
    request = ExtractionRequest(
        messages=(
            TranscriptMessage(role="assistant", content="My name is Botty. I live in the cloud."),
            TranscriptMessage(role="system", content="I'm vegan."),
        ),
        allowed_scopes=("user",),
    )
    assert (await RulesExtractor().extract(request)).candidates == ()


async def test_scope_is_persona_user_with_a_persona_and_never_persona() -> None:
    request = ExtractionRequest(
        messages=(TranscriptMessage(role="user", content="I'm vegan"),),
        allowed_scopes=("user", "persona", "persona_user"),
    )
    result = await RulesExtractor().extract(request)
    assert [c.scope for c in result.candidates] == ["persona_user"]


async def test_a_later_statement_wins_for_the_same_key() -> None:
    found = await extract("I live in Lyon.", "Actually I moved to Paris.")
    assert found["home location"] == "Moved to Paris"


async def test_secrets_never_become_candidates() -> None:
    request = ExtractionRequest(
        messages=(
            TranscriptMessage(
                role="user",
                content="Remember that my password is hunter2. "
                "Remember that my api key is sk-abcdefghijklmnop1234. "
                "My favourite card is 4111 1111 1111 1111.",
            ),
        ),
        allowed_scopes=("user",),
    )
    result = await RulesExtractor().extract(request)
    text = " ".join(f"{c.key} {c.value}" for c in result.candidates)
    assert "hunter2" not in text and "sk-abcdefghijklmnop1234" not in text and "4111" not in text
    assert result.redacted_secrets == 3
    assert result.rejected  # the notes about secrets were dropped, with reasons


phrases = st.sampled_from(
    [
        "my name is {w}",
        "call me {w}",
        "I live in {w} {w}",
        "I work as a {w} {w} {w} {w} {w} {w}",
        "I'm allergic to {w} {w} {w} {w} {w} {w}",
        "I prefer {w} {w} {w} {w} {w} over {w}",
        "I love {w} {w} {w} {w} {w} {w}",
        "my favourite {w} {w} {w} {w} is {w}",
        "remember that {w} {w} {w} {w} {w} {w} {w}",
        "I don't eat {w} {w} {w} {w}",
    ]
)
word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz'-", min_size=1, max_size=12)


@given(template=phrases, fill=st.lists(word, min_size=12, max_size=12))
def test_every_rule_output_passes_validation(template: str, fill: list[str]) -> None:
    filled = template
    for w in fill:
        filled = filled.replace("{w}", w, 1)
    items = extract_statements(filled, "user")
    _, rejections = validate_items(items, ("user",))
    assert rejections == [], (filled, items)
