"""RulesExtractor: the offline fallback's patterns, its limits, and its safety."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extraction.grounding import grounding
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


WAYS_OF_SAYING = [
    # names
    ("Hi! I'm Priya.", "user name", "Name is Priya"),
    ("lol. I'm Kenji, I live in Osaka.", "user name", "Name is Kenji"),
    ("helo im Sven, frm Oslo", "user name", "Name is Sven"),
    ("Hey, name's Carlos.", "user name", "Name is Carlos"),
    ("Hi, Maya here.", "user name", "Name is Maya"),
    # where they live
    ("i'm based in Mexico City.", "home location", "Based in Mexico City"),
    ("We live in Gdansk so fish is easy to get", "home location", "Lives in Gdansk"),
    ("I'm living in Valencia since 2019.", "home location", "Based in Valencia"),
    ("I don't live in Rome anymore, I moved to Milan in March.", "home location", "Moved to Milan"),
    # food and drink
    ("I don't eat meat anymore.", "avoids meat", "Does not eat meat"),
    ("I don't drink alcohol.", "avoids alcohol", "Does not drink alcohol"),
    ("I don't drink coffee after noon.", "avoids coffee", "Does not drink coffee after noon"),
    ("I don't drink red wine, it gives me headaches.", "avoids red wine", "Does not drink red wine"),
    ("No coffee, green tea only.", "avoids coffee", "No coffee"),
    ("No coffee, green tea only.", "drinks", "Drinks green tea only"),
    ("no sugar in anything please", "avoids sugar", "No sugar"),
    ("I only drink decaf.", "drinks", "Only drinks decaf"),
    ("i drink way too much coffee", "drinks", "Drinks way too much coffee"),
    ("And I quit alcohol in January.", "avoids alcohol", "Quit alcohol"),
    ("I stopped eating meat last year", "avoids meat", "Stopped eating meat"),
    ("I'm gluten-free and I can't have dairy.", "avoids dairy", "Can't have dairy"),
    ("I'm lactose intolerant and allergic to peanuts.", "allergy peanuts", "Is allergic to peanuts"),
    ("No sugar please, I'm diabetic.", "diet preference", "Is diabetic"),
    # schedules
    (
        "Every Tuesday evening I have choir practice.",
        "routine tuesday evening",
        "Has choir practice every Tuesday evening",
    ),
    ("On weekdays I work from home.", "routine weekdays", "Works from home on weekdays"),
    ("I run on Mondays and Thursdays.", "routine mondays thursdays", "Runs on Mondays and Thursdays"),
    (
        "Tuesdays and Thursdays I teach salsa classes.",
        "routine tuesdays thursdays",
        "Teaches salsa classes Tuesdays and Thursdays",
    ),
    ("I walk Rocket every evening at 6", "routine evening", "Walks Rocket every evening at 6"),
    ("Each Sunday we go to the mountains.", "routine sunday", "Goes to the mountains each Sunday"),
    ("We usually eat out on Fridays", "routine fridays", "Usually eats out on Fridays"),
    ("And I'm off on Fridays.", "routine fridays", "Is off on Fridays"),
    ("My hours are Mon-Fri 8 to 4.", "working hours", "Hours are Mon-Fri 8 to 4"),
    # pets
    ("I'll be bringing my dog Biscuit.", "pet dog biscuit", "Has a dog named Biscuit"),
    ("our cat is called Miso", "pet cat miso", "Has a cat named Miso"),
    ("my dog's name is taco", "pet dog taco", "Has a dog named Taco"),
    ("We adopted a rescue dog named Luna last spring.", "pet dog luna", "Has a dog named Luna"),
    ("I live with my partner and our parrot, Kiwi.", "pet parrot kiwi", "Has a parrot named Kiwi"),
    # family: a relative's facts are theirs, told as such
    ("My sister lives in Lyon and she's a doctor.", "sister's home", "Sister lives in Lyon"),
    ("My sister lives in Lyon and she's a doctor.", "sister's job", "Sister is a doctor"),
    ("my wife Anna prefers rosé.", "wife's name", "Wife is Anna"),
    ("I have one son, he has 5 years.", "children", "Has one son"),
    ("I live with my partner.", "lives with partner", "Lives with partner"),
    # likes and dislikes
    (
        "Also I hate early flights, anything before 9 is a no.",
        "dislikes early flights",
        "Hates early flights",
    ),
    ("I hate running in the rain.", "dislikes running", "Hates running in the rain"),
    ("I love Thai food, any recipes?", "likes thai food", "Loves Thai food"),
    ("I'm not into video games.", "dislikes video games", "Not into video games"),
    ("I'm a big fan of Radiohead", "likes radiohead", "Fan of Radiohead"),
    ("I love traveling - it's how I learn.", "likes traveling", "Loves traveling"),
    ("I do like nature, so that might be fun.", "likes nature", "Likes nature"),
    ("We went for my daughter Mia's birthday.", "daughter's name", "Daughter is Mia"),
    ("I'm not a morning person.", "dislikes morning", "Not a morning person"),
    # work
    ("I'm a software engineer at Spotify, mostly backend.", "current employer", "Works at Spotify"),
    ("I'm a chef at a small bistro in Bath.", "job title", "Is a chef"),
    ("I work as a paralegal at Hughes & Co.", "current employer", "Works at Hughes & Co"),
    ("I'm actually an accountant.", "job title", "Is an accountant"),
    ("I am engineer in Siemens.", "job title", "Is engineer"),
    ("I'm Priya and I'm a nurse practitioner.", "job title", "Is a nurse practitioner"),
]


@pytest.mark.parametrize(("text", "key", "value"), WAYS_OF_SAYING)
async def test_common_ways_people_say_who_they_are(text: str, key: str, value: str) -> None:
    assert (await extract(text)).get(key) == value


@pytest.mark.parametrize(
    "text",
    [
        # not a name
        "I'm Italian.",
        "Hi, I'm Back!",
        "I'm So tired.",
        "Same here.",
        # a hypothetical, a wish, a question
        "If I lived in Paris I'd eat croissants every day haha.",
        "I'd love a dog named Rex.",
        "I wish I lived in Lisbon.",
        "Should I move to Barcelona?",
        "Do you like dogs?",
        "Is it weird that I hate cilantro?",
        "Suppose I moved to Berlin, would I need German?",
        # someone else's facts
        "My neighbour has a dog named Max.",
        "my sister's dog Bella is cute",
        "My friend is allergic to cats.",
        # negations that state nothing to keep
        "I'm not vegan.",
        "I'm not a doctor.",
        "I don't have a dog.",
        "I don't go to the gym on Mondays.",
        # not a routine, not food
        "On Sunday I went to a party.",
        "Every day I feel worse.",
        "I used to run on Sundays.",
        "I drink it every day.",
        "I quit my job last week.",
        "I can't have a meeting at 5.",
        "No problem, thanks!",
        "No way.",
        "No prob, happy to help!",
        "No doubts, Sam. You'll do great!",
        "Look here, I found a new pup for you!",
        "I'm grateful to have a job I enjoy every day.",
        "My dog is sick.",
    ],
)
async def test_traps_that_are_not_the_users_facts(text: str) -> None:
    assert await extract(text) == {}


@pytest.mark.parametrize("text", sorted({text for text, _, _ in WAYS_OF_SAYING}))
def test_every_value_is_grounded_in_what_was_said(text: str) -> None:
    items = extract_statements(text, "user")
    assert items
    for item in items:
        verdict = grounding(str(item["key"]), str(item["value"]), cited=(text,), transcript=(text,))
        assert verdict.outcome == "keep", (item, verdict)


async def test_a_relatives_home_is_never_the_users_home() -> None:
    found = await extract(
        "My brother lives in Toronto and he loves hockey.", "My parents still live in Ohio."
    )
    assert found == {"brother's home": "Brother lives in Toronto", "parents' home": "Parents live in Ohio"}


async def test_several_pets_named_in_one_sentence() -> None:
    found = await extract("haha. I have two cats, Miso and Tofu.")
    assert found == {"pet cat miso": "Has a cat named Miso", "pet cat tofu": "Has a cat named Tofu"}


async def test_a_trip_planning_conversation_yields_what_was_said() -> None:
    found = await extract(
        "Hi! I'm Priya. I need help planning a trip to Lisbon next month.",
        "From Manchester, I live in Manchester. I work from home on Mondays and Wednesdays.",
        "Every Tuesday evening I have choir practice, so nothing then please.",
        "No coffee, green tea only. And I'll be bringing my dog Biscuit.",
        "Also I hate early flights, anything before 9 is a no.",
    )
    assert found == {
        "user name": "Name is Priya",
        "home location": "Lives in Manchester",
        "routine mondays wednesdays": "Works from home on Mondays and Wednesdays",
        "routine tuesday evening": "Has choir practice every Tuesday evening",
        "avoids coffee": "No coffee",
        "drinks": "Drinks green tea only",
        "pet dog biscuit": "Has a dog named Biscuit",
        "dislikes early flights": "Hates early flights",
    }


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


async def test_a_preference_is_persona_user_with_a_persona_and_never_persona() -> None:
    request = ExtractionRequest(
        messages=(TranscriptMessage(role="user", content="I prefer quick recipes over elaborate ones"),),
        allowed_scopes=("user", "persona", "persona_user"),
    )
    result = await RulesExtractor().extract(request)
    assert [c.scope for c in result.candidates] == ["persona_user"]


async def scopes_with_a_persona(text: str) -> dict[str, str]:
    request = ExtractionRequest(
        messages=(TranscriptMessage(role="user", content=text),),
        allowed_scopes=("user", "persona", "persona_user"),
    )
    return {c.key: c.scope for c in (await RulesExtractor().extract(request)).candidates}


@pytest.mark.parametrize(
    ("category", "text", "key"),
    [
        ("name", "My name is Dana.", "user name"),
        ("name", "Please call me Dee", "preferred name"),
        ("home", "I live in Lisbon.", "home location"),
        ("home", "I'm originally from Porto", "place of origin"),
        ("work", "I work as a nurse at Santa Maria", "job title"),
        ("work", "I work at Google", "current employer"),
        ("diet", "I'm vegan.", "diet preference"),
        ("diet", "I don't eat pork", "avoids pork"),
        ("allergy", "I'm allergic to shellfish", "allergy shellfish"),
        ("allergy", "I have a severe latex allergy", "allergy latex"),
        ("health", "I have asthma.", "health asthma"),
        ("health", "I suffer from migraines", "health migraines"),
        ("health", "I'm pregnant", "health pregnancy"),
        ("family", "My wife Ana teaches piano.", "wife's name"),
        ("family", "I have two kids", "children"),
        ("family", "My sister lives in Lyon", "sister's home"),
    ],
)
async def test_a_fact_about_the_person_is_the_users_whichever_persona_hears_it(
    category: str, text: str, key: str
) -> None:
    scopes = await scopes_with_a_persona(text)
    assert scopes.get(key) == "user", (category, scopes)


async def test_preferences_routines_and_notes_stay_with_the_persona() -> None:
    scopes = await scopes_with_a_persona(
        "I love spicy food. I run every Tuesday. Remember that the party is on Friday."
    )
    assert scopes and set(scopes.values()) == {"persona_user"}, scopes


async def test_a_health_fact_names_a_known_condition_only() -> None:
    found = await extract(
        "I have a bad knee.", "I have a meeting at noon.", "I'm recovering from a knee injury"
    )
    assert found == {"health bad knee": "Has a bad knee", "health knee injury": "Has a knee injury"}


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
# the patterns for names, homes, food and drink, routines, pets, family and work
ways_of_saying = st.sampled_from(
    [
        "Hi, I'm {W}.",
        "{W} here.",
        "I'm based in {w} {w} {w} {w} {w}",
        "I don't drink {w} {w} after {w} {w}",
        "No coffee, {w} {w} only",
        "I only drink {w} {w} {w} {w} {w} {w}",
        "Every Tuesday I {w} {w} {w} {w} {w} {w} {w} {w} {w}",
        "I {w} {w} {w} {w} on Mondays and Fridays at 6",
        "my dog {W} {w} {w}",
        "We have two cats, {W}, {W} and {W}",
        "my sister lives in {w} {w} {w} {w} {w}",
        "my wife {W} {w}",
        "I'm a {w} {w} {w} engineer at {w} {w} {w} {w} {w}",
        "I'm not into {w} {w} {w} {w} {w} {w} {w}",
    ]
)
word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz'-", min_size=1, max_size=12)
name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=10).map(str.capitalize)


def filled_in(template: str, words: list[str], names: list[str]) -> str:
    """`template` with each {w} replaced by the next word and each {W} by the next name."""
    for w in words:
        template = template.replace("{w}", w, 1)
    for n in names:
        template = template.replace("{W}", n, 1)
    return template


@given(
    template=st.one_of(phrases, ways_of_saying),
    fill=st.lists(word, min_size=12, max_size=12),
    names=st.lists(name, min_size=3, max_size=3),
)
@settings(max_examples=300)
def test_every_rule_output_passes_validation(template: str, fill: list[str], names: list[str]) -> None:
    filled = filled_in(template, fill, names)
    items = extract_statements(filled, "user")
    _, rejections = validate_items(items, ("user",))
    assert rejections == [], (filled, items)


# the words a rule may add around what the user said ("Lives in", "Has a dog named", "Is off")
PREDICATE_WORDS = frozenset(
    """name is prefers to be called lives live in based moved from does not eat drink drinks eats no
    only has a an named works at as into fan of hates loves likes off dislikes allergic quit stopped
    can't have hours are""".split()  # noqa: SIM905
)


def _forms(word: str) -> set[str]:
    w = word.lower().strip("'-").replace("'", "")  # "im" is read as "i'm"
    return {w, w.removesuffix("s"), w.removesuffix("es"), w.removesuffix("ies") + "y"}


def said_it(word: str, text: str) -> bool:
    """The word, or a form of it ("runs" for "run", "cat" for "cats"), is in the text."""
    said = set().union(*(_forms(w) for w in re.findall(r"[\w'-]+", text)))
    return word.lower() in PREDICATE_WORDS or bool(_forms(word) & said)


@given(
    template=ways_of_saying,
    fill=st.lists(word, min_size=12, max_size=12),
    names=st.lists(name, min_size=3, max_size=3),
)
@settings(max_examples=300)
def test_a_value_holds_only_words_the_user_said(template: str, fill: list[str], names: list[str]) -> None:
    filled = filled_in(template, fill, names)
    for item in extract_statements(filled, "user"):
        unsaid = [w for w in re.findall(r"[\w'-]+", str(item["value"])) if not said_it(w, filled)]
        assert unsaid == [], (filled, item)
