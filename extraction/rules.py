"""RulesExtractor: the deterministic, offline FALLBACK extractor (`PMEM_EXTRACTOR=rules`).

It is not equal to an LLM and does not pretend to be. It reads only the USER's messages, one
sentence at a time, and recognises plain first-person statements with fixed patterns:

| statement                                                   | key                    | conf.   |
|-------------------------------------------------------------|------------------------|---------|
| "my name is X", "I'm called X", "I'm Priya.", "name's X"    | user name              | 0.85–0.9 |
| "Maya here."                                                | user name              | 0.8     |
| "call me X"                                                 | preferred name         | 0.9     |
| "I/we live in X", "based in X", "I/we moved to X"           | home location          | 0.85    |
| "I'm from X"                                                | place of origin        | 0.8     |
| "I work as X", "I'm a <known job> (at Y)"                   | job title, employer    | 0.75–0.8 |
| "I work at/for X"                                           | current employer       | 0.8     |
| "I'm vegetarian/vegan/diabetic/…"                           | diet preference        | 0.85    |
| "I don't eat/drink X", "I quit X", "I can't have X", "No X" | avoids X               | 0.75–0.8 |
| "I (only) drink X", "No X, Y only"                          | drinks                 | 0.7–0.75 |
| "I'm allergic to X", "… and allergic to X", "X allergy"     | allergy X              | 0.85–0.9 |
| "I have asthma", "I suffer from migraines", "I'm pregnant"  | health <condition>     | 0.85    |
| "every Tuesday I …", "I run on Mondays", "I'm off on Fridays" | routine <days>       | 0.7     |
| "my hours are …"                                            | working hours          | 0.75    |
| "my dog Biscuit", "our cat is called Miso", "a dog named Luna" | pet <animal> <name> | 0.85    |
| "my wife Anna", "my sister lives in X", "… she's a doctor"  | <relative>'s name/home/job | 0.75–0.8 |
| "I have two kids", "I live with my partner"                 | children, lives with … | 0.8     |
| "I prefer X (over Y)"                                       | prefers X              | 0.7     |
| "I love/like/enjoy/hate X", "I'm (not) into X", "not a X person" | likes / dislikes X | 0.65  |
| "my favourite X is Y"                                       | favorite X             | 0.8     |
| "remember that …", "don't forget that …"                    | note <first words>     | 0.8     |

Every value is the user's own words behind a short predicate ("Lives in", "Has a dog named"),
so the grounding check finds it in the message: the extractor never invents. Questions (unless
they open with a statement: "I love Thai food, any recipes?"), hypotheticals and wishes ("if I …",
"I'd …", "I wish …"), negations ("I don't live in …", "I'm not vegan") and other people's facts
("my brother loves hockey") are skipped, except where the negation is the fact ("I don't eat
meat") and a relative's fact is told as theirs ("Sister lives in Lyon"). A sentence is read clause
by clause where a new first-person clause starts ("I'm Kenji, I live in Osaka"). Anything subtler
(facts spread over turns, "I live there", implied preferences, assistant-confirmed facts) is
missed.

Scope: facts about the person — name, home, work, diet, allergies, health ("I have asthma", "I'm
pregnant"), family and pets — are `user` facts (true whichever assistant hears them, so every persona
of the team sees them); preferences, routines and notes are `persona_user` when a persona is active,
else `user`; never `persona`. Output goes through
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
_DASHES = frozenset({"-", "–", "—", "--"})
_SUBJECTS = frozenset({"i", "i'm", "it", "it's", "he", "she", "they", "we", "you", "that", "this"})
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
    administrator admin sysadmin intern founder ceo cto cfo owner paralegal practitioner assistant
    dietitian optician postman courier"""
)
_DIETS = (
    r"vegetarian|vegan|pescatarian|pescetarian|gluten[- ]free|lactose[- ]intolerant|dairy[- ]free"
    r"|keto|halal|kosher|coeliac|celiac|diabetic"
)
_HYPOTHETICAL = re.compile(r"^\s*(?:if|when|whether|suppose|supposing|imagine|what if)\b", re.IGNORECASE)
# a clause that is wished for or conditional rather than so ("I'd eat croissants", "I wish I lived")
_IRREALIS = re.compile(r"(?<![\w'-])(?:would|could|might|wish|i'd|we'd)(?![\w'-])", re.IGNORECASE)
_QUESTION_OPENS_WITH_STATEMENT = re.compile(r"^\s*(?:i|i'm|my|we|our)\b", re.IGNORECASE)
_SENTENCES = re.compile(r"[^.!?\n]+[.!?]*")
# Chat spelling of the contractions the patterns read ("im", "dont"): read as the contraction.
_BARE_CONTRACTIONS = {
    "im": "i'm",
    "ive": "i've",
    "dont": "don't",
    "doesnt": "doesn't",
    "cant": "can't",
    "wont": "won't",
    "didnt": "didn't",
}
_BARE_CONTRACTION = re.compile(r"(?<![\w'-])(" + "|".join(_BARE_CONTRACTIONS) + r")(?![\w'-])", re.IGNORECASE)


def _phrase(text: str, max_words: int, *, extra_stop: frozenset[str] = frozenset()) -> str | None:
    """Words from the start of `text` up to punctuation, a stop word, or `max_words`."""
    stop = _BASE_STOP | extra_stop
    words: list[str] = []
    for raw in text.split():
        if raw in _DASHES:
            break  # "I love traveling - it's a way to learn": what follows is a comment
        ends = raw[-1] in ',;:!?.)"'
        word = raw.strip(",;:!?.()\"'")
        if not word or word.lower() in stop:
            break
        words.append(word)
        if ends or len(words) >= max_words:
            break
    return " ".join(words) or None


