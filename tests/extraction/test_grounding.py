"""The grounding rule (pure): support of a candidate's value by the messages it cites."""

from __future__ import annotations

import pytest

from extraction.grounding import GroundingConfig, grounding


def verdict(key: str, value: str, *texts: str, cited: tuple[str, ...] = ()) -> str:
    return grounding(key, value, cited=cited, transcript=texts).outcome


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("diet preference", "Is vegan", "I'm vegan, have been for years."),
        ("diet preference", "Is vegetarian", "je suis végétarienne depuis 2019"),
        ("allergy", "Is allergic to peanuts", "I have a peanut allergy."),
        ("commute", "Cycles to work", "I go cycling to the office every day."),
        ("daughter's age", "Emma is turning 6", "My daughter Emma turns six next week."),
        ("birthday", "Wife's birthday is on May 3", "Remember that my wife's birthday is on May 3rd."),
        ("favorite genre", "Loves sci-fi films", "I'll watch any sci-fi movie."),
        ("marital status", "Is married", "My husband works nights."),
        ("home city", "Lives in Lyon", "J'habite à Lyon depuis cinq ans."),
        ("years in lyon", "Has lived in Lyon for five years", "J'habite à Lyon depuis cinq ans."),
        ("no pets", "Has no pets", "I don't have any pets, my flat is too small."),
        ("alcohol", "Does not drink alcohol", "Also, I don't drink alcohol."),
        ("home city", "lives in boston", "I live in Boston."),
    ],
)
def test_paraphrased_facts_are_kept(key: str, value: str, said: str) -> None:
    assert verdict(key, value, said) in ("keep", "partial")


@pytest.mark.parametrize(
    ("key", "value", "said", "cause"),
    [
        ("home city", "I love it!", "I live in Lisbon.", "filler"),
        ("pets", "user", "We have a cat.", "filler"),
        ("career", "yes", "Yes, I'm a nurse.", "filler"),
        ("kids", "N/A", "No kids yet.", "filler"),
        ("no pets", "none", "I have no pets.", "filler"),
        ("pets", "Not mentioned", "I live in Lisbon.", "filler"),
        ("dog", "Has a parrot named Kiwi", "We adopted a greyhound named Biscuit.", "unsupported"),
        ("home city", "Lives in Madrid", "I live in Lisbon.", "unsupported"),
        ("user name", "Name is Maria", "Sou a Mariana.", "unsupported"),
        ("cat age", "Pepper is 7 years old", "Pepper is 12 and rules the house.", "number"),
        ("daughter's birthday", "Birthday is on March 15", "Emma turns six on March 14th.", "number"),
        ("no allergies", "No allergies", "I'm allergic to penicillin and shellfish.", "absence"),
        ("food allergy", "Is allergic to shellfish", "I'm allergic to peanuts.", "unsupported"),
    ],
)
def test_invented_facts_are_rejected(key: str, value: str, said: str, cause: str) -> None:
    result = grounding(key, value, cited=(), transcript=(said,))
    assert (result.outcome, result.cause) == ("reject", cause)


def test_a_filler_value_has_no_content_words() -> None:
    result = grounding("hobby", "I love it!", cited=(), transcript=("I love chess.",))
    assert result.content_words == 0 and result.score == 0.0


def test_cited_messages_are_the_only_evidence_when_there_are_any() -> None:
    transcript = ("I live in Lisbon.", "My sister lives in Porto.")
    assert verdict("home city", "Lives in Lisbon", *transcript, cited=(transcript[0],)) == "keep"
    assert verdict("home city", "Lives in Porto", *transcript, cited=(transcript[0],)) == "reject"
    assert verdict("home city", "Lives in Porto", *transcript) == "keep"


def test_partial_support_keeps_the_candidate_with_a_lower_confidence() -> None:
    said = ("We adopted a rescue greyhound last spring.",)
    result = grounding("dog", "Adopted a greyhound from a shelter in Leeds", cited=(), transcript=said)
    assert result.outcome == "partial"
    assert 0.0 < result.confidence_factor < 1.0
    full = grounding("dog", "Adopted a rescue greyhound", cited=(), transcript=said)
    assert (full.outcome, full.confidence_factor) == ("keep", 1.0)


def test_a_name_must_match_exactly_while_a_common_word_may_inflect() -> None:
    assert verdict("user name", "Name is Mariana", "Sou a Mariana.") == "keep"
    assert verdict("user name", "Name is Maria", "Sou a Mariana.") == "reject"
    assert verdict("hobby", "Enjoys baking", "I bake bread every weekend.") == "keep"


def test_the_key_is_never_evidence() -> None:
    # a key that names a topic of the conversation does not ground an invented value
    assert verdict("favorite color", "Favorite color is blue", "My favorite color is green.") == "reject"
    assert verdict("lisbon", "Lives in Lisbon", "I work remotely.") == "reject"


def test_numbers_may_be_left_to_the_score() -> None:
    said = ("Pepper the cat is 12 and rules the house.",)
    lenient = GroundingConfig(reject_unsupported_numbers=False)
    assert grounding("cat age", "Pepper is 7 years old", cited=(), transcript=said, config=lenient).cause != "number"


def test_empty_sources_support_nothing() -> None:
    assert verdict("home city", "Lives in Lisbon") == "reject"
