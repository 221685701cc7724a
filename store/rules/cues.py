"""Pure query cues for recall (no I/O): explicit or relative time expressions in a query
("on 7 July, 2023", "in August 2023", "last week"), whether a query asks "When …?" and whether a
memory's text names a time (`asks_when`, `mentions_time`), whether a message speaks for the person
and a memory limits what may be suggested to them (`speaks_for_self`, `states_constraint`), and which
query words carry no signal for one owner's memories (words most of them contain, like the user's
own name).

Memories carry `created_at` = when the conversation they came from happened, so a query naming a
time can prefer memories from around that time; the words naming the time are removed from the
text that is matched, because they rarely appear in the memory itself."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = (
    r"(january|february|march|april|may|june|july|august|september|october|november|december|"
    r"jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?"
)
_ORD = r"(?:st|nd|rd|th)?"
_PREP = r"(?:\b(?:on|in|during|around|of|since|from|at)\s+)?"
# `\s*(?:,\s*)?`, not `\s*,?\s*`: two adjacent `\s*` can split a run of spaces in every way, and a
# query ending in thousands of spaces made each search quadratic (a person waits on that recall)
_COMMA = r"\s*(?:,\s*)?"
_DAY_MONTH_YEAR = re.compile(rf"{_PREP}\b(\d{{1,2}}){_ORD}\s+(?:of\s+)?{_MONTH}{_COMMA}(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"{_PREP}\b{_MONTH}\s+(\d{{1,2}}){_ORD}{_COMMA}(\d{{4}})\b", re.I)
_MONTH_YEAR = re.compile(rf"{_PREP}\b{_MONTH}{_COMMA}(\d{{4}})\b", re.I)
_YEAR = re.compile(r"\b(?:in|during|since|of)\s+((?:19|20)\d{2})\b", re.I)
_RELATIVE = re.compile(
    r"\b(today|yesterday|last\s+(?:week|month|year|weekend)|this\s+(?:week|month|year)|"
    r"(\d{1,2}|a|one|two|three|four|five|six)\s+(days?|weeks?|months?)\s+ago)\b",
    re.I,
)
# a memory's text naming a time, for "When …?" questions (`ScoreFusion.when_boost`): people tell
# when something happened in relative words ("yesterday", "last week", "two years ago"), a month,
# a year or a weekday, and rarely by the calendar date a question asks about
_TIME_MENTION = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|recently|(?:19|20)\d\d|"
    r"january|february|march|april|may|june|july|august|september|october|november|december|"
    r"days?|weeks?|weekends?|months?|years?|night|morning|afternoon|evening|"
    r"summer|winter|spring|fall|autumn|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
    re.I,
)
_ASKS_WHEN = re.compile(r"^\W*when\b", re.I)
# words that speak for oneself or to the assistant; "us" apart, case-sensitive, so "the US" is not
# fmt: off
_FIRST_OR_SECOND_PERSON = frozenset((
    "i", "me", "my", "mine", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours", "yourself",
))
_US = re.compile(r"\b[Uu]s\b")
# the start of a word naming a limit on what may be suggested, keyed by its first four letters, so
# a word costs one lookup; and the phrases (words joined by one space) that name one
_CONSTRAINT_STARTS = (
    "allerg", "intoleran", "anaphyla", "vegan", "vegetarian", "pescatarian", "pescetarian", "halal",
    "kosher", "gluten", "lactose", "coeliac", "celiac", "diabet", "diet", "pregnan", "asthma", "injur",
    "hurt", "epilep", "migraine", "dyslex", "adhd", "autis", "deaf", "blind", "seasick", "vertigo",
    "phobi", "anxi", "panic", "disab", "wheelchair", "arthritis", "doctor", "midwife", "medicat",
    "avoid", "teetotal",
)
# fmt: on
_CONSTRAINT_BY_FOUR = {
    four: tuple(start for start in _CONSTRAINT_STARTS if start[:4] == four)
    for four in {start[:4] for start in _CONSTRAINT_STARTS}
}
_CONSTRAINT_WORDS = frozenset({"sore", "pain", "sober"})
_CONSTRAINT_PHRASES = (
    " hard of hearing ",
    " afraid of ",
    " motion sick",
    " dairy free ",
    " does not eat",
    " does not drink",
    " doesn t eat",
    " doesn t drink",
    " can t eat",
    " cannot eat",
    " won t eat",
    " never eat",
)
_SMALL_NUMBERS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True, kw_only=True, slots=True)
class TimeWindow:
    """A half-open time interval [start, end) that a query refers to."""

    start: datetime
    end: datetime

    def widened(self, slack: timedelta) -> TimeWindow:
        """The same window with `slack` added on both sides (conversations rarely land on the day),
        kept inside the calendar (year 1 to 9999)."""
        return TimeWindow(start=_shifted(self.start, -slack), end=_shifted(self.end, slack))

    def contains(self, moment: datetime) -> bool:
        return self.start <= _aware(moment) < self.end


@dataclass(frozen=True, kw_only=True, slots=True)
class TimeCue:
    """A time window found in a query and the query with the words naming it removed."""

    window: TimeWindow
    remaining_query: str


_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


def _shifted(moment: datetime, delta: timedelta) -> datetime:
    """`moment + delta`, or the calendar's first or last moment where that would leave it."""
    try:
        return moment + delta
    except OverflowError:
        return _LATEST if delta > timedelta(0) else _EARLIEST


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _day(year: int, month: int, day: int) -> TimeWindow | None:
    """The day, or None when it is not one ("30 February", "1 January 0000")."""
    try:
        start = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return TimeWindow(start=start, end=_shifted(start, timedelta(days=1)))