def _items(text: str, max_words: int, *, extra_stop: frozenset[str] = frozenset()) -> list[str]:
    """A list like "peanuts, shellfish and eggs" as separate items (each ≤ max_words words)."""
    first_clause = re.split(r"[.;:!?]|(?<![\w'-])(?:but|because)(?![\w'-])", text, maxsplit=1)[0]
    parts = re.split(r",|(?<![\w'-])(?:and|or|nor)(?![\w'-])", first_clause)
    items = []
    for part in parts:
        if part.split() and part.split()[0].lower() in _SUBJECTS:
            break  # "red wine, it gives me headaches": a new clause, not the list going on
        item = _phrase(part, max_words, extra_stop=extra_stop)
        if item:
            items.append(_strip_articles(item))
    return [item for item in items if item]


def _has_content(phrase: str) -> bool:
    """Whether a phrase says something beyond articles, pronouns and joining words."""
    return any(w.lower() not in _ARTICLES | _BASE_STOP | _PRONOUN_OBJECTS for w in phrase.split())


def _strip_articles(phrase: str) -> str:
    words = phrase.split()
    while words and words[0].lower() in _ARTICLES:
        words = words[1:]
    return " ".join(words)


def _key(*parts: str) -> str:
    """A normalised key from parts, keeping letters, digits, spaces, hyphens and apostrophes."""
    return normalize_key(re.sub(r"[^\w\s'-]", " ", " ".join(parts)))


def _a_letter_in_lowercase(name: str) -> bool:
    # "my name is m" is more likely a slip than a name; "call me J" is kept
    return len(name) == 1 and name.islower()


def _titled(name: str) -> str:
    # Chat users often type names in lowercase; a name typed with capitals is kept as typed.
    return " ".join(w[:1].upper() + w[1:] for w in name.split()) if name.islower() else name


@dataclass(frozen=True, kw_only=True, slots=True)
class _Rule:
    pattern: re.Pattern[str]
    build: Callable[[re.Match[str]], list[tuple[str, str]]]  # -> [(key, value)]
    confidence: float
    # a fact about the person — name, home, work, diet, allergies, health, family and household —
    # is true whichever assistant hears it: filed in `user` scope so every persona of the team
    # sees it; preferences, routines and notes stay in the conversation's own scope
    about_the_person: bool = False


def _rule(
    pattern: str, confidence: float, *, about_the_person: bool = False
) -> Callable[[Callable[[re.Match[str]], list[tuple[str, str]]]], _Rule]:
    def wrap(build: Callable[[re.Match[str]], list[tuple[str, str]]]) -> _Rule:
        return _Rule(
            pattern=re.compile(pattern, re.IGNORECASE),
            build=build,
            confidence=confidence,
            about_the_person=about_the_person,
        )

    return wrap


_I_AM = r"\bi(?:'m| am)"


@_rule(r"\b(?:my name is|my name's|i'm called|i am called)\s+(.+)", 0.9, about_the_person=True)
def _name(m: re.Match[str]) -> list[tuple[str, str]]:
    name = _phrase(m.group(1), 3, extra_stop=frozenset({"not", "and", "by"}))
    if not name or name.lower() in _ARTICLES or _a_letter_in_lowercase(name):
        return []
    return [("user name", f"Name is {_titled(name)}")]


# Words that follow "I'm" capitalised without being a name: nationalities and the like, and
# sentence words a user may capitalise ("I'm Fine", "I'm Back").
_NOT_A_NAME = _words(
    """fine good great ok okay sorry back here home done ready sure new not just so also still
    actually currently really very happy tired busy free afraid glad in on at from with off out
    american british english french german italian spanish irish scottish welsh dutch swiss
    canadian australian indian chinese japanese korean polish russian brazilian mexican
    portuguese greek turkish swedish norwegian danish finnish african european asian muslim
    jewish christian catholic hindu buddhist vegan vegetarian i same right over nothing everything
    someone anyone nobody sitting stuck me look looky come get stay sit wait hang right"""
)
_NAME_PART = r"[A-Z][a-z]+(?:['-][A-Za-z][a-z]+)*"  # "Priya", "Mary-Jane", "O'Brien"
_CAPITALISED_NAME = re.compile(_NAME_PART + r"(?: " + _NAME_PART + r")?")


def _given_name(text: str) -> str | None:
    """A name as typed at the start of `text` ("Priya", "Amara Okafor"), capitalised, or None."""
    match = _CAPITALISED_NAME.match(text)
    if not match:
        return None
    words = [w for w in match.group().split() if w.lower() not in _NOT_A_NAME]
    if not words or words != match.group().split()[: len(words)] or words[0].lower() in _NOT_A_NAME:
        return None
    return " ".join(words)


@_rule(
    r"^(?:(?:hi|hello|hey|helo|hiya|ok|lol|so)\b[\W_]*)*(?:i'm|i am)\s+(\S.*)", 0.85, about_the_person=True
)
def _i_am_name(m: re.Match[str]) -> list[tuple[str, str]]:
    # Only at the start of a sentence and only a capitalised word that ends the clause: "I'm
    # Priya." or "I'm Kenji, I live…" name the user; "I'm Italian" and "I'm so tired" do not.
    rest = m.group(1)
    name = _given_name(rest)
    if not name or not re.match(re.escape(name) + r"\s*(?:[,.!;:)]|$|\s+(?:and|from|here|btw)\b)", rest):
        return []
    return [("user name", f"Name is {name}")]


