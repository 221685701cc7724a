"""Grounding (pure): how well the messages a candidate cites support its value.

An extractor, an LLM above all, can write an on-topic fact nobody stated ("home city": "I love
it!", a dog's name the user never gave, a date off by a month). Such a candidate is checked against
the texts it came from: the messages it cites, or the conversation's messages when it cites none.

The value's content words (stop words and the verbs every paraphrase adds — "is", "has",
"lives", "likes", "named" … — left out) are matched against the source's words after light
normalisation: case, accents, simple inflection ("allergic" / "allergy", "cycling" / "cycles"),
number words ("six" / "6", "cinq" / "5"), possessives, a few common synonyms ("film" / "movie").
Names and numbers weigh more than other words. The score is the supported share of that weight.

A value its cited messages do not support but the rest of the conversation does is kept as
partial: a model cites the wrong message more often than it invents what the conversation holds.
An English value about a conversation in another language (the prompt is English, the chat need
not be) can only be compared on its names and numbers; without any it is kept as partial.

Outcome (`GroundingOutcome`):
- `keep`: well supported;
- `partial`: some support; kept with a lowered confidence (`Grounding.confidence_factor`);
- `reject` (the worker's drop reason `ungrounded`), with a bounded `cause`:
  `filler` (no content word at all: "I love it!", "user", "yes", "N/A", "none", "not mentioned"),
  `unsupported` (score below the threshold, e.g. no content word in common),
  `number` (a number the source never says: "Pepper is 7" when the user said 12),
  `absence` (a value stating that something is absent — "No allergies" — where no source
  sentence about it is negated).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from store.rules.terms import STOPWORDS

__all__ = [
    "DEFAULT_GROUNDING",
    "PERSONA_GROUNDING",
    "Grounding",
    "GroundingCause",
    "GroundingConfig",
    "GroundingOutcome",
    "grounding",
]

GroundingOutcome = Literal["keep", "partial", "reject"]
GroundingCause = Literal["supported", "partial", "filler", "unsupported", "number", "absence"]


@dataclass(frozen=True, kw_only=True, slots=True)
class GroundingConfig:
    """Thresholds of the rule (bench/grounding.py tunes them on a labelled set)."""

    reject_below: float = 0.45  # supported share of the value's weight under which it is rejected
    keep_from: float = 0.5  # share from which it is kept as is; in between: partial
    entity_weight: float = 2.0  # a name or a number counts this many plain words
    topic_weight: float = 0.0  # a found value word the key also says ("allergic" under "allergy")
    reject_unsupported_numbers: bool = True
    partial_floor: float = 0.7  # a partial candidate's confidence factor at the lowest score
    miscited_partial: bool = True  # unsupported by its citations, supported by the transcript: partial
    # Under this share of English function words the source is taken to be in another language:
    # an English value (the prompt is English) is then judged on its names and numbers only.
    english_below: float = 0.12


DEFAULT_GROUNDING = GroundingConfig()
# A fact about the persona generalises over the conversation ("checks recipes for allergens")
# rather than restating it: it is rejected only with nothing at all in common (or as filler).
PERSONA_GROUNDING = GroundingConfig(reject_below=0.0)


@dataclass(frozen=True, kw_only=True, slots=True)
class Grounding:
    """The verdict on one candidate: outcome, a bounded cause, the score and the weights behind it."""

    outcome: GroundingOutcome
    cause: GroundingCause
    score: float  # supported share of the value's weight, 0–1
    content_words: int  # the value's content words (0: a filler value)
    supported_words: int
    confidence_factor: float = 1.0  # multiply the candidate's confidence by this (partial < 1)


# Words every paraphrase of a fact adds, and filler: no evidence either way.
_GENERIC_TEXT = """
    is are was were be been being am has have had having does do did doing get gets got
    live lives lived living reside resides work works worked working job
    like likes liked love loves loved enjoy enjoys enjoyed adore adores prefer prefers preferred
    want wants wanted wish wishes plan plans planned planning intend intends hope hopes
    would could should will shall might may must can
    take takes took taking make makes made go goes went going use uses used using
    name names named called call user users person someone people assistant speaker
    favorite favourite fav currently current usually often sometimes always really very also
    still just now recently lately longer anymore mostly mainly generally quite pretty bit lot lots
    year years old age aged time times thing things stuff something anything everything
    one ones great good nice fine cool awesome amazing wonderful best better ok okay yes yeah yep sure
    thanks thank please hello hi hey lovely fun
    none nothing nobody unknown mentioned specified stated provided given available applicable
    information info detail details data na n a yet true false null
    st nd rd th s t d m ll re ve
