"""Which earlier conversation turns add something new to the next message's prompt. Pure, linear in
the text read.

A past turn is left out when it restates the new message (the user asked the same before: its own
content words are mostly the message's; or the user's earlier question is a shorter form or the
opening of it), when it has no content whatever its language or emoji ("Thanks, coach!", "¡Hasta
luego! 📖", "Keep moving! 🏃": nothing left once greetings, thanks, sign-offs and the person
addressed are set aside), when the same text was already kept
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
# a sentence of at most this many words that opens with a sign-off word and says at most one
# other thing ("Keep moving!", "Safe travels!", "Enjoy the pasta!", "Have a great trip!") is filler
SIGN_OFF_WORDS = 4

# one run of letters or digits: a linear scan whatever the text
_WORD = re.compile(r"[^\W_]+")
# a word, or a mark that ends a clause (comma) or a sentence: one linear scan
_TOKEN = re.compile(r"[^\W_]+|[,.!?;:\n…]")
_SENTENCE_ENDS = frozenset(".!?;:\n…")

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
# the same in other languages: words no English sentence uses for anything else
_FOREIGN_FILLER = """
    gracias merci danke grazie obrigado obrigada bedankt dankjewel dank tack takk dziękuję спасибо
    谢谢 ありがとう ありがとうございます 감사합니다 شكرا תודה hola bonjour bonsoir salut hallo ciao olá
    adiós adios tschüss tschüs arrivederci chao tchau saludos besos abrazos appétit appetito appetit
    provecho vielen muchas mille beaucoup bitte prego привет пока buen buena buenas buenos bonne
    buona buon gute guten
"""
# sign-offs of two or three words whose words alone could mean something else ("logo", "tag")
_FILLER_PHRASES = """
    hasta luego|hasta pronto|hasta mañana|hasta la vista|buenas noches|buenas tardes|buenos días
    |buenos dias|buen día|buen dia|de nada|au revoir|à bientôt|a bientot|bonne journée|bonne soirée
    |bonne nuit|de rien|bis bald|bis später|bis morgen|gute nacht|guten tag|guten morgen|guten abend
    |schönen tag|buona giornata|buona serata|buona notte|a presto|até logo|até breve|até amanhã
    |boa noite|boa tarde|bom dia|tot ziens|do svidaniya|до свидания|take care
"""
# words a message addresses its reader with ("Thanks, coach!", "Hi chef"): no fact in a greeting
_ADDRESS = """
    coach chef doc doctor teacher prof professor buddy mate friend pal man dude bro guys folks
    everyone team bot sir madam maam boss champ dear captain
"""
_ADDRESS_WORDS = frozenset(_ADDRESS.split())
# the words after which a name or an address word is a vocative: "Thanks Anna", "Hi coach"
_GREETINGS = """
    thanks thank thx ty cheers bye goodbye hello hi hey morning night gracias merci danke grazie
    obrigado obrigada ciao hola bonjour salut hallo
"""
_GREETING_WORDS = frozenset(_GREETINGS.split())

_SIGN_OFF_OPENERS = frozenset({"happy", "enjoy", "keep", "stay", "safe", "have"})


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
FOREIGN_FILLER = frozenset(_FOREIGN_FILLER.split())
FILLER_PHRASES = frozenset(tuple(phrase.split()) for phrase in _FILLER_PHRASES.split("|"))
_LONGEST_PHRASE = max(len(phrase) for phrase in FILLER_PHRASES)
# the words a sign-off phrase opens with: a position holding none of them opens no phrase
_PHRASE_OPENERS = frozenset(phrase[0] for phrase in FILLER_PHRASES)


def words(text: str) -> list[str]:
    """The lower-cased words of `text` (runs of letters or digits), in order."""
    return _WORD.findall(text.lower())


def normalized(text: str) -> str:
    """`text` as compared for "already shown": lower-cased words joined by one space."""
    return " ".join(words(text))


def content_words(text: str) -> frozenset[str]:
    """The stems of `text`'s words that are not stop words."""
    return frozenset(stem(word) for word in words(text) if word not in STOP_WORDS)


def _sentences(text: str) -> list[tuple[list[list[str]], bool]]:
    """`text` as sentences, each its comma-separated clauses (lists of words as written: case kept,
    for names) and whether it asks (ends with "?"): one linear scan."""
    sentences: list[tuple[list[list[str]], bool]] = []
    clauses: list[list[str]] = [[]]
    for token in [*_TOKEN.findall(text), "\n"]:
        if token == ",":
            clauses.append([])
        elif token in _SENTENCE_ENDS:
            kept = [clause for clause in clauses if clause]
            if kept:
                sentences.append((kept, token == "?"))
            clauses = [[]]
        else:
            clauses[-1].append(token)
    return sentences


def _phrase_words(said: list[str]) -> set[int]:
    """The positions of `said` (lower-cased words) inside a sign-off phrase ("hasta luego")."""
    covered: set[int] = set()
    for start in range(len(said)):
        if said[start] not in _PHRASE_OPENERS:
            continue
        for size in range(2, _LONGEST_PHRASE + 1):
            if tuple(said[start : start + size]) in FILLER_PHRASES:
                covered.update(range(start, start + size))
    return covered


def _is_vocative(word: str) -> bool:
    # a name ("Anna") or a word one addresses a person with ("coach")
    return word[:1].isupper() or word.lower() in _ADDRESS_WORDS


def _filler_word(word: str) -> bool:
    return word in STOP_WORDS or stem(word) in FILLER_STEMS or word in FOREIGN_FILLER