@_rule(r"^(?:(?:hi|hello|hey|hiya)\b[\W_]*)*(?:the )?name's\s+(\S.*)", 0.85, about_the_person=True)
def _names(m: re.Match[str]) -> list[tuple[str, str]]:
    name = _phrase(m.group(1), 2, extra_stop=frozenset({"not", "by", "btw", "here"}))
    if not name or name.split()[0].lower() in _NOT_A_NAME:
        return []
    return [("user name", f"Name is {_titled(name)}")]


@_rule(r"^(?:(?:hi|hello|hey|hiya)\b[\W_]*)*([A-Z][\w'-]*) here[.!]*$", 0.8, about_the_person=True)
def _here(m: re.Match[str]) -> list[tuple[str, str]]:
    # "Maya here." introduces the writer; the capital letter is checked as typed
    name = _given_name(m.group(1))
    return [("user name", f"Name is {name}")] if name and name == m.group(1) else []


_CALL_ME_NOT_A_NAME = _words(
    "back later tomorrow tonight when at if on asap anytime again now soon maybe please crazy "
    "anything whatever old a an the"
)


@_rule(r"(?:^|\b(?:please|just|you can|you may)\s+)call me\s+(.+)", 0.9, about_the_person=True)
def _call_me(m: re.Match[str]) -> list[tuple[str, str]]:
    name = _phrase(m.group(1), 2, extra_stop=frozenset({"from", "instead", "please"}))
    if not name or name.split()[0].lower() in _CALL_ME_NOT_A_NAME or _a_letter_in_lowercase(name):
        return []
    return [("preferred name", f"Prefers to be called {_titled(name)}")]


_PLACE_STOP = frozenset({"for", "now", "since", "at", "in", "anymore", "too", "with", "near"})


@_rule(r"\b(?:i|we) (?:currently |now |still )?live in\s+(.+)", 0.85, about_the_person=True)
def _live(m: re.Match[str]) -> list[tuple[str, str]]:
    place = _phrase(m.group(1), 4, extra_stop=_PLACE_STOP)
    return [("home location", f"Lives in {place}")] if place else []


@_rule(
    r"\b(?:i'm|i am|we're|we are) (?:currently |now )?(?:based|living) in\s+(.+)", 0.85, about_the_person=True
)
def _based(m: re.Match[str]) -> list[tuple[str, str]]:
    place = _phrase(m.group(1), 4, extra_stop=_PLACE_STOP)
    return [("home location", f"Based in {place}")] if place else []


@_rule(r"\b(?:i|we)(?:'ve| have)? (?:just |recently )?moved to\s+(.+)", 0.85, about_the_person=True)
def _moved(m: re.Match[str]) -> list[tuple[str, str]]:
    place = _phrase(
        m.group(1), 4, extra_stop=frozenset({"for", "last", "in", "a", "this", "from", "two", "with"})
    )
    return [("home location", f"Moved to {place}")] if place else []


@_rule(_I_AM + r" (?:originally )?from\s+(.+)", 0.8, about_the_person=True)
def _from(m: re.Match[str]) -> list[tuple[str, str]]:
    place = _phrase(m.group(1), 4, extra_stop=frozenset({"but", "originally", "in", "the"}))
    return [("place of origin", f"Is from {place}")] if place else []


def _employer(text: str) -> list[tuple[str, str]]:
    """The employer named by "at X" / "for X" right after a job ("…nurse at St Mary's")."""
    match = re.match(r"\s*(?:at|for)\s+(.+)", text, re.IGNORECASE)
    if not match:
        return []
    employer = _phrase(match.group(1), 4, extra_stop=frozenset({"as", "in", "since", "for", "now"}))
    return [("current employer", f"Works at {employer}")] if employer and _strip_articles(employer) else []


@_rule(r"\bi (?:currently )?work as\s+(.+)", 0.8, about_the_person=True)
def _work_as(m: re.Match[str]) -> list[tuple[str, str]]:
    job = _phrase(m.group(1), 5, extra_stop=frozenset({"at", "for", "in"}))
    if not job or not _strip_articles(job):
        return []
    after = m.group(1)[m.group(1).find(job) + len(job) :]
    return [("job title", f"Works as {job}"), *_employer(after)]


@_rule(r"\bi (?:currently )?work (?:at|for)\s+(.+)", 0.8, about_the_person=True)
def _work_at(m: re.Match[str]) -> list[tuple[str, str]]:
    employer = _phrase(m.group(1), 4, extra_stop=frozenset({"as", "in", "since", "for"}))
    return [("current employer", f"Works at {employer}")] if employer else []


@_rule(_I_AM + r" (?:actually |currently |now |also |still )?(\S.*)", 0.75, about_the_person=True)
def _i_am_a(m: re.Match[str]) -> list[tuple[str, str]]:
    # the article may be missing ("I am engineer at Siemens"): the job noun decides
    phrase = _phrase(m.group(1), 4, extra_stop=frozenset({"at", "for", "in", "from", "by", "who", "with"}))
    if not phrase or phrase.split()[0].lower() in _NEGATIONS:
        return []
    if phrase.split()[-1].lower().rstrip("s") not in _JOB_NOUNS:
        return []
    after = m.group(1)[m.group(1).find(phrase) + len(phrase) :]
    return [("job title", f"Is {phrase}"), *_employer(after)]