def _month(year: int, month: int) -> TimeWindow | None:
    """The month, or None when its year is outside the calendar ("August 0000")."""
    try:
        start = datetime(year, month, 1, tzinfo=UTC)
    except ValueError:
        return None
    try:
        end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    except ValueError:  # December 9999
        end = _LATEST
    return TimeWindow(start=start, end=end)


def _relative(match: re.Match[str], now: datetime) -> TimeWindow | None:
    phrase = " ".join(match.group(0).lower().split())
    today = _aware(now).replace(hour=0, minute=0, second=0, microsecond=0)
    day = timedelta(days=1)
    if phrase == "today":
        return TimeWindow(start=today, end=today + day)
    if phrase == "yesterday":
        return TimeWindow(start=today - day, end=today)
    if phrase in ("last week", "last weekend"):
        return TimeWindow(start=today - 7 * day, end=today)
    if phrase == "this week":
        return TimeWindow(start=today - today.weekday() * day, end=today + day)
    if phrase == "last month":
        return TimeWindow(start=today - 31 * day, end=today + day)
    if phrase == "this month":
        return _month(today.year, today.month)
    if phrase in ("last year", "this year"):
        year = today.year - (phrase == "last year")
        return TimeWindow(start=datetime(year, 1, 1, tzinfo=UTC), end=datetime(year + 1, 1, 1, tzinfo=UTC))
    count_word, unit = match.group(2).lower(), match.group(3).lower()
    count = int(count_word) if count_word.isdigit() else _SMALL_NUMBERS[count_word]
    days = count * (1 if unit.startswith("day") else 7 if unit.startswith("week") else 30)
    center = today - days * day
    half = max(1, days // 4) * day
    return TimeWindow(start=center - half, end=center + half + day)


def parse_time_cue(query: str, *, now: datetime) -> TimeCue | None:
    """The first time expression in `query` (absolute dates first, then relative to `now`), or None."""
    match = _DAY_MONTH_YEAR.search(query)
    window: TimeWindow | None = None
    if match:
        window = _day(int(match.group(3)), _MONTHS[match.group(2).lower()], int(match.group(1)))
    if window is None and (match := _MONTH_DAY_YEAR.search(query)):
        window = _day(int(match.group(3)), _MONTHS[match.group(1).lower()], int(match.group(2)))
    if window is None and (match := _MONTH_YEAR.search(query)):
        window = _month(int(match.group(2)), _MONTHS[match.group(1).lower()])
    if window is None and (match := _YEAR.search(query)):
        year = int(match.group(1))
        window = TimeWindow(start=datetime(year, 1, 1, tzinfo=UTC), end=datetime(year + 1, 1, 1, tzinfo=UTC))
    if window is None and (match := _RELATIVE.search(query)):
        window = _relative(match, now)
    if window is None or match is None:
        return None
    remaining = " ".join((query[: match.start()] + " " + query[match.end() :]).split())
    return TimeCue(window=window, remaining_query=remaining)


def asks_when(query: str) -> bool:
    """True when the query is a "When …?" question (its first word is "when")."""
    return _ASKS_WHEN.match(query) is not None


def speaks_for_self(query: str) -> bool:
    """True when the message is worded in the first or second person ("What can I cook…", "Can you
    recommend…"): the person asks for themselves, so what limits them applies. A third-person
    question ("What did Caroline research?") is not."""
    if _US.search(query) is not None:
        return True
    return not _FIRST_OR_SECOND_PERSON.isdisjoint(_WORD.findall(query.lower()))


def states_constraint(key: str, value: str) -> bool:
    """True when a memory names something that limits what may be suggested to the person or those
    they care for: an allergy or intolerance, a diet, a health condition or injury, a fear, or food
    or drink they avoid (`_CONSTRAINT_STARTS`, `_CONSTRAINT_PHRASES`, in its key or its value)."""
    words = _WORD.findall(f"{key} {value}".replace("_", " ").lower())
    for word in words:
        if word in _CONSTRAINT_WORDS:
            return True
        starts = _CONSTRAINT_BY_FOUR.get(word[:4])
        if starts is not None and any(word.startswith(start) for start in starts):
            return True
    joined = f" {' '.join(words)} "
    return any(phrase in joined for phrase in _CONSTRAINT_PHRASES)


def mentions_time(text: str) -> bool:
    """True when the text names a time: a relative time word ("yesterday", "last week", "ago"), a
    month, a year, a weekday or a season."""
    return _TIME_MENTION.search(text) is not None


def informative_query(query: str, word_share: Mapping[str, float], *, max_share: float = 0.15) -> str:
    """`query` without the words found in more than `max_share` of the owner's memories.

    `word_share` maps lower-cased query words to the fraction of the owner's memories containing
    them. Returns the query unchanged when every word would go."""
    kept = [w for w in query.split() if word_share.get(_first_word(w), 0.0) <= max_share]
    return " ".join(kept) if kept else query


def query_words(query: str) -> list[str]:
    """The lower-cased words `informative_query` looks up in `word_share`, one per token."""
    return [_first_word(token) for token in query.split()]


def _first_word(token: str) -> str:
    found = _WORD.findall(token.lower())
    return found[0] if found else ""
