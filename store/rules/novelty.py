"""Which earlier conversation turns add something new to the next message's prompt. Pure, linear in
the text read.

A past turn is left out when it restates the new message (the user asked the same before: its own
content words are mostly the message's), when it has no content ("Thanks!", "Enjoy your meal!",
"Happy saving!": every content word a filler word), when the same text was already kept
(identical after normalization), or when a fact shown beside it quotes it (its evidence holds the
turn's text, from the same conversation). Words are compared lower-cased, stemmed (`stem`) and
without stop words (`content_words`)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence

from store.model import Memory, Turn
from store.rules.evidence import evidence_lines, quoted_text

# a turn restates the message when their content words overlap at least this much (Jaccard):
# "What should I cook tonight?" restates "What should I cook for dinner tonight?" (2 of 3),
# "What can I cook with shrimp?" does not (1 of 3)
RESTATE_OVERLAP = 0.6
# and at least this share of the turn's own content words are the message's ("Ana moved to Porto"
# adds "moved" to the message "Porto Ana": kept)
RESTATE_COVERAGE = 0.8
# a turn this short that opens with a sign-off word ("Happy cooking!", "Enjoy the pasta!") is filler
SIGN_OFF_WORDS = 4

# one run of letters or digits: a linear scan whatever the text
_WORD = re.compile(r"[^\W_]+")

_STOP = """
    a about above after again all also am an and any are as at be been before being below between
    both but by can could d did do does doing don down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just ll m me
    might more most must my myself no nor not now of off on once only or other our ours ourselves out
    over own re s same shall she should so some such t than that the their theirs them themselves then
    there these they this those through to too under until up us ve very was we were what when where
    which while who whom why will with would you your yours yourself yourselves let lets
"""
STOP_WORDS = frozenset(_STOP.split())

# words that carry no fact on their own: thanks, greetings, sign-offs, acknowledgements
_FILLER = """
    thanks thank thx ty welcome enjoy enjoyed happy glad great good nice awesome cool perfect wonderful
    lovely amazing fantastic excellent sound sounds okay ok sure noted got keep mind luck study studies
    saving save workout workouts cooking coding learning baking reading training meal meals day days
    evening night morning weekend time help helping helpful anytime problem problems pleasure telling
    tell know appreciate appreciated cheers bye goodbye hello hi hey bon appetit care fun hear yes yeah
    yep nope np wow right alright exactly absolutely indeed course remember note bit lot much really
    feel free ask anything else question questions again see soon later well done work job thing
    things way hope hopefully like love definitely certainly totally
"""

_SIGN_OFF_OPENERS = frozenset({"happy", "enjoy"})


def stem(word: str) -> str:
    """A crude English stem of a lower-case word (`studies` → `study`, `cooking` → `cook`), the
    same for the forms the hint compares; not a dictionary form."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
        return word[:-1] if len(word) > 2 and word[-1] == word[-2] else word
    if len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
        return word[:-1] if len(word) > 2 and word[-1] == word[-2] else word
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


FILLER_STEMS = frozenset(stem(word) for word in _FILLER.split())


def words(text: str) -> list[str]:
    """The lower-cased words of `text` (runs of letters or digits), in order."""
    return _WORD.findall(text.lower())


def normalized(text: str) -> str:
    """`text` as compared for "already shown": lower-cased words joined by one space."""
    return " ".join(words(text))


def content_words(text: str) -> frozenset[str]:
    """The stems of `text`'s words that are not stop words."""
    return frozenset(stem(word) for word in words(text) if word not in STOP_WORDS)


def is_filler(text: str) -> bool:
    """True when `text` says nothing to remember: no content word outside the filler words, or a
    short sign-off opening with "happy" or "enjoy"."""
    said = words(text)
    if said and len(said) <= SIGN_OFF_WORDS and said[0] in _SIGN_OFF_OPENERS:
        return True
    return all(stem(word) in FILLER_STEMS for word in said if word not in STOP_WORDS)


def restates(text: str, message_words: frozenset[str]) -> bool:
    """True when a turn's `text` says again what the message (its `content_words`) says: at least
    `RESTATE_COVERAGE` of its content words are the message's, and they overlap at least
    `RESTATE_OVERLAP` (Jaccard)."""
    own = content_words(text)
    if not own or not message_words:
        return False
    shared = len(own & message_words)
    if shared / len(own) < RESTATE_COVERAGE:  # the turn says something the message does not
        return False
    return shared / (len(own) + len(message_words) - shared) >= RESTATE_OVERLAP


def quoted_by(facts: Iterable[Memory]) -> set[tuple[uuid.UUID, str]]:
    """The (conversation, text) of every message the facts' evidence quotes (`quoted_text` form)."""
    quoted: set[tuple[uuid.UUID, str]] = set()
    for fact in facts:
        if fact.source_channel_id is not None:
            channel = fact.source_channel_id
            quoted.update((channel, quoted_text(line.text)) for line in evidence_lines(fact.evidence))
    return quoted


def new_turn_indexes(turns: Sequence[Turn], *, message: str, shown: Iterable[Memory] = ()) -> list[int]:
    """The indexes, in order, of the turns that add something new beside the `shown` facts for the
    next `message`: not a restatement of it, not filler, not a text already kept, not quoted by a
    shown fact."""
    message_words = content_words(message)
    quoted = quoted_by(shown)
    seen: set[str] = set()
    kept: list[int] = []
    for index, turn in enumerate(turns):
        text = normalized(turn.text)
        if not text or text in seen:
            continue
        if (turn.channel_id, quoted_text(turn.text)) in quoted:
            continue
        if is_filler(turn.text) or restates(turn.text, message_words):
            continue
        seen.add(text)
        kept.append(index)
    return kept