@_rule(_I_AM + r" (?:an? )?(?:strict |fully |mostly )?(" + _DIETS + r")\b", 0.85, about_the_person=True)
def _diet(m: re.Match[str]) -> list[tuple[str, str]]:
    return [("diet preference", f"Is {m.group(1).lower().replace(' ', '-')}")]


_NEGATIONS = _words("not no never don't doesn't can't cannot won't didn't isn't")
# Words that end what is avoided: "meat anymore", "fish either", "coffee after noon"
_FOOD_STOP = frozenset(
    {"anymore", "either", "now", "any", "more", "much", "after", "before", "at", "on", "during"}
)
# A qualifier that changes what is avoided ("coffee after noon" is not "coffee"): kept in the value.
_QUALIFIER = re.compile(r"\s*((?:after|before|at|on|during) [\w:'-]+(?: [\w:'-]+)?)", re.IGNORECASE)


def _avoided(text: str, verb: str) -> list[tuple[str, str]]:
    """One "avoids X" fact per item of `text`, the qualifier of a single item kept in the value."""
    items = _items(text, 3, extra_stop=_FOOD_STOP)
    if len(items) == 1:
        head = (
            text[text.lower().find(items[0].lower()) + len(items[0]) :]
            if items[0].lower() in text.lower()
            else ""
        )
        qualifier = _QUALIFIER.match(head)
        if qualifier:
            phrase = qualifier.group(1).rstrip(",.;!")
            return [(_key("avoids", items[0]), f"{verb} {items[0]} {phrase}")]
    return [(_key("avoids", item), f"{verb} {item}") for item in items]


_NEVER = r"(?:don't|do not|never|can't|cannot|won't|no longer)"


@_rule(r"\bi " + _NEVER + r" eat\s+(.+)", 0.8, about_the_person=True)
def _avoids(m: re.Match[str]) -> list[tuple[str, str]]:
    return _avoided(m.group(1), "Does not eat")


@_rule(r"\bi " + _NEVER + r" drink\s+(.+)", 0.8, about_the_person=True)
def _avoids_drink(m: re.Match[str]) -> list[tuple[str, str]]:
    return _avoided(m.group(1), "Does not drink")


@_rule(
    r"\bi (?:can't|cannot|can not) (?:have|tolerate|digest)\s+"
    r"(?!an?\b|the\b|my\b|any\b|it\b|that\b|this\b)(.+)",
    0.75,
    about_the_person=True,
)
def _cannot_have(m: re.Match[str]) -> list[tuple[str, str]]:
    return _avoided(m.group(1), "Can't have")


_CONSUMABLES = _words(
    """alcohol booze drinking coffee caffeine tea sugar meat dairy gluten beer wine spirits soda
    chocolate sweets bread carbs pork beef chicken fish eggs milk cheese salt nuts peanuts onions
    onion garlic seafood shellfish lactose wheat soy spice mushrooms cream butter juice decaf"""
)


@_rule(
    r"\bi (?:quit|stopped|gave up|have given up|'ve given up)\s+(eating |drinking )?(.+)",
    0.75,
    about_the_person=True,
)
def _quit(m: re.Match[str]) -> list[tuple[str, str]]:
    # "I quit my job" is no diet: without "eating"/"drinking" only food and drink count
    verb = m.group(1)
    items = _items(m.group(2), 2, extra_stop=_FOOD_STOP | {"in", "last", "this", "two", "a"})
    if not verb:
        items = [item for item in items if item.lower() in _CONSUMABLES]
    said = f"Stopped {verb.strip()}" if verb else "Quit"
    return [(_key("avoids", item), f"{said} {item}") for item in items]


_DRINKS = _words("coffee tea decaf espresso water juice milk soda wine beer alcohol caffeine")


@_rule(
    r"^(?:(?:and|also|but|oh|so|pls|please)\b[\W_]*)*no ([a-z][\w-]*(?: [a-z][\w-]*)?)"
    r"(?=\s*(?:for me|please|pls|in anything|at all|[,.!;]|$))(.*)",
    0.75,
    about_the_person=True,
)
def _no_thing(m: re.Match[str]) -> list[tuple[str, str]]:
    # "No coffee, green tea only." / "No sugar in anything please". Only food and drink: a
    # sentence opening with "No …" is far more often "No problem", "No doubts", "No prob".
    thing = m.group(1).lower()
    if thing.split()[-1] not in _CONSUMABLES | _DRINKS:
        return []
    facts = [(_key("avoids", thing), f"No {m.group(1)}")]
    only = re.match(
        r"\s*,\s*(?:(?:just|only)\s+([a-z][\w-]*(?: [a-z][\w-]*)?)|([a-z][\w-]*(?: [a-z][\w-]*)?)\s+only)\b",
        m.group(2),
        re.IGNORECASE,
    )
    instead = (only.group(1) or only.group(2)) if only else ""
    if instead.split() and instead.split()[-1].lower() in _CONSUMABLES | _DRINKS:
        kind = "drinks" if thing.split()[-1] in _DRINKS or instead.split()[-1].lower() in _DRINKS else "eats"
        facts.append((kind, f"{kind.capitalize()} {instead} only"))
    return facts


@_rule(r"\bi (only |mostly |usually |just )?drink\s+(.+)", 0.7, about_the_person=True)
def _drink(m: re.Match[str]) -> list[tuple[str, str]]:
    drink = _phrase(
        m.group(2), 5, extra_stop=frozenset({"at", "in", "on", "every", "before", "after", "when"})
    )
    if not drink or drink.split()[0].lower() in _PRONOUN_OBJECTS or not _has_content(drink):
        return []
    adverb = m.group(1).strip().capitalize() + " drinks" if m.group(1) else "Drinks"
    return [("drinks", f"{adverb} {drink}")]