"""
_GENERIC = frozenset(_GENERIC_TEXT.split())
_NUMBER_WORDS = {
    # English and a few languages a chat may be in: "cinq ans" supports "five years"
    # "one", "first", "second" left out: "has one child" counts what "our son" says
    "zero": 0, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "twenty": 20, "thirty": 30,
    "hundred": 100, "third": 3, "fourth": 4, "fifth": 5, "twice": 2,
    "deux": 2, "trois": 3, "quatre": 4, "cinq": 5, "sept": 7, "huit": 8, "neuf": 9, "dix": 10,
    "dos": 2, "tres": 3, "cuatro": 4, "cinco": 5, "seis": 6, "siete": 7, "ocho": 8, "nueve": 9,
    "diez": 10, "dois": 2, "duas": 2, "quatro": 4, "sete": 7, "oito": 8, "nove": 9, "dez": 10,
    "zwei": 2, "drei": 3, "vier": 4, "funf": 5, "sechs": 6, "sieben": 7, "acht": 8, "neun": 9,
    "zehn": 10,
}  # fmt: skip
_SYNONYMS: tuple[frozenset[str], ...] = tuple(
    frozenset(group.split())
    for group in (
        "film movie cinema",
        "kid child children",
        "mom mum mother mommy mummy",
        "dad father daddy",
        "flat apartment",
        "bike bicycle",
        "tv television",
        "doctor physician",
        "car vehicle drive",
        "scifi sci fi",
        "married marriage husband wife spouse wedding honeymoon newlywed",
    )
)
_TOKEN = re.compile(r"\d+|[^\W\d_]+", re.UNICODE)
_NEGATION = re.compile(
    r"\b(?:no|not|never|none|nothing|without|neither|nor|cannot|can't|don't|doesn't|didn't|isn't|"
    r"aren't|wasn't|haven't|hasn't|won't|n't|ne|pas|jamais|nunca|nein|kein|keine|nao|não)\b",
    re.IGNORECASE,
)
# what ended counts as negated in a source: "I outgrew my peanut allergy" supports "no longer allergic"
_CESSATION = re.compile(
    r"\b(?:stopped|quit|gave up|given up|outgrew|outgrown|used to|anymore|any more|no longer|former|"
    r"ex|left|moved out|broke up|divorced|retired)\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]+")


def _fold(text: str) -> str:
    """Lower case without accents, typographic apostrophes made plain."""
    text = text.replace("’", "'").replace("‘", "'")
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()


def _stem(word: str) -> str:
    """A crude English stem: inflection and a final 'e' removed ("lives" / "living" → "liv")."""
    if word in _NUMBER_WORDS:
        return str(_NUMBER_WORDS[word])
    for suffixes in (
        (("ies", "y"), ("ches", "ch"), ("shes", "sh"), ("xes", "x"), ("s", "")),
        (("ing", ""), ("ed", ""), ("ly", "")),
    ):  # a plural first, then a verb or adverb ending: "siblings" → "sibling" → "sibl"
        for suffix, replacement in suffixes:
            if (
                word.endswith(suffix)
                and len(word) - len(suffix) >= 3
                and not word.endswith(("ss", "us", "is"))
            ):
                word = word[: len(word) - len(suffix)] + replacement
                break
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


_SYNONYM_OF = {_stem(word): min(_stem(w) for w in group) for group in _SYNONYMS for word in group}


def _synonym(stem: str) -> str:
    """One stem for a group of synonyms ("film" and "movie")."""
    return _SYNONYM_OF.get(stem, stem)


# A general word in a value is supported by a specific one in the source ("has one child" by "our
# son"), never the other way round ("son" is not supported by "daughter").
_GENERAL_OF = {
    general: frozenset(_synonym(_stem(w)) for w in specific.split())
    for general, specific in (
        ("child", "son daughter baby toddler"),
        ("sibl", "brother sister twin"),
        ("parent", "mother father mom mum dad"),
        ("pet", "dog cat puppy kitten goldfish fish parrot rabbit hamster lizard greyhound"),
    )
}
_DEMONYM = re.compile(r"(?:n|an|ian|ese|es|ish|i|er|ean)")  # "es": "Japanese" stemmed


@dataclass(frozen=True, slots=True)
class _Word:
    stem: str
    entity: bool  # a name (capitalised) or a number
    number: bool


def _words(text: str, *, names: frozenset[str] = frozenset()) -> list[_Word]:
    """Content words of `text`; a capitalised word is a name unless it opens the text and
    `names` (the source's capitalised words) does not hold it."""
    out: list[_Word] = []
    for index, match in enumerate(_TOKEN.finditer(text.replace("’", "'"))):
        raw = match.group()
        folded = _fold(raw)
        inside = raw[:1].isupper() and index > 0
        # a capitalised generic word inside a value is a name: "May" the month, not the verb
        if folded in STOPWORDS or (folded in _GENERIC and not inside):
            continue
        number = raw.isdigit() or folded in _NUMBER_WORDS
        entity = number or inside or (raw[:1].isupper() and folded in names)
        stem = str(int(raw)) if raw.isdigit() else _synonym(_stem(folded))
        out.append(_Word(stem=stem, entity=entity, number=number))
    return out


def _matches(word: str, source: str, *, exact: bool = False) -> bool:
    """Same stem or, for common words, a shared start: 5 letters, or a whole stem of at least
    4 letters that the other extends by at most 2 ("cycl" / "cycle", not "week" / "weekend").
    A name (`exact`) matches itself or its demonym only ("Canada" / "Canadian", not "Maria" /
    "Mariana")."""
    if word == source:
        return True
    if word.isdigit() or source.isdigit():
        return False
    shorter, longer = sorted((word, source), key=len)
    if exact:
        root = shorter[:-1] if shorter[-1] in "aeiouy" and len(shorter) > 4 else shorter
        return len(root) >= 4 and longer.startswith(root) and bool(_DEMONYM.fullmatch(longer[len(root) :]))
    if len(shorter) < 4:
        return False
    common = 0
    for a, b in zip(shorter, longer, strict=False):
        if a != b:
            break
        common += 1
    return common >= 5 or (common == len(shorter) and len(longer) - common <= 2)


def _supported(word: _Word, source: Iterable[str]) -> bool:
    specific = _GENERAL_OF.get(word.stem, frozenset())
    return any(_matches(word.stem, s, exact=word.entity and not word.number) or s in specific for s in source)


def _capitalised(texts: Sequence[str]) -> frozenset[str]:
    return frozenset(
        _fold(m.group()) for text in texts for m in _TOKEN.finditer(text) if m.group()[:1].isupper()
    )


def _negated_about(value_words: Sequence[_Word], texts: Sequence[str]) -> bool:
    """Some source sentence that shares a content word with the value is negated."""
    for text in texts:
        for sentence in _SENTENCE.findall(text.replace("’", "'")):
            if not (_NEGATION.search(sentence) or _CESSATION.search(sentence)):
                continue
            stems = [w.stem for w in _words(sentence)]
            if any(_supported(word, stems) for word in value_words):
                return True
    return False


def grounding(
    key: str,
    value: str,
    *,
    cited: Sequence[str],
    transcript: Sequence[str],
    config: GroundingConfig = DEFAULT_GROUNDING,
) -> Grounding:
    """How well `cited` (or, when it is empty, `transcript`) supports `value` under `key`.

    The key is never evidence (the extractor chose it); it only marks which of the value's words
    name the topic rather than the fact ("allergic" in "Is allergic to shellfish" under "allergy"),
    and those weigh less. With `config.miscited_partial`, a value its cited messages do not support
    but the transcript does is kept as partial: models cite the wrong message more often than they
    invent a fact the conversation holds."""
    if not cited:
        return _judge(key, value, transcript, config)
    by_citation = _judge(key, value, cited, config)
    if by_citation.outcome != "reject" or by_citation.cause == "filler" or not config.miscited_partial:
        return by_citation
    by_transcript = _judge(key, value, transcript, config)
    if by_transcript.outcome == "reject":
        return by_citation
    return replace(
        by_transcript,
        outcome="partial",
        cause="partial",
        confidence_factor=min(by_transcript.confidence_factor, config.partial_floor),
    )


def _english_share(texts: Iterable[str]) -> float:
    """Share of a text's words that are English function words (about 0.3–0.5 in English)."""
    words = [_fold(m.group()) for text in texts for m in _TOKEN.finditer(text) if not m.group().isdigit()]
    return sum(w in STOPWORDS for w in words) / len(words) if words else 0.0


def _judge(key: str, value: str, sources: Sequence[str], config: GroundingConfig) -> Grounding:
    value_words = _words(value, names=_capitalised(sources))
    if not value_words:
        return Grounding(outcome="reject", cause="filler", score=0.0, content_words=0, supported_words=0)
    if _english_share(sources) < config.english_below and _english_share((value,)) > 0:
        # an English paraphrase of another language: only names and numbers can be compared
        names = [w for w in value_words if w.entity]
        if not names:
            return Grounding(
                outcome="partial",
                cause="partial",
                score=0.0,
                content_words=len(value_words),
                supported_words=0,
                confidence_factor=config.partial_floor,
            )
        value_words = names
    source_stems = {w.stem for text in sources for w in _words(text)}
    key_stems = [w.stem for w in _words(key)]
    weight = supported_weight = 0.0
    supported = 0
    unsupported_number = False
    for word in value_words:
        found = _supported(word, source_stems)
        if word.entity:
            w = config.entity_weight
        elif found and any(_matches(word.stem, k) for k in key_stems):
            # the key names the topic, so finding its word proves little; missing it still counts
            w = config.topic_weight
        else:
            w = 1.0
        weight += w
        if found:
            supported_weight += w
            supported += 1
        elif word.number:
            unsupported_number = True
    # every word under a zero topic weight: the plain supported share decides
    score = supported_weight / weight if weight > 0 else supported / len(value_words)

    def verdict(outcome: GroundingOutcome, cause: GroundingCause, factor: float = 1.0) -> Grounding:
        return Grounding(
            outcome=outcome,
            cause=cause,
            score=score,
            content_words=len(value_words),
            supported_words=supported,
            confidence_factor=factor,
        )

    if unsupported_number and config.reject_unsupported_numbers:
        return verdict("reject", "number")
    if _NEGATION.search(_fold(value)) and not _negated_about(value_words, sources):
        return verdict("reject", "absence")
    if score < config.reject_below or supported == 0:
        return verdict("reject", "unsupported")
    if score < config.keep_from:
        span = max(config.keep_from - config.reject_below, 1e-9)
        factor = config.partial_floor + (1.0 - config.partial_floor) * (score - config.reject_below) / span
        return verdict("partial", "partial", min(1.0, factor))
    return verdict("keep", "supported")
