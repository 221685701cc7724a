"""RulesExtractor: the deterministic, offline FALLBACK extractor (`PMEM_EXTRACTOR=rules`).

It is not equal to an LLM and does not pretend to be. It reads only the USER's messages, one
sentence at a time, and recognises plain first-person statements with fixed patterns:

| statement                                   | key                      | confidence |
|---------------------------------------------|--------------------------|------------|
| "my name is X", "I'm called X"              | user name                | 0.9        |
| "call me X"                                 | preferred name           | 0.9        |
| "I live in X", "I moved to X"               | home location            | 0.85       |
| "I'm from X"                                | place of origin          | 0.8        |
| "I work as X", "I'm a <known job>"          | job title                | 0.8 / 0.75 |
| "I work at/for X"                           | current employer         | 0.8        |
| "I'm vegetarian/vegan/…"                    | diet preference          | 0.85       |
| "I don't eat X"                             | avoids X                 | 0.8        |
| "I'm allergic to X", "I have a X allergy"   | allergy X                | 0.9        |
| "I prefer X (over Y)"                       | prefers X                | 0.7        |
| "I love/like/enjoy X", "I hate/dislike X"   | likes X / dislikes X     | 0.65       |
| "my favourite X is Y"                       | favorite X               | 0.8        |
| "remember that …", "don't forget that …"    | note <first words>       | 0.8        |

Negations ("I don't live in …"), questions and hypotheticals ("if I …") are skipped; anything
subtler (facts spread over turns, implied preferences, assistant-confirmed facts) is missed.
Scope: `persona_user` when a persona is active, else `user`; never `persona`. Output goes through
the same redaction, validation and secret screening as the LLM's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from extraction.redact import redact
from extraction.types import ExtractionRequest, ExtractionResult
from extraction.validate import merged_and_screened, validate_items
from store.model import Scope
from store.rules.keys import normalize_key

__all__ = ["RulesExtractor", "extract_statements"]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_BASE_STOP = _words(
    "and but because since so with who which that where when while though although if or "
    "than until unless whereas near"
)
_ARTICLES = frozenset({"a", "an", "the", "my", "some"})
_PRONOUN_OBJECTS = _words("it that this them him her you your those these what which there here so when how")
_JOB_NOUNS = _words(
    """accountant actor actress analyst architect artist attorney baker barista biologist builder
    carpenter cashier chef chemist cleaner clerk coach consultant cook counselor counsellor dentist
    designer developer doctor driver economist editor electrician engineer entrepreneur farmer
    firefighter freelancer gardener geologist hairdresser historian illustrator instructor
    journalist judge lawyer lecturer librarian linguist manager mechanic midwife musician nurse
    officer painter paramedic pharmacist photographer physician physicist physiotherapist pilot
    plumber poet policeman professor programmer psychologist publisher receptionist researcher
    retiree sailor salesman saleswoman scientist secretary singer soldier student surgeon tailor
    teacher technician therapist translator tutor veterinarian vet waiter waitress writer
    administrator admin sysadmin intern founder ceo cto cfo owner"""
)
_DIETS = (
    r"vegetarian|vegan|pescatarian|pescetarian|gluten[- ]free|lactose[- ]intolerant|dairy[- ]free"
    r"|keto|halal|kosher|coeliac|celiac"
)
_SKIP_SENTENCE = re.compile(r"^\s*(?:if|when|whether|suppose|imagine|what if)\b|\?\s*$", re.IGNORECASE)
_SENTENCES = re.compile(r"[^.!?\n]+[.!?]*")


def _phrase(text: str, max_words: int, *, extra_stop: frozenset[str] = frozenset()) -> str | None:
    """Words from the start of `text` up to punctuation, a stop word, or `max_words`."""
    stop = _BASE_STOP | extra_stop
    words: list[str] = []
    for raw in text.split():
        ends = raw[-1] in ',;:!?.)"'
        word = raw.strip(",;:!?.()\"'")
        if not word or word.lower() in stop:
            break
        words.append(word)
        if ends or len(words) >= max_words:
            break
    return " ".join(words) or None


def _items(text: str, max_words: int) -> list[str]:
    """A list like "peanuts, shellfish and eggs" as separate items (each ≤ max_words words)."""
    first_clause = re.split(r"[.;:!?]|\bbut\b|\bbecause\b", text, maxsplit=1)[0]
    parts = re.split(r",|\band\b|\bor\b|\bnor\b", first_clause)
    items = []
    for part in parts:
        item = _phrase(part, max_words)
        if item:
            items.append(_strip_articles(item))
    return [item for item in items if item]


def _strip_articles(phrase: str) -> str:
    words = phrase.split()
    while words and words[0].lower() in _ARTICLES:
        words = words[1:]
    return " ".join(words)


def _key(*parts: str) -> str:
    """A normalised key from parts, keeping letters, digits, spaces, hyphens and apostrophes."""
    return normalize_key(re.sub(r"[^\w\s'-]", " ", " ".join(parts)))


def _titled(name: str) -> str:
    # Chat users often type names in lowercase; a name typed with capitals is kept as typed.
    return " ".join(w[:1].upper() + w[1:] for w in name.split()) if name.islower() else name


@dataclass(frozen=True, kw_only=True, slots=True)
class _Rule:
    pattern: re.Pattern[str]
    build: Callable[[re.Match[str]], list[tuple[str, str]]]  # -> [(key, value)]
    confidence: float


def _rule(
    pattern: str, confidence: float
) -> Callable[[Callable[[re.Match[str]], list[tuple[str, str]]]], _Rule]:
    def wrap(build: Callable[[re.Match[str]], list[tuple[str, str]]]) -> _Rule:
        return _Rule(pattern=re.compile(pattern, re.IGNORECASE), build=build, confidence=confidence)

    return wrap


_I_AM = r"\bi(?:'m| am)"


@_rule(r"\b(?:my name is|my name's|i'm called|i am called)\s+(.+)", 0.9)
def _name(m: re.Match[str]) -> list[tuple[str, str]]:
    name = _phrase(m.group(1), 3, extra_stop=frozenset({"not", "and", "by"}))
    if not name or name.lower() in _ARTICLES:
        return []
    return [("user name", f"Name is {_titled(name)}")]


_CALL_ME_NOT_A_NAME = _words(
    "back later tomorrow tonight when at if on asap anytime again now soon maybe please crazy "
    "anything whatever old a an the"
)


@_rule(r"(?:^|\b(?:please|just|you can|you may)\s+)call me\s+(.+)", 0.9)
def _call_me(m: re.Match[str]) -> list[tuple[str, str]]:
    name = _phrase(m.group(1), 2, extra_stop=frozenset({"from", "instead", "please"}))
    if not name or name.split()[0].lower() in _CALL_ME_NOT_A_NAME:
        return []
    return [("preferred name", f"Prefers to be called {_titled(name)}")]


@_rule(r"\bi (?:currently |now |still )?live in\s+(.+)", 0.85)
def _live(m: re.Match[str]) -> list[tuple[str, str]]:
    place = _phrase(m.group(1), 4, extra_stop=frozenset({"for", "now", "since", "at", "in"}))
    return [("home location", f"Lives in {place}")] if place else []


@_rule(r"\bi(?:'ve| have)? (?:just |recently )?moved to\s+(.+)", 0.85)
def _moved(m: re.Match[str]) -> list[tuple[str, str]]:
    place = _phrase(m.group(1), 4, extra_stop=frozenset({"for", "last", "in", "a", "this", "from"}))
    return [("home location", f"Moved to {place}")] if place else []


@_rule(_I_AM + r" (?:originally )?from\s+(.+)", 0.8)
def _from(m: re.Match[str]) -> list[tuple[str, str]]:
    place = _phrase(m.group(1), 4, extra_stop=frozenset({"but", "originally", "in", "the"}))
    return [("place of origin", f"Is from {place}")] if place else []


@_rule(r"\bi (?:currently )?work as\s+(.+)", 0.8)
def _work_as(m: re.Match[str]) -> list[tuple[str, str]]:
    job = _phrase(m.group(1), 5, extra_stop=frozenset({"at", "for", "in"}))
    return [("job title", f"Works as {job}")] if job and _strip_articles(job) else []


@_rule(r"\bi (?:currently )?work (?:at|for)\s+(.+)", 0.8)
def _work_at(m: re.Match[str]) -> list[tuple[str, str]]:
    employer = _phrase(m.group(1), 4, extra_stop=frozenset({"as", "in", "since", "for"}))
    return [("current employer", f"Works at {employer}")] if employer else []


@_rule(_I_AM + r" (an?\s+.+)", 0.75)
def _i_am_a(m: re.Match[str]) -> list[tuple[str, str]]:
    phrase = _phrase(m.group(1), 4, extra_stop=frozenset({"at", "for", "in", "from", "by", "who"}))
    if not phrase or phrase.split()[-1].lower().rstrip("s") not in _JOB_NOUNS:
        return []
    return [("job title", f"Is {phrase}")]


@_rule(_I_AM + r" (?:an? )?(?:strict |fully |mostly )?(" + _DIETS + r")\b", 0.85)
def _diet(m: re.Match[str]) -> list[tuple[str, str]]:
    return [("diet preference", f"Is {m.group(1).lower().replace(' ', '-')}")]


@_rule(r"\bi (?:don't|do not|never|can't|cannot|won't) eat\s+(.+)", 0.8)
def _avoids(m: re.Match[str]) -> list[tuple[str, str]]:
    return [(_key("avoids", item), f"Does not eat {item}") for item in _items(m.group(1), 3)]


@_rule(_I_AM + r" (?:very |severely |highly |quite |extremely )?allergic to\s+(.+)", 0.9)
def _allergic(m: re.Match[str]) -> list[tuple[str, str]]:
    return [(_key("allergy", item), f"Is allergic to {item}") for item in _items(m.group(1), 4)]


@_rule(r"\bi have an? (?:severe |serious |mild |bad )?([a-z][\w-]*(?: [a-z][\w-]*)?) allergy\b", 0.9)
def _allergy_noun(m: re.Match[str]) -> list[tuple[str, str]]:
    item = _strip_articles(m.group(1))
    return [(_key("allergy", item), f"Is allergic to {item}")] if item else []


@_rule(
    r"\bi (?:really |much |generally |usually |definitely |strongly )?prefer\s+(.+?)\s+"
    r"(?:over|to|rather than|instead of)\s+(.+)",
    0.7,
)
def _prefer_over(m: re.Match[str]) -> list[tuple[str, str]]:
    preferred, other = _phrase(m.group(1), 4), _phrase(m.group(2), 4)
    if not preferred or not other or preferred.split()[0].lower() in _PRONOUN_OBJECTS:
        return []
    topic = _strip_articles(preferred)
    return [(_key("prefers", topic), f"Prefers {preferred} over {other}")] if topic else []


@_rule(r"\bi (?:really |much |generally |usually |definitely |strongly )?prefer\s+(.+)", 0.7)
def _prefer(m: re.Match[str]) -> list[tuple[str, str]]:
    if re.search(r"\s(?:over|rather than|instead of)\s", m.group(1)):
        return []  # handled by the "over" rule
    preferred = _phrase(m.group(1), 4)
    if not preferred or preferred.split()[0].lower() in _PRONOUN_OBJECTS:
        return []
    topic = _strip_articles(preferred)
    return [(_key("prefers", topic), f"Prefers {preferred}")] if topic else []


_LIKES = {"love": "Loves", "like": "Likes", "enjoy": "Enjoys", "adore": "Adores"}
_DISLIKES = {"hate": "Hates", "dislike": "Dislikes", "can't stand": "Can't stand", "detest": "Detests"}


@_rule(
    r"\bi (?:really |absolutely |truly |do |just )?"
    r"(love|like|enjoy|adore|hate|dislike|can't stand|detest)\s+(.+)",
    0.65,
)
def _opinion(m: re.Match[str]) -> list[tuple[str, str]]:
    verb = m.group(1).lower()
    thing = _phrase(m.group(2), 4, extra_stop=frozenset({"about", "because", "in", "at", "on"}))
    if not thing or thing.split()[0].lower() in _PRONOUN_OBJECTS:
        return []
    topic = _strip_articles(thing)
    if not topic:
        return []
    if verb in _LIKES:
        return [(_key("likes", topic), f"{_LIKES[verb]} {thing}")]
    return [(_key("dislikes", topic), f"{_DISLIKES[verb]} {thing}")]


@_rule(r"\bi (?:don't|do not) (?:really )?(?:like|enjoy)\s+(.+)", 0.65)
def _not_like(m: re.Match[str]) -> list[tuple[str, str]]:
    thing = _phrase(m.group(1), 4, extra_stop=frozenset({"about", "in", "at", "on"}))
    if not thing or thing.split()[0].lower() in _PRONOUN_OBJECTS:
        return []
    topic = _strip_articles(thing)
    return [(_key("dislikes", topic), f"Does not like {thing}")] if topic else []


@_rule(r"\bmy (?:all[- ]time )?fav(?:ou?rite|e)?\s+(.+?)\s+(?:is|are)\s+(.+)", 0.8)
def _favourite(m: re.Match[str]) -> list[tuple[str, str]]:
    thing, value = _phrase(m.group(1), 3), _phrase(m.group(2), 5)
    if not thing or not value:
        return []
    return [(_key("favorite", thing), f"Favorite {thing.lower()} is {value}")]


_NOTE_STOP = _words(
    "i i'm me my we our you your a an the is are was were be to of in on at for and or that this it "
    "have has had do does will would should can could"
)


@_rule(
    r"^\s*(?:please\s+|pls\s+|can you\s+|could you\s+|always\s+)*"
    r"(?:remember|don't forget|do not forget)\s+(?:that\s+)?(.+)",
    0.8,
)
def _remember(m: re.Match[str]) -> list[tuple[str, str]]:
    fact = " ".join(m.group(1).split()).rstrip(".!")
    words = fact.split()[:40]
    content = [w for w in (re.sub(r"[^\w'-]", "", w).lower() for w in words) if w and w not in _NOTE_STOP]
    if len(content) < 1 or len(words) < 2:
        return []
    return [(_key("note", *content[:4]), f"Asked to remember: {' '.join(words)}")]


_RULES: tuple[_Rule, ...] = (
    _name,
    _call_me,
    _live,
    _moved,
    _from,
    _work_as,
    _work_at,
    _i_am_a,
    _diet,
    _avoids,
    _allergic,
    _allergy_noun,
    _prefer_over,
    _prefer,
    _opinion,
    _not_like,
    _favourite,
    _remember,
)


def _sentences(text: str) -> Iterator[str]:
    normalised = text.replace("’", "'").replace("‘", "'")
    for match in _SENTENCES.finditer(normalised):
        sentence = match.group().strip()
        if sentence and not _SKIP_SENTENCE.search(sentence):
            yield sentence


def extract_statements(text: str, scope: Scope, number: int | None = None) -> list[dict[str, object]]:
    """Raw contract items (key, value, confidence, scope, and with `number` the evidence: that
    message's number) for the statements found in one user message."""
    evidence = [number] if number is not None else []
    items: list[dict[str, object]] = []
    for sentence in _sentences(text):
        for rule in _RULES:
            for match in rule.pattern.finditer(sentence):
                for key, value in rule.build(match):
                    items.append(
                        {
                            "key": key,
                            "value": value,
                            "confidence": rule.confidence,
                            "scope": scope,
                            "evidence": evidence,
                        }
                    )
    return items


class RulesExtractor:
    """Offline `Extractor`: pattern rules over the user's messages (see the module docstring)."""

    async def extract(self, request: ExtractionRequest) -> ExtractionResult:
        """Apply the rules to the redacted user messages; validate, merge and screen the results."""
        scope: Scope = "persona_user" if "persona_user" in request.allowed_scopes else "user"
        items: list[dict[str, object]] = []
        redacted_count = 0
        for number, message in enumerate(request.messages, start=1):
            if message.role != "user":
                continue
            text, findings = redact(message.content)
            redacted_count += len(findings)
            items.extend(extract_statements(text, scope, number))
        valid, rejected = validate_items(items, request.allowed_scopes)
        candidates, unsafe = merged_and_screened(valid)
        return ExtractionResult(
            candidates=tuple(candidates),
            rejected=(*rejected, *unsafe),
            llm_calls=0,
            redacted_secrets=redacted_count,
        )

    async def close(self) -> None:
        """Nothing to release."""