@_rule(
    _I_AM + r" (?:very |severely |highly |quite |extremely )?allergic to\s+(.+)", 0.9, about_the_person=True
)
def _allergic(m: re.Match[str]) -> list[tuple[str, str]]:
    return [(_key("allergy", item), f"Is allergic to {item}") for item in _items(m.group(1), 4)]


@_rule(
    _I_AM + r"\b[^,;]*?\band (?:also )?(?:very |severely |highly )?allergic to\s+(.+)",
    0.85,
    about_the_person=True,
)
def _and_allergic(m: re.Match[str]) -> list[tuple[str, str]]:
    # "I'm lactose intolerant and allergic to peanuts": the subject is still the user
    return [(_key("allergy", item), f"Is allergic to {item}") for item in _items(m.group(1), 4)]


@_rule(
    r"\bi have an? (?:severe |serious |mild |bad )?([a-z][\w-]*(?: [a-z][\w-]*)?) allergy\b",
    0.9,
    about_the_person=True,
)
def _allergy_noun(m: re.Match[str]) -> list[tuple[str, str]]:
    item = _strip_articles(m.group(1))
    return [(_key("allergy", item), f"Is allergic to {item}")] if item else []


_CONDITIONS = (
    r"asthma|diabetes|type [12] diabetes|arthritis|migraines?|high blood pressure|hypertension|epilepsy"
    r"|coeliac disease|celiac disease|ibs|crohn's(?: disease)?|adhd|insomnia|sciatica|tendonitis|eczema"
    r"|psoriasis|back pain|knee injury|bad knee|bad back|heart condition|pcos|gout|anaemia|anemia"
)


@_rule(
    r"\bi(?: have|'ve got| have got| suffer from| was diagnosed with| live with| am recovering from"
    r"|'m recovering from) (?:an? )?(?:bad |mild |severe |chronic |serious )?(" + _CONDITIONS + r")\b",
    0.85,
    about_the_person=True,
)
def _health(m: re.Match[str]) -> list[tuple[str, str]]:
    # a known condition only: "I have a meeting" is no health fact
    condition = m.group(1).lower()
    article = "a " if condition.startswith(("bad ", "heart ", "knee ")) else ""
    return [(_key("health", condition), f"Has {article}{condition}")]


@_rule(_I_AM + r" (?:currently )?(pregnant)\b", 0.85, about_the_person=True)
def _pregnant(m: re.Match[str]) -> list[tuple[str, str]]:
    return [("health pregnancy", "Is pregnant")]


_DAY = (
    r"(?:(?:mon|tues|wednes|thurs|fri|satur|sun)days?|mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun"
    r"|weekdays?|weekends?|weeknights?|mornings?|evenings?|afternoons?|nights?|day|week)(?![\w'-])"
)
_TIME = _DAY + r"(?:\s*(?:,|and|&|or|to|-)\s*" + _DAY + r")*(?:\s+(?:morning|evening|afternoon|night)s?)?"
# a routine's time: "every Tuesday evening", "each Sunday", "on Mondays and Thursdays", "on weekdays"
_EVERY = r"(?:every|each)\s+(?:other\s+)?" + _TIME
_ON_PLURAL = r"on\s+(?=\w*(?:days|weekends?|nights|mornings|evenings)\b)" + _TIME
_RECURRING = r"(?:" + _EVERY + r"|" + _ON_PLURAL + r")"
_HOUR = r"\d{1,2}(?::\d\d)?\s*(?:am|pm)?"
_CLOCK = r"(?:\s+(?:at|from)\s+" + _HOUR + r"(?:\s*(?:to|-)\s*" + _HOUR + r")?|\s+(?:before|after)\s+work)?"
_PAST = _words("went was were had did got saw met took made came left used")
# verbs of a state of mind, not a routine ("Every day I feel worse", "on Mondays I think…")
_NOT_AN_ACTIVITY = _NEGATIONS | _words(
    "am 'm was just still feel think wish want need hope guess know believe mean wonder try tried "
    "enjoy love like hate miss appreciate see "
    "can could will would should must may might"
)
_ADVERBS = _words("usually always often normally generally also mostly sometimes typically")
_VAGUE_OBJECTS = _words("it that this")
_THIRD_PERSON = {"have": "has", "do": "does", "go": "goes", "am": "is"}


def _third_person(activity: str) -> str | None:
    """ "work from home" → "Works from home", "usually eat out" → "Usually eats out"; None for a
    past, negated or mental verb, or an activity that only says "it"."""
    words = activity.split()
    if words and words[0].lower() in _ADVERBS:
        rest = _third_person(" ".join(words[1:]))
        return f"{words[0].capitalize()} {rest[0].lower()}{rest[1:]}" if rest else None
    verb = words[0].lower() if words else ""
    if (
        not verb.isalpha()
        or verb in _NOT_AN_ACTIVITY
        or verb in _PAST
        or (verb.endswith("ed") and len(verb) > 4)
    ):
        return None
    if len(words) == 2 and words[1].lower() in _VAGUE_OBJECTS:
        return None
    if verb in _THIRD_PERSON:
        inflected = _THIRD_PERSON[verb]
    elif verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        inflected = verb + "es"
    elif verb.endswith("y") and verb[-2:-1] not in "aeiou":
        inflected = verb[:-1] + "ies"
    else:
        inflected = verb + "s"
    return " ".join([inflected.capitalize(), *words[1:]])


