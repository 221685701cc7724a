"""Scoring an extractor against labelled conversations (evaluation/labelled_facts.py): the
attribute a key names, polarity, salient words, and recall/precision on a tiny set."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation.labelled_facts import (
    CATEGORIES,
    ExtractedFact,
    LabelledConversation,
    LabelledFact,
    attribute_of,
    category_of,
    fact_matches,
    is_negative,
    load_conversations,
    salient_words,
    score_split,
)
from extraction.types import TranscriptMessage

FIRST_HOUR = Path(__file__).resolve().parents[2] / "bench" / "data" / "first_hour"


@pytest.mark.parametrize(
    ("key", "attribute"),
    [
        ("user name", "name"),
        ("preferred name", "name"),
        ("dog's name", "pet"),
        ("pet dog biscuit", "pet"),
        ("sister's home", "family"),
        ("wife's name", "family"),
        ("home location", "home"),
        ("lives in", "home"),
        ("place of origin", "origin"),
        ("diet preference", "food"),
        ("avoids coffee", "food"),
        ("dislikes early flights", "preference"),
        ("work schedule", "schedule"),
        ("routine tuesday evening", "schedule"),
        ("job title", "work"),
        ("current employer", "work"),
        ("note sister birthday", "family"),
        ("favourite colour", "preference"),
        ("shoe size", "other"),
    ],
)
def test_attribute_of_a_key(key: str, attribute: str) -> None:
    assert attribute_of(key) == attribute


def test_every_attribute_has_a_category() -> None:
    assert category_of("home location") == category_of("place of origin") == "home/city"
    assert category_of("shoe size") == "other"
    assert {category_of(k) for k in ("dog's name", "job title", "avoids tea")} == {
        "pets",
        "work",
        "food/drink",
    }
    assert len(CATEGORIES) == 9


def test_polarity_and_salient_words() -> None:
    assert is_negative("avoids coffee", "No coffee")
    assert is_negative("diet", "Doesn't eat meat")
    assert not is_negative("drinks", "Green tea only")
    assert not is_negative("likes jazz", "Loves jazz")
    assert salient_words("Lives in Manchester") == {"manchester"}
    assert salient_words("Works from home on Mondays and Wednesdays") == {"home", "monday", "wednesday"}
    assert salient_words("Drinks a lot of coffee") == {"coffee"}


def label(key: str, value: str) -> LabelledFact:
    return LabelledFact(key=key, value=value, scope="user")


def found(key: str, value: str) -> ExtractedFact:
    return ExtractedFact(key=key, value=value, scope="user")


@pytest.mark.parametrize(
    ("labelled", "extracted", "matches"),
    [
        (label("home location", "Lives in Manchester"), found("home location", "Lives in Manchester"), True),
        (label("home location", "Lives in Manchester"), found("lives in", "Moved to Manchester"), True),
        (label("user name", "Priya"), found("user name", "Name is Priya"), True),
        (
            label("work schedule", "Works from home on Mondays"),
            found("routine mondays", "Works from home on Mondays"),
            True,
        ),
        # another attribute, another polarity, a missing salient word, another scope
        (label("home location", "Lives in Lyon"), found("place of origin", "Is from Lyon"), False),
        (label("likes jazz", "Loves jazz"), found("dislikes jazz", "Hates jazz"), False),
        (
            label("dislikes running in rain", "Running in the rain"),
            found("dislikes running", "Hates running"),
            False,
        ),
        (
            label("user name", "Priya"),
            ExtractedFact(key="user name", value="Name is Priya", scope="persona_user"),
            False,
        ),
    ],
)
def test_fact_matching(labelled: LabelledFact, extracted: ExtractedFact, matches: bool) -> None:
    assert fact_matches(labelled, extracted) is matches


def conversation(cid: str, *facts: LabelledFact) -> LabelledConversation:
    return LabelledConversation(
        id=cid,
        persona=None,
        messages=(TranscriptMessage(role="user", content="…"),),
        names=(),
        facts=facts,
    )


def test_recall_and_precision_on_a_tiny_set() -> None:
    conversations = [
        conversation(
            "a", label("user name", "Priya"), label("dog's name", "Biscuit"), label("home", "Lives in Leeds")
        ),
        conversation("b"),  # nothing to note: anything found is wrong
    ]
    extracted = {
        "a": [
            found("user name", "Name is Priya"),
            found("preferred name", "Prefers to be called Priya"),  # restates a labelled fact: right
            found("pet dog biscuit", "Has a dog named Biscuit"),
            found("home location", "Lives in Paris"),  # wrong city
        ],
        "b": [found("likes dogs", "Likes dogs")],
    }
    score = score_split(conversations, extracted)
    assert (score.total.labels, score.total.labels_found) == (3, 2)
    assert (score.total.extracted, score.total.extracted_right) == (5, 3)
    assert score.total.recall == pytest.approx(2 / 3)
    assert score.total.precision == pytest.approx(3 / 5)
    assert score.by_category["home/city"].recall == 0.0
    assert score.by_category["likes/dislikes"].precision == 0.0
    assert score.by_category["schedule"].recall is None
    assert [f.value for f in score.missed["a"]] == ["Lives in Leeds"]
    assert [f.value for f in score.wrong["b"]] == ["Likes dogs"]


@pytest.mark.parametrize("split", ["tune", "held_out"])
def test_the_labelled_set_loads_and_every_label_names_a_known_attribute(split: str) -> None:
    conversations = load_conversations(FIRST_HOUR / f"{split}.json")
    assert len(conversations) >= 15
    assert len({c.id for c in conversations}) == len(conversations)
    for c in conversations:
        scope = "persona_user" if c.persona else "user"
        for fact in c.facts:
            assert attribute_of(fact.key) != "other", (c.id, fact.key)
            assert fact.scope == scope, (c.id, fact.key)
            assert salient_words(fact.value), (c.id, fact.value)
