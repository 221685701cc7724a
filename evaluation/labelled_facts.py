"""Scoring an extractor against conversations labelled with the facts a careful person would note
(pure; `bench/rules_extractor.py` runs it on `bench/data/first_hour/`).

A labelled fact and an extracted candidate match when they have the same scope, their keys name
the same attribute (`attribute_of`: "home location", "lives in" and "city" are all `home`), they
agree on polarity (`is_negative`: "Loves jazz" and "Hates jazz" are different facts), and the
candidate's value holds every salient word of the label's value (`salient_words`: "Lives in
Manchester" → {manchester}). Recall is the share of labels some candidate matches; precision the
share of candidates that match some label (two candidates restating one fact both count as right).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from extraction.types import TranscriptMessage
from store.model import Scope

__all__ = [
    "CATEGORIES",
    "Counts",
    "ExtractedFact",
    "LabelledConversation",
    "LabelledFact",
    "SplitScore",
    "attribute_of",
    "category_of",
    "fact_matches",
    "is_negative",
    "load_conversations",
    "salient_words",
    "score_split",
]

_WORD = re.compile(r"[a-z0-9]+(?:[:'][a-z0-9]+)*")


def _stem(word: str) -> str:
    """Lower case, no possessive, no plural "s" ("Tuesdays" and "tuesday" are one word)."""
    word = word.lower().removesuffix("'s")
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _stems(text: str) -> list[str]:
    return [_stem(w) for w in _WORD.findall(text.lower().replace("’", "'"))]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _stem_set(words: str) -> frozenset[str]:
    return frozenset(_stem(w) for w in words.split())


# Checked in this order: the first attribute one of whose words the key holds names it, so that
# "likes dogs" and "dislikes mornings" are preferences, "dog's name" is a pet's, "sister's home" a
# family fact and "work schedule" a schedule.
_ATTRIBUTE_WORDS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "preference",
        _stem_set("likes loves enjoys adores dislikes hates detests favorite favourite prefers hobby"),
    ),
    ("pet", _stem_set("pet dog cat puppy kitten parrot rabbit hamster horse tortoise turtle budgie")),
    (
        "family",
        _stem_set(
            "family sister brother sibling wife husband partner spouse son daughter kid child children "
            "mother mom mum father dad parent grandmother grandfather grandma grandpa girlfriend "
            "boyfriend baby"
        ),
    ),
    ("name", _stem_set("name called nickname")),
    (
        "schedule",
        _stem_set(
            "schedule routine every weekly daily weekday weekend monday tuesday wednesday thursday "
            "friday saturday sunday morning evening night shift hours day off commute"
        ),
    ),
    (
        "food",
        _stem_set(
            "diet vegetarian vegan allergy allergic avoids eat eats food drink drinks coffee tea "
            "alcohol wine beer meat dairy sugar"
        ),
    ),
    ("work", _stem_set("job title occupation profession employer work works company role career")),
    ("home", _stem_set("home location lives live city residence based moved address")),
    ("origin", _stem_set("origin from hometown born")),
)

# The categories a score is reported by, and the attributes each holds.
CATEGORIES: Mapping[str, tuple[str, ...]] = {
    "name": ("name",),
    "home/city": ("home", "origin"),
    "food/drink": ("food",),
    "schedule": ("schedule",),
    "pets": ("pet",),
    "likes/dislikes": ("preference",),
    "work": ("work",),
    "family": ("family",),
    "other": ("other",),
}

_NEGATIONS = _words(
    "not no never don't doesn't dont doesnt didn't can't cannot cant won't isn't quit stopped without "
    "avoid avoids dislike dislikes hate hates detest detests"
)
# Words any phrasing of a fact adds around what it is about ("Lives in", "Works as a", "Drinks").
_NOT_SALIENT = _stem_set(
    "a an the in on at to of for and or but with as by into up very so too much lot way my our his "
    "her their it its that this these those i me is are am be being was has have had lives live "
    "living works likes like loves love enjoys enjoy adores adore hates hate dislikes dislike "
    "prefers prefer drinks drink eats eat eating named called name from based moved goes go really "
    "only just usually mostly always also"
) | frozenset(_stem(w) for w in _NEGATIONS)


def attribute_of(key: str) -> str:
    """The attribute a key names (`name`, `home`, `origin`, `food`, `schedule`, `pet`,
    `preference`, `work`, `family`), or `other`."""
    words = set(_stems(key))
    for attribute, markers in _ATTRIBUTE_WORDS:
        if words & markers:
            return attribute
    return "other"


def category_of(key: str) -> str:
    """The reporting category (a key of `CATEGORIES`) of a key's attribute."""
    attribute = attribute_of(key)
    return next(name for name, attributes in CATEGORIES.items() if attribute in attributes)