def _routine_key(when: str) -> str:
    days = re.findall(_DAY, when, re.IGNORECASE)
    return _key("routine", *(d.lower() for d in days[:4]))


_ACTIVITY_STOP = frozenset(
    {"so", "but", "because", "which", "that", "when", "while", "though", "unless", "until"}
)


def _activity(text: str) -> str | None:
    words: list[str] = []
    for raw in text.split():
        word = raw.strip(",;:!?.()\"'")
        if not word or word.lower() in _ACTIVITY_STOP:
            break
        words.append(word)
        if raw[-1] in ",;:!?.)" or len(words) >= 8:
            break
    return " ".join(words) or None


@_rule(
    r"^(?:(?:and|also|so|but|oh|then)\b[\W_]*)*(?:(" + _RECURRING + r")|((?:" + _TIME + r")(?<=s)))"
    r"(" + _CLOCK + r")\s*,?\s+(?:i|we)\s+(.+)",
    0.7,
)
def _time_first(m: re.Match[str]) -> list[tuple[str, str]]:
    # "Every Tuesday evening I have choir practice", "On weekdays I work from home",
    # "Tuesdays and Thursdays I teach salsa" (a bare day only in the plural: "Sunday I went" is
    # one day, not a routine)
    when = (m.group(1) or m.group(2)).strip()
    clock = m.group(3).strip()
    activity = _activity(m.group(4))
    done = _third_person(activity) if activity else None
    if not done:
        return []
    if when.split()[0].lower() in {"every", "each", "on"}:
        when = when[0].lower() + when[1:]  # it opened the sentence; a day's name keeps its capital
    said_when = " ".join(part for part in (when, clock) if part)
    return [(_routine_key(when), f"{done} {said_when}")]


@_rule(
    r"^(?:[\w']+,?\s+){0,2}?(?:i|we)\s+([a-z][\w'-]*(?:\s+[\w'-]+){0,6}?)\s+("
    + _RECURRING
    + r")("
    + _CLOCK
    + r")",
    0.7,
)
def _time_last(m: re.Match[str]) -> list[tuple[str, str]]:
    # "I run on Mondays and Thursdays", "I work from home on Mondays", "I walk Rocket every evening at 6";
    # the user opens the clause ("a job I enjoy every day" is about the job)
    if any(sep in m.group(1) for sep in ",;"):
        return []
    done = _third_person(m.group(1))
    if not done:
        return []
    said_when = " ".join(part for part in (m.group(2).strip(), m.group(3).strip()) if part)
    return [(_routine_key(m.group(2)), f"{done} {said_when}")]


@_rule(_I_AM + r" off (" + _RECURRING + r"|on\s+" + _TIME + r")", 0.7)
def _day_off(m: re.Match[str]) -> list[tuple[str, str]]:
    return [(_routine_key(m.group(1)), f"Is off {m.group(1)}")]


@_rule(r"\bmy (?:work(?:ing)? |office |shift )?hours are\s+(.+)", 0.75, about_the_person=True)
def _hours(m: re.Match[str]) -> list[tuple[str, str]]:
    hours = _activity(m.group(1))
    return [("working hours", f"Hours are {hours}")] if hours else []


_PET_WORDS = (
    r"dog|cat|puppy|kitten|parrot|rabbit|bunny|hamster|horse|pony|tortoise|turtle|budgie|ferret|"
    r"lizard|snake|gecko|guinea pig|greyhound|labrador|lab|retriever|poodle|beagle|terrier|spaniel|"
    r"collie|dachshund|husky|pug|corgi|whippet|chihuahua"
)
_NAME_VERBS = _words("is was has had loves likes hates does died got went ate sleeps and or but who")
_NAME_WORD = re.compile(r"[A-Z][\w'-]*")


def _pet_names(text: str, *, introduced: bool) -> list[str]:
    """The names at the start of `text` ("Miso and Tofu"); capitalised as typed unless the text
    says "named"/"called" (then a lowercase name is titled)."""
    names: list[str] = []
    for raw in re.split(r"\s*(?:,|\band\b|&)\s*", text.strip()):
        word = raw.split()[0].strip(".!?;:)\"'") if raw.split() else ""
        if not word or word.lower() in _NAME_VERBS | _NOT_A_NAME | _BASE_STOP | _PRONOUN_OBJECTS:
            break
        if not _NAME_WORD.fullmatch(word) and not (introduced and word.isalpha()):
            break
        names.append(_titled(word))
        if len(raw.split()) > 1:
            break
    return names


def _pet_facts(pet: str, names: list[str]) -> list[tuple[str, str]]:
    pet = pet.lower()
    return [(_key("pet", pet, name), f"Has a {pet} named {name}") for name in names]


@_rule(
    r"\b(?:my|our)\s+((?:[a-z]+\s+)?(?:" + _PET_WORDS + r"))"
    r"((?:'s name is|\s+is called|\s+is named|\s+named|\s+called)\s+|,?\s+)(\S.*)",
    0.85,
    about_the_person=True,
)
def _my_pet(m: re.Match[str]) -> list[tuple[str, str]]:
    # "my dog Biscuit", "our cat is called Miso", "my dog's name is taco", "our parrot, Kiwi"
    words = m.group(1).split()
    introduced = bool(re.search(r"name|call", m.group(2), re.IGNORECASE))
    names = _pet_names(m.group(3), introduced=introduced)
    return _pet_facts(words[-1], names[:1] if not introduced else names)