def sentence_is_filler(clauses: list[list[str]], *, question: bool = False) -> bool:
    """True when a sentence (its comma-separated clauses of words as written) says nothing to
    remember: once greetings, thanks and sign-offs (in several languages), stop words and the
    person addressed ("Thanks, coach!", "Hi Anna") are set aside, no word is left; or it is a short
    sign-off ("Keep moving!", "Safe travels!": an opener and at most one other word), not a question."""
    said = [word.lower() for clause in clauses for word in clause]
    ignored = _phrase_words(said)
    ignored.update(index for index, word in enumerate(said) if _filler_word(word))
    if ignored:
        # the person addressed: a clause of its own ("Thanks, coach!"), or the word right after a
        # greeting that ends the sentence ("Thanks Anna!")
        position = 0
        for clause in clauses:
            if len(clauses) > 1 and len(clause) <= 2 and all(_is_vocative(word) for word in clause):
                ignored.update(range(position, position + len(clause)))
            position += len(clause)
        last = len(said) - 1
        greeting = last - 2 if last >= 2 and said[last - 1] == "you" else last - 1
        if greeting >= 0 and said[greeting] in _GREETING_WORDS and _is_vocative(clauses[-1][-1]):
            ignored.add(last)
    left = [index for index in range(len(said)) if index not in ignored]
    if not left:
        return True
    signs_off = not question and len(said) <= SIGN_OFF_WORDS and said[0] in _SIGN_OFF_OPENERS
    return signs_off and len([index for index in left if index > 0]) <= 1


def is_filler(text: str) -> bool:
    """True when `text` says nothing to remember whatever its language or emoji: every sentence is
    filler (`sentence_is_filler`)."""
    return all(sentence_is_filler(clauses, question=asks) for clauses, asks in _sentences(text))


def restates(text: str, message_words: frozenset[str]) -> bool:
    """True when a turn's `text` says again what the message (its `content_words`) says: at least
    `RESTATE_COVERAGE` of its content words are the message's, and they overlap at least
    `RESTATE_OVERLAP` (Jaccard)."""
    return _restates(content_words(text), message_words)


def _restates(own: frozenset[str], message_words: frozenset[str]) -> bool:
    # `restates` of a text whose content words are `own`
    if not own or not message_words:
        return False
    shared = len(own & message_words)
    if shared / len(own) < RESTATE_COVERAGE:  # the turn says something the message does not
        return False
    return shared / (len(own) + len(message_words) - shared) >= RESTATE_OVERLAP


def asked_before(text: str, *, message_words: frozenset[str], message_text: str) -> bool:
    """True when the user's earlier `text` asks what the message (its `content_words` and its
    `normalized` text) asks: its words open the message ("How do I use the subjunctive?" before
    "How do I use the subjunctive? Is it like in Italian?"), or it is a question whose every content
    word is the message's (a shorter form: "Should I invest in crypto?")."""
    return _asked_before(text, normalized(text), content_words(text), message_words, message_text)


def _asked_before(
    text: str, said: str, own: frozenset[str], message_words: frozenset[str], message_text: str
) -> bool:
    # `asked_before` of a text whose `normalized` form is `said` and content words are `own`
    if not said:
        return False
    if message_text == said or message_text.startswith(said + " "):
        return True
    return "?" in text and bool(own) and own <= message_words


def quoted_by(facts: Iterable[Memory]) -> set[tuple[uuid.UUID, str]]:
    """The (conversation, text) of every message the facts' evidence quotes (`quoted_text` form)."""
    quoted: set[tuple[uuid.UUID, str]] = set()
    for fact in facts:
        if fact.source_channel_id is not None:
            channel = fact.source_channel_id
            quoted.update((channel, quoted_text(line.text)) for line in evidence_lines(fact.evidence))
    return quoted


def new_turn_indexes(
    turns: Sequence[Turn], *, message: str, shown: Iterable[Memory] = (), limit: int | None = None
) -> list[int]:
    """The indexes, in order, of the turns that add something new beside the `shown` facts for the
    next `message`: not a restatement of it (nor the user's earlier question it repeats or grows
    from, `asked_before`), not filler, not a text already kept, not quoted by a
    shown fact. `limit`: only the first that many (the turns after them are not read)."""
    if not turns or (limit is not None and limit <= 0):
        return []
    message_words = content_words(message)
    message_text = normalized(message)
    quoted = quoted_by(shown)
    seen: set[str] = set()
    kept: list[int] = []
    for index, turn in enumerate(turns):
        text = normalized(turn.text)
        if not text or text in seen:
            continue
        if (turn.channel_id, quoted_text(turn.text)) in quoted:
            continue
        if is_filler(turn.text):
            continue
        own = content_words(turn.text)  # once for both checks below
        if _restates(own, message_words):
            continue
        if turn.role == "user" and _asked_before(turn.text, text, own, message_words, message_text):
            continue
        seen.add(text)
        kept.append(index)
        if len(kept) == limit:
            break
    return kept


def unquoted_indexes(turns: Sequence[Turn], *, shown: Iterable[Memory] = ()) -> list[int]:
    """The indexes, in order, of the turns no `shown` fact quotes: of turns `new_turn_indexes`
    already kept for a message, the ones it keeps beside more facts (its other checks read only
    the turns and the message)."""
    if not turns:
        return []
    quoted = quoted_by(shown)
    return [i for i, turn in enumerate(turns) if (turn.channel_id, quoted_text(turn.text)) not in quoted]