def is_negative(key: str, value: str) -> bool:
    """Whether a fact states an avoidance or dislike ("No coffee", "dislikes early flights")."""
    return any(w in _NEGATIONS for w in _WORD.findall(f"{key} {value}".lower().replace("’", "'")))


def salient_words(value: str) -> frozenset[str]:
    """The words of a value that carry the fact, stemmed ("Lives in Manchester" → {manchester})."""
    return frozenset(w for w in _stems(value) if w not in _NOT_SALIENT)


@dataclass(frozen=True, kw_only=True, slots=True)
class LabelledFact:
    """A fact a careful person would note about the user."""

    key: str
    value: str
    scope: Scope


@dataclass(frozen=True, kw_only=True, slots=True)
class ExtractedFact:
    """What an extractor proposed (a candidate's key, value and scope)."""

    key: str
    value: str
    scope: Scope


@dataclass(frozen=True, kw_only=True, slots=True)
class LabelledConversation:
    """One conversation with its labelled facts; `persona` is the active persona's name, if any."""

    id: str
    persona: str | None
    messages: tuple[TranscriptMessage, ...]
    names: tuple[str, ...]
    facts: tuple[LabelledFact, ...]


def fact_matches(label: LabelledFact, extracted: ExtractedFact) -> bool:
    """Same scope, attribute and polarity, and the extracted value holds the label's salient words."""
    return (
        label.scope == extracted.scope
        and attribute_of(label.key) == attribute_of(extracted.key)
        and is_negative(label.key, label.value) == is_negative(extracted.key, extracted.value)
        and salient_words(label.value) <= frozenset(_stems(extracted.value))
    )


@dataclass(kw_only=True, slots=True)
class Counts:
    """Labels found out of labels, candidates right out of candidates."""

    labels: int = 0
    labels_found: int = 0
    extracted: int = 0
    extracted_right: int = 0

    @property
    def recall(self) -> float | None:
        """Share of labels found (None without labels)."""
        return self.labels_found / self.labels if self.labels else None

    @property
    def precision(self) -> float | None:
        """Share of candidates that match a label (None without candidates)."""
        return self.extracted_right / self.extracted if self.extracted else None

    def as_dict(self) -> dict[str, Any]:
        """The counts with recall and precision, for a JSON report."""
        return {
            "labels": self.labels,
            "labels_found": self.labels_found,
            "extracted": self.extracted,
            "extracted_right": self.extracted_right,
            "recall": self.recall,
            "precision": self.precision,
        }


@dataclass(kw_only=True, slots=True)
class SplitScore:
    """Totals, per-category counts, and per conversation what was missed and what was wrong."""

    total: Counts = field(default_factory=Counts)
    by_category: dict[str, Counts] = field(default_factory=lambda: {name: Counts() for name in CATEGORIES})
    missed: dict[str, list[LabelledFact]] = field(default_factory=dict)
    wrong: dict[str, list[ExtractedFact]] = field(default_factory=dict)


def score_split(
    conversations: Sequence[LabelledConversation], extracted: Mapping[str, Sequence[ExtractedFact]]
) -> SplitScore:
    """Recall and precision of `extracted` (by conversation id) against the labels."""
    score = SplitScore()
    for conversation in conversations:
        found = extracted.get(conversation.id, ())
        for label in conversation.facts:
            hit = any(fact_matches(label, candidate) for candidate in found)
            for counts in (score.total, score.by_category[category_of(label.key)]):
                counts.labels += 1
                counts.labels_found += hit
            if not hit:
                score.missed.setdefault(conversation.id, []).append(label)
        for candidate in found:
            right = any(fact_matches(label, candidate) for label in conversation.facts)
            for counts in (score.total, score.by_category[category_of(candidate.key)]):
                counts.extracted += 1
                counts.extracted_right += right
            if not right:
                score.wrong.setdefault(conversation.id, []).append(candidate)
    return score


def _conversation(raw: Mapping[str, Any]) -> LabelledConversation:
    messages = tuple(TranscriptMessage(role=m["role"], content=m["content"]) for m in raw["messages"])
    names = tuple(dict.fromkeys(m["name"] for m in raw["messages"] if m.get("name")))
    facts = tuple(LabelledFact(key=f["key"], value=f["value"], scope=f["scope"]) for f in raw["facts"])
    return LabelledConversation(
        id=raw["id"], persona=raw.get("persona"), messages=messages, names=names, facts=facts
    )


def load_conversations(path: Path) -> tuple[LabelledConversation, ...]:
    """The labelled conversations of one split file (`{"conversations": [...]}`)."""
    raw = json.loads(path.read_text())
    return tuple(_conversation(c) for c in raw["conversations"])