@_rule(
    r"\b(?:i|we)(?:'ve| have)?\s+(?:just\s+)?(?:got|have|adopted|rescued|own)\s+(?:an?|one|two|three|\d+)\s+"
    r"(?:[a-z]+\s+){0,2}?(" + _PET_WORDS + r")s?\b((?:\s*,)?\s+(?:named|called)\s+|\s*[,:]\s*)(\S.*)",
    0.85,
    about_the_person=True,
)
def _have_pet(m: re.Match[str]) -> list[tuple[str, str]]:
    # "We adopted a rescue dog named Luna", "I have two cats, Miso and Tofu"
    introduced = bool(re.search(r"named|called", m.group(2), re.IGNORECASE))
    return _pet_facts(m.group(1), _pet_names(m.group(3), introduced=introduced))


_RELATIONS = (
    r"wife|husband|partner|spouse|boyfriend|girlfriend|fianc[eé]e?|son|daughter|sister|brother|"
    r"mother|mom|mum|father|dad|parents|grandmother|grandfather|grandma|grandpa|kids|children|twins"
)


def _whose(relation: str) -> str:
    """The possessive of a relation: "sister's", "parents'"."""
    return f"{relation}'" if relation.endswith("s") else f"{relation}'s"


@_rule(r"\bmy (" + _RELATIONS + r") ([A-Z][\w'-]*)", 0.8, about_the_person=True)
def _relative_name(m: re.Match[str]) -> list[tuple[str, str]]:
    # "my wife Anna prefers rosé": the name as typed, capitalised
    name = m.group(2).removesuffix("'s")  # "my daughter Sara's birthday"
    if not _NAME_WORD.fullmatch(name) or name.lower() in _NAME_VERBS | _NOT_A_NAME | _BASE_STOP:
        return []
    relation = m.group(1).lower()
    return [(_key(_whose(relation), "name"), f"{relation.capitalize()} is {name}")]


@_rule(
    r"\bmy (" + _RELATIONS + r") (?:still |now |currently )?(?:lives?|is based|are based) in\s+(.+)",
    0.8,
    about_the_person=True,
)
def _relative_home(m: re.Match[str]) -> list[tuple[str, str]]:
    # a relative's home is a family fact, never the user's home
    place = _phrase(m.group(2), 4, extra_stop=_PLACE_STOP)
    relation = m.group(1).lower()
    verb = "live" if relation in {"parents", "kids", "children", "twins"} else "lives"
    return [(_key(_whose(relation), "home"), f"{relation.capitalize()} {verb} in {place}")] if place else []


@_rule(
    r"\bmy (" + _RELATIONS + r")\b(?:[^,.;]*?\band (?:she|he)(?:'s| is)| is) (?:an? )(.+)",
    0.75,
    about_the_person=True,
)
def _relative_job(m: re.Match[str]) -> list[tuple[str, str]]:
    job = _phrase(m.group(2), 3, extra_stop=frozenset({"at", "for", "in"}))
    if not job or job.split()[-1].lower().rstrip("s") not in _JOB_NOUNS:
        return []
    relation = m.group(1).lower()
    article = "an" if job[0].lower() in "aeiou" else "a"
    return [(_key(_whose(relation), "job"), f"{relation.capitalize()} is {article} {job}")]


@_rule(r"\bi live with (?:my|our) (" + _RELATIONS + r"|roommates?|flatmates?)\b", 0.8, about_the_person=True)
def _live_with(m: re.Match[str]) -> list[tuple[str, str]]:
    relation = m.group(1).lower()
    return [(_key("lives with", relation), f"Lives with {relation}")]


@_rule(
    r"\b(?:i|we) (?:have|'ve got|have got) (a|an|one|two|three|four|five|\d) "
    r"(sons?|daughters?|kids?|children|child|boys?|girls?|twins)\b",
    0.8,
    about_the_person=True,
)
def _children(m: re.Match[str]) -> list[tuple[str, str]]:
    return [("children", f"Has {m.group(1).lower()} {m.group(2).lower()}")]


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
_TOPIC_STOP = frozenset({"about", "because", "in", "at", "on", "during", "when"})


def _opinion_facts(thing_text: str, *, liked: bool, said: str) -> list[tuple[str, str]]:
    """(key, value) for liking or disliking what `thing_text` starts with: the key names the topic
    ("hiking"), the value keeps how it was said ("Hates running in the rain")."""
    topic_phrase = _phrase(thing_text, 4, extra_stop=_TOPIC_STOP)
    # "I enjoy every day" / "I love every minute of it" say how, not what
    if not topic_phrase or topic_phrase.split()[0].lower() in _PRONOUN_OBJECTS | {"every", "each"}:
        return []
    topic = _strip_articles(topic_phrase)
    if not topic:
        return []
    told = _phrase(thing_text, 7, extra_stop=frozenset({"about", "because", "when"})) or topic_phrase
    return [(_key("likes" if liked else "dislikes", topic), f"{said} {told}")]


@_rule(
    r"\bi (?:really |absolutely |truly |do |just |still |also |totally |genuinely )?"
    r"(love|like|enjoy|adore|hate|dislike|can't stand|detest)\s+(.+)",
    0.65,
)
def _opinion(m: re.Match[str]) -> list[tuple[str, str]]:
    verb = m.group(1).lower()
    if verb in _LIKES:
        return _opinion_facts(m.group(2), liked=True, said=_LIKES[verb])
    return _opinion_facts(m.group(2), liked=False, said=_DISLIKES[verb])


@_rule(r"\bi (?:don't|do not) (?:really )?(?:like|enjoy)\s+(.+)", 0.65)
def _not_like(m: re.Match[str]) -> list[tuple[str, str]]:
    return _opinion_facts(m.group(1), liked=False, said="Does not like")


