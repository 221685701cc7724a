"""The grounding rule (pure): support of a candidate's value by the messages it cites."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extraction.grounding import GroundingConfig, grounding
from extraction.rules import RulesExtractor
from extraction.types import ExtractionRequest, TranscriptMessage


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


def test_cited_messages_come_first_and_the_transcript_only_rescues_as_partial() -> None:
    transcript = ("I live in Lisbon.", "My sister lives in Porto.")
    assert verdict("home city", "Lives in Lisbon", *transcript, cited=(transcript[0],)) == "keep"
    assert verdict("home city", "Lives in Porto", *transcript, cited=(transcript[0],)) == "partial"
    assert verdict("home city", "Lives in Porto", *transcript) == "keep"
    assert verdict("home city", "Lives in Madrid", *transcript, cited=(transcript[0],)) == "reject"
    strict = GroundingConfig(miscited_partial=False)
    result = grounding(
        "home city", "Lives in Porto", cited=transcript[:1], transcript=transcript, config=strict
    )
    assert result.outcome == "reject"


def test_partial_support_keeps_the_candidate_with_a_lower_confidence() -> None:
    said = ("We adopted a rescue greyhound last spring.",)
    config = GroundingConfig(reject_below=0.3, keep_from=0.6)
    result = grounding(
        "dog", "Adopted a greyhound from a shelter in Leeds", cited=(), transcript=said, config=config
    )
    assert result.outcome == "partial"
    assert config.partial_floor < result.confidence_factor < 1.0
    full = grounding("dog", "Adopted a rescue greyhound", cited=(), transcript=said, config=config)
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
    assert (
        grounding("cat age", "Pepper is 7 years old", cited=(), transcript=said, config=lenient).cause
        != "number"
    )


def test_empty_sources_support_nothing() -> None:
    assert verdict("home city", "Lives in Lisbon") == "reject"


# --- the rules extractor's candidates are grounded by construction: they must pass --------------

REPO = Path(__file__).resolve().parents[2]


def _sample_conversations() -> list[tuple[TranscriptMessage, ...]]:
    """The demo's conversations, and the user lines of the tests' events and rules examples."""
    out = []
    for name in ("conversations.jsonl", "followups.jsonl"):
        for line in (REPO / "cli" / "samples" / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                messages = json.loads(line)["messages"]
                out.append(tuple(TranscriptMessage(role=m["role"], content=m["content"]) for m in messages))
    lines: set[str] = set()
    for path in sorted((REPO / "tests" / "worker").glob("*.py")):
        lines.update(re.findall(r'conversation\(\s*f?"([^"]+)"', path.read_text(encoding="utf-8")))
    rules_tests = (REPO / "tests" / "extraction" / "test_extraction_rules.py").read_text(encoding="utf-8")
    lines.update(re.findall(r'^\s+\("([^"]+)", "[^"]*", "[^"]*"\)', rules_tests, re.MULTILINE))
    out.extend((TranscriptMessage(role="user", content=line),) for line in sorted(lines))
    return out


async def _rules_verdicts(messages: tuple[TranscriptMessage, ...]) -> list[tuple[str, str, str]]:
    request = ExtractionRequest(messages=messages, allowed_scopes=("user",))
    result = await RulesExtractor().extract(request)
    users = [m.content for m in messages if m.role == "user"]
    return [
        (c.key, c.value, grounding(c.key, c.value, cited=(), transcript=users).outcome)
        for c in result.candidates
    ]


async def test_the_rules_extractor_passes_on_the_sample_conversations() -> None:
    conversations = _sample_conversations()
    assert len(conversations) > 40  # the collection found the tests' events
    verdicts = [v for messages in conversations for v in await _rules_verdicts(messages)]
    assert len(verdicts) > 40
    assert [v for v in verdicts if v[2] != "keep"] == []


_NAMES = st.sampled_from(
    ["Lisbon", "Oslo", "New York", "Quito", "Anna", "Bob", "Kraków", "São Paulo", "Lyon"]
)
_THINGS = st.sampled_from(["peanuts", "hiking", "jazz", "spicy food", "tea", "board games", "cats", "latex"])
_TEMPLATES = st.sampled_from(
    [
        "I live in {name}.",
        "my name is {name}",
        "I'm from {name}, originally.",
        "I work at {name} as a clerk.",
        "I'm allergic to {thing}.",
        "I really love {thing}!",
        "I hate {thing}.",
        "I don't eat {thing}.",
        "I prefer {thing} over {other}.",
        "My favourite hobby is {thing}.",
        "Remember that I meet {name} every Friday.",
    ]
)


@given(template=_TEMPLATES, name=_NAMES, thing=_THINGS, other=_THINGS)
@settings(max_examples=150, deadline=None)
def test_the_rules_extractors_statements_are_kept(template: str, name: str, thing: str, other: str) -> None:
    text = template.format(name=name, thing=thing, other=other)
    verdicts = asyncio.run(_rules_verdicts((TranscriptMessage(role="user", content=text),)))
    assert [v for v in verdicts if v[2] != "keep"] == []


def test_an_english_value_about_another_language_is_judged_on_names_and_numbers() -> None:
    said = ("Ich heiße Jonas und arbeite als Bäcker in Hamburg, jeden Samstag auf dem Markt.",)
    assert verdict("job title", "Is a baker", *said) == "partial"  # cannot be compared: kept
    assert verdict("home city", "Lives in Hamburg", *said) == "keep"
    assert verdict("home city", "Lives in Munich", *said) == "reject"
    assert verdict("hobby", "I love it!", *said) == "reject"


def test_a_value_its_citation_misses_but_the_transcript_holds_is_partial() -> None:
    transcript = ("I fish every weekend.", "My grandson comes along sometimes.")
    result = grounding(
        "grandson", "Goes fishing with his grandson", cited=(transcript[1],), transcript=transcript
    )
    assert result.outcome == "partial"
    assert result.confidence_factor == GroundingConfig().partial_floor
    strict = GroundingConfig(miscited_partial=False)
    assert (
        grounding(
            "grandson",
            "Goes fishing with his grandson",
            cited=(transcript[1],),
            transcript=transcript,
            config=strict,
        ).outcome
        == "reject"
    )


def test_a_key_word_the_source_lacks_still_counts_against_the_value() -> None:
    said = ("I'm allergic to shellfish.",)
    assert verdict("peanut allergy", "Is allergic to peanuts", *said) == "reject"
    assert verdict("shellfish allergy", "Is allergic to shellfish", *said) == "keep"
    outgrown = ("The doctor says I outgrew my peanut allergy.",)
    assert verdict("peanut allergy", "Is no longer allergic to peanuts", *outgrown) == "keep"