@_rule(_I_AM + r" (not )?(?:really |really not |so |very |big )?into\s+(.+)", 0.65)
def _into(m: re.Match[str]) -> list[tuple[str, str]]:
    # "I'm into jazz" / "I'm not into video games"
    negated = bool(m.group(1))
    return _opinion_facts(m.group(2), liked=not negated, said="Not into" if negated else "Into")


@_rule(_I_AM + r" (?:a )?(?:big |huge )?fan of\s+(.+)", 0.65)
def _fan(m: re.Match[str]) -> list[tuple[str, str]]:
    return _opinion_facts(m.group(1), liked=True, said="Fan of")


@_rule(_I_AM + r" not (?:really )?an? ([a-z]+) person\b", 0.65)
def _not_a_person(m: re.Match[str]) -> list[tuple[str, str]]:
    # "I'm not a morning person"
    thing = m.group(1)
    return [(_key("dislikes", thing), f"Not a {thing} person")]


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
    _i_am_name,
    _names,
    _here,
    _call_me,
    _live,
    _based,
    _moved,
    _from,
    _work_as,
    _work_at,
    _i_am_a,
    _diet,
    _avoids,
    _avoids_drink,
    _cannot_have,
    _quit,
    _no_thing,
    _drink,
    _allergic,
    _and_allergic,
    _allergy_noun,
    _health,
    _pregnant,
    _time_first,
    _time_last,
    _day_off,
    _hours,
    _my_pet,
    _have_pet,
    _relative_name,
    _relative_home,
    _relative_job,
    _live_with,
    _children,
    _prefer_over,
    _prefer,
    _opinion,
    _not_like,
    _into,
    _fan,
    _not_a_person,
    _favourite,
    _remember,
)
# the rules stating a fact about the person (`_rule(…, about_the_person=True)`)
ABOUT_THE_PERSON: frozenset[_Rule] = frozenset(rule for rule in _RULES if rule.about_the_person)


def _contracted(text: str) -> str:
    return _BARE_CONTRACTION.sub(lambda m: _BARE_CONTRACTIONS[m.group(1).lower()], text)


def _statement(sentence: str) -> str | None:
    """The part of a sentence that states something, or None for a question or a hypothetical.

    A question that opens with a statement keeps the statement ("I love Thai food, any recipes?");
    a conditional or wished-for clause is cut off ("I'm vegan, if that matters" and "I like
    nature, so that might be fun" keep their first clause; "I'd love a dog named Rex" keeps nothing)."""
    if _HYPOTHETICAL.search(sentence):
        return None
    if sentence.rstrip().endswith("?"):
        if "," not in sentence or not _QUESTION_OPENS_WITH_STATEMENT.search(sentence):
            return None
        sentence = sentence[: sentence.rindex(",")]
    sentence = re.split(r"(?<![\w'-])if(?![\w'-])", sentence, maxsplit=1, flags=re.IGNORECASE)[0]
    # what follows a "would"/"I'd"/"wish" is not so; what comes before it still is
    sentence = _IRREALIS.split(sentence, maxsplit=1)[0]
    return sentence.strip() or None


# where a sentence goes on with a new first-person clause: "I'm Kenji, I live in Osaka",
# "I'm Priya and I'm a nurse" (each clause is read on its own, so one rule can match both)
_NEW_CLAUSE = re.compile(
    r"\s*(?:,|;|\s-\s|\s(?:and|but|so)\s)\s*(?=(?:i|i'm|i've|my|we|we're|our)\b)", re.IGNORECASE
)


def _sentences(text: str) -> Iterator[str]:
    normalised = _contracted(text.replace("’", "'").replace("‘", "'"))
    for match in _SENTENCES.finditer(normalised):
        statement = _statement(match.group().strip())
        if statement:
            yield from (clause for clause in _NEW_CLAUSE.split(statement) if clause.strip())


def extract_statements(
    text: str, scope: Scope, number: int | None = None, *, person_scope: Scope | None = None
) -> list[dict[str, object]]:
    """Raw contract items (key, value, confidence, scope, and with `number` the evidence: that
    message's number) for the statements found in one user message: a fact about the person
    (`ABOUT_THE_PERSON`) in `person_scope` (default: `scope`), any other in `scope`."""
    evidence = [number] if number is not None else []
    items: list[dict[str, object]] = []
    for sentence in _sentences(text):
        for rule in _RULES:
            filed = person_scope if person_scope is not None and rule in ABOUT_THE_PERSON else scope
            for match in rule.pattern.finditer(sentence):
                for key, value in rule.build(match):
                    items.append(
                        {
                            "key": key,
                            "value": value,
                            "confidence": rule.confidence,
                            "scope": filed,
                            "evidence": evidence,
                        }
                    )
    return items


class RulesExtractor:
    """Offline `Extractor`: pattern rules over the user's messages (see the module docstring)."""

    async def extract(self, request: ExtractionRequest) -> ExtractionResult:
        """Apply the rules to the redacted user messages; validate, merge and screen the results."""
        scope: Scope = "persona_user" if "persona_user" in request.allowed_scopes else "user"
        person_scope: Scope = "user" if "user" in request.allowed_scopes else scope
        items: list[dict[str, object]] = []
        redacted_count = 0
        for number, message in enumerate(request.messages, start=1):
            if message.role != "user":
                continue
            text, findings = redact(message.content)
            redacted_count += len(findings)
            items.extend(extract_statements(text, scope, number, person_scope=person_scope))
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
