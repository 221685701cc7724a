"""The memory hint injected into the system prompt (`build_hint`), in sections with budgets of their
own, in tokens: "What is known" (the facts, first claim on the budget, pinned facts first in every
hint) and "From earlier conversations" (the turns that add something new, within what the facts
leave). Pure."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from store.model import SCOPE_PRIORITY, Memory, RecallHit, RecallItem, Revision, Turn
from store.rules.evidence import evidence_lines
from store.rules.novelty import new_turn_indexes, unquoted_indexes
from store.rules.tokens import ESTIMATE, TokenCounter, count_tokens, estimate_tokens

DEFAULT_MAX_CHARS = 6000


def _one_line(text: str) -> str:
    # a value with newlines would break the bullet list the model reads
    return " ".join(text.split())


def bullet(memory: Memory) -> str:
    """`- key: value` on one line."""
    return f"- {_one_line(memory.key)}: {_one_line(memory.value)}"


def _ranked(items: Sequence[RecallHit | Memory]) -> list[Memory]:
    hits = [item for item in items if isinstance(item, RecallHit)]
    memories = [item for item in items if isinstance(item, Memory)]
    # recall hits carry their rank as a score; bare memories rank by scope, then confidence, then recency
    ordered_hits = sorted(hits, key=lambda h: -h.score)
    ordered_memories = sorted(
        memories,
        key=lambda m: (SCOPE_PRIORITY[m.scope], -m.confidence, -m.updated_at.timestamp()),
    )
    return [h.memory for h in ordered_hits] + ordered_memories


def build_memory_hint(items: Sequence[RecallHit | Memory], max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Bullets for the given recall hits or memories within `max_chars`; "" when there are none.

    A bullet that does not fit is skipped whole, and later (smaller) ones may still fit."""
    lines: list[str] = []
    used = 0
    seen: set[str] = set()
    for memory in _ranked(items):
        line = bullet(memory)
        if line in seen:
            continue
        cost = len(line) + (1 if lines else 0)  # the newline joining it to the previous bullet
        if used + cost > max_chars:
            continue
        lines.append(line)
        seen.add(line)
        used += cost
    return "\n".join(lines)


# the hint's two sections: what is known (facts), and what was said before (turns)
KNOWN_HEADER = "What is known:"
EARLIER_HEADER = "From earlier conversations:"
# the hint's size in tokens (`store.rules.tokens.count_tokens`) when no other is asked for
DEFAULT_MAX_TOKENS = 1500
# turns get at most this share of the hint, and only what the facts leave: a fact is never
# displaced by a turn. Every fact of the context is shown when all of them fit in the other share
HINT_TURN_SHARE = 0.35
# a fact the recall found this near the message (its cosine) may take the turns' share of the
# budget too; a fact less near only fills the facts' own share, so facts that are not about the
# message leave the turns their room. Chosen on LoCoMo dev (`bench/tune_hint_balance.py`, MiniLM):
# with the reference extractor at 1000 tokens R@1 0.696 with no floor, 0.848 at 0.5, 0.844 at 0.6
# (answer containment 0.401 / 0.414), 0.838 with none ever near; with the rules extractor the
# floor changes nothing there (its facts are few)
FACT_RELEVANCE_FLOOR = 0.6
# each turn's text at most this long
HINT_TURN_CHARS = 300
# a fact's line quotes the messages it comes from, at most this long
HINT_QUOTE_CHARS = 200


def said_on(moment: datetime) -> str:
    """A day as the hint writes it, `8 May 2023`: the words a question about "when" is answered
    in (English month names whatever the locale)."""
    return f"{moment.day} {_MONTHS[moment.month - 1]} {moment.year}"


_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def evidence_said(evidence: str | None) -> tuple[str, ...]:
    """The texts of the messages a memory's evidence quotes, each on one line."""
    return tuple(_one_line(line.text) for line in evidence_lines(evidence))


def quoted(memory: Memory) -> str:
    """The messages a memory comes from as its hint line quotes them: joined by ` / `, clipped to
    `HINT_QUOTE_CHARS` ("" without evidence)."""
    quote = " / ".join(evidence_said(memory.evidence))
    if len(quote) > HINT_QUOTE_CHARS:
        quote = quote[: HINT_QUOTE_CHARS - 1].rstrip() + "…"
    return quote


def dated_bullet(memory: Memory, *, quote: bool = True) -> str:
    """`- key: value (said 8 May 2023) — "what was said"`: the date it was said, when known (what a
    question about "when" or "lately" needs), and, with `quote`, the messages it comes from
    (`quoted`: the words a question is asked in are often the speaker's, not the fact's)."""
    return bullet(memory) + _said_and_quoted(memory, quote=quote)


def _said_and_quoted(memory: Memory, *, quote: bool = True) -> str:
    # what `dated_bullet` adds after the bullet: ` (said 8 May 2023)` and ` — "the quote"`
    return _said_and(memory, quoted(memory) if quote else "")


def _said_and(memory: Memory, said: str) -> str:
    # `_said_and_quoted` with the quote made (`quoted`, "": none)
    tail = f" (said {said_on(memory.observed_at)})" if memory.observed_at else ""
    return f'{tail} — "{said}"' if said else tail


def turn_line(turn: Turn) -> str:
    """`speaker: text` on one line (the role when the speaker is not known), the text clipped to
    `HINT_TURN_CHARS`."""
    text = _one_line(turn.text)
    if len(text) > HINT_TURN_CHARS:
        text = text[: HINT_TURN_CHARS - 1].rstrip() + "…"
    return f"{_one_line(turn.said_by)}: {text}"


def dated_turn_line(turn: Turn) -> str:
    """`[8 May 2023] speaker: text`: the turn with the day it was said (`said_on`, `turn_line`)."""
    return f"[{said_on(turn.at)}] {turn_line(turn)}"


def turn_bullet(turn: Turn) -> str:
    """`- [8 May 2023] speaker: text` on one line (`dated_turn_line`)."""
    return f"- {dated_turn_line(turn)}"


def pending_note(change: Revision | None) -> str:
    """` — a change to X awaits review` for a fact whose proposed change waits in the review queue
    ("" without one): the fact is not stated as certain."""
    if change is None:
        return ""
    return f" — a change to {_one_line(change.new_value)} awaits review"


def fact_line(item: RecallItem, *, quote: bool = True) -> str:
    """A fact's hint line: `dated_bullet` with its change awaiting review right after the value,
    `- lives in: Berlin — a change to Munich awaits review (said 8 May 2023) — "…"`."""
    if item.memory is None:
        raise ValueError("a fact line needs a memory")
    return (
        bullet(item.memory) + pending_note(item.pending_change) + _said_and_quoted(item.memory, quote=quote)
    )


# a fact as the plan reads it: a recall item, or a hit of the context's facts by standing (`every`)
# read as the memory item it stands for, its change awaiting review looked up in `pending`
_Fact = RecallItem | RecallHit


def as_item(fact: _Fact, pending: Mapping[uuid.UUID, Revision]) -> RecallItem:
    """The recall item a fact of the plan stands for: a hit by standing is a memory item with its
    score and its change awaiting review (`pending`), without sources or cosine (nothing ranked it
    near the message)."""
    if isinstance(fact, RecallItem):
        return fact
    change = pending.get(fact.memory.id)
    return RecallItem(kind="memory", score=fact.score, memory=fact.memory, pending_change=change)


def _by_standing(items: Sequence[_Fact]) -> list[_Fact]:
    # facts no recall ranked: the user's own first, then the most certain, then the newest
    def standing(item: _Fact) -> tuple[int, float, float]:
        m = item.memory
        assert m is not None
        return (SCOPE_PRIORITY[m.scope], -m.confidence, -m.updated_at.timestamp())

    return sorted(items, key=standing)


def _line_cost(line: str, counter: TokenCounter) -> int:
    return counter(line) + 1  # the newline before it


class _FactLines:
    """Each fact's full (`fact_line`) and brief (`brief_fact_line`) line with its cost in tokens,
    made once per hint: the plan weighs them and the hint then writes the same lines. Kept by the
    item's identity, so only for items alive as long as this. A hit's change awaiting review is
    looked up in `pending` (`as_item`)."""

    def __init__(self, counter: TokenCounter, pending: Mapping[uuid.UUID, Revision]) -> None:
        self.counter = counter
        self.pending = pending
        self._plain: dict[int, str] = {}
        self._quote: dict[int, str] = {}
        self._full: dict[int, tuple[str, int]] = {}
        self._brief: dict[int, tuple[str, int]] = {}

    def _brief_line(self, item: _Fact) -> str:
        # `brief_fact_line`: the start of the full line too
        line = self._plain.get(id(item))
        if line is None:
            if isinstance(item, RecallItem):
                line = brief_fact_line(item)
            else:
                line = bullet(item.memory) + pending_note(self.pending.get(item.memory.id))
            self._plain[id(item)] = line
        return line

    def quote(self, item: _Fact) -> str:
        """`quoted(item.memory)` ("" without a memory)."""
        said = self._quote.get(id(item))
        if said is None:
            said = self._quote[id(item)] = quoted(item.memory) if item.memory is not None else ""
        return said

    def full(self, item: _Fact) -> tuple[str, int]:
        """`fact_line(item)` and its `_line_cost`."""
        made = self._full.get(id(item))
        if made is None:
            start = self._brief_line(item)  # raises for an item without a memory
            tail = _said_and(item.memory, self.quote(item)) if item.memory is not None else ""
            # a fact without a date or a quote: its full line is its brief one, counted once
            made = (start + tail, _line_cost(start + tail, self.counter)) if tail else self.brief(item)
            self._full[id(item)] = made
        return made

    def brief(self, item: _Fact) -> tuple[str, int]:
        """`brief_fact_line(item)` and its `_line_cost`."""
        made = self._brief.get(id(item))
        if made is None:
            line = self._brief_line(item)
            made = self._brief[id(item)] = (line, _line_cost(line, self.counter))
        return made

    def written(self, planned: Sequence[tuple[_Fact, bool]]) -> list[tuple[str, int]]:
        """The planned facts' lines (in full or brief) with their costs, each message quoted once:
        a fact from a message an earlier line already quotes keeps its date but not the quote (two
        facts said in one sentence would repeat it)."""
        written: list[tuple[str, int]] = []
        shown: set[str] = set()
        for item, whole in planned:
            if not whole or item.memory is None:
                written.append(self.brief(item) if not whole else self.full(item))
                continue
            said = self.quote(item)
            if said and said in shown:
                line = self._brief_line(item) + _said_and(item.memory, "")
                written.append((line, _line_cost(line, self.counter)))
            else:
                written.append(self.full(item))
            shown.add(said)
        return written


def _fits(costs: Iterable[int], budget: int) -> bool:
    """Whether the costs (each positive) sum to at most `budget`, reading them only until they
    pass it."""
    used = 0
    for cost in costs:
        used += cost
        if used > budget:
            return False
    return True


def _fit_lines(lines: Iterable[str], budget: int, counter: TokenCounter) -> tuple[list[str], int]:
    """The lines (each once, order kept) that fit in `budget` tokens, a line that does not fit
    skipped whole; and the tokens they use."""
    kept: list[str] = []
    used = 0
    for line in dict.fromkeys(lines):
        cost = _line_cost(line, counter)
        if used + cost <= budget:
            kept.append(line)
            used += cost
    return kept, used


def brief_fact_line(item: RecallItem) -> str:
    """A fact's line without its date and quote, `- key: value` (with its change awaiting review):
    how the hint names a fact that is not about the message when all of them fit only so."""
    if item.memory is None:
        raise ValueError("a fact line needs a memory")
    return bullet(item.memory) + pending_note(item.pending_change)


def plan_facts(
    relevant: Sequence[RecallItem],
    *,
    budget: int,
    every: Sequence[RecallItem | RecallHit] | None = None,
    pinned: Sequence[RecallItem] = (),
    counter: TokenCounter = count_tokens,
    floor: float | None = None,
    pending: Mapping[uuid.UUID, Revision] | None = None,
) -> list[tuple[RecallItem, bool]]:
    """The facts the hint shows within `budget` tokens, each with whether its line is in full
    (`fact_line`) or brief (`brief_fact_line`): the active `pinned` ones first (pinning never shows
    a fact nobody approved); then, when `every` (all the context's facts) fits in the facts' share
    of the budget (`1 - HINT_TURN_SHARE`), all of them in full, the `relevant` ones first; else,
    when they fit there with the pinned and the near ones (`is_near`) in full and the others brief,
    all of them, the relevant ones in full as far as the share allows; otherwise the relevant ones
    by relevance in full, each that fits: in the whole budget when pinned or near the message, else
    in the facts' share (facts not about the message leave the turns their room). `every` may hold
    the recall's hits by standing, read as `as_item` with `pending`: only the facts shown are made
    items."""
    changes = pending or {}
    lines = _FactLines(counter, changes)
    planned = _planned(relevant, budget=budget, every=every, pinned=pinned, lines=lines, floor=floor)
    return [(as_item(fact, changes), whole) for fact, whole in planned]


def _planned(
    relevant: Sequence[RecallItem],
    *,
    budget: int,
    every: Sequence[_Fact] | None,
    pinned: Sequence[RecallItem],
    lines: _FactLines,
    floor: float | None,
) -> list[tuple[_Fact, bool]]:
    """`plan_facts`, its lines made by `lines`."""
    floor = FACT_RELEVANCE_FLOOR if floor is None else floor
    pinned = [item for item in pinned if item.memory is not None and item.memory.status == "active"]
    pinned_ids = {item.memory.id for item in pinned if item.memory is not None}
    chosen: dict[uuid.UUID, _Fact] = {}
    for item in [*pinned, *relevant, *_by_standing(every or ())]:
        if item.memory is not None and item.memory.id not in chosen:
            chosen[item.memory.id] = item
    share = facts_share(budget)
    if every is not None:
        complete = list(chosen.values())
        # lines are made only until their sum passes the share: with a crowd of facts, the test
        # fails after a few of them, and most lines would be made for nothing
        if _fits((lines.full(item)[1] for item in complete), share):
            return [(item, True) for item in complete]
        in_full = [
            item.memory is not None and (item.memory.id in pinned_ids or _near(item, floor))
            for item in complete
        ]
        mixed = (
            lines.full(item)[1] if whole else lines.brief(item)[1]
            for item, whole in zip(complete, in_full, strict=True)
        )
        if _fits(mixed, share):
            full = [lines.full(item)[1] for item in complete]
            brief = [lines.brief(item)[1] for item in complete]
            cost = sum(f if whole else b for f, b, whole in zip(full, brief, in_full, strict=True))
            relevant_ids = {item.memory.id for item in relevant if item.memory is not None}
            for index, item in enumerate(complete):
                grown = cost + full[index] - brief[index]
                upgrade = not in_full[index] and item.memory is not None and item.memory.id in relevant_ids
                if upgrade and grown <= share:
                    in_full[index], cost = True, grown
            return list(zip(complete, in_full, strict=True))
    ranked: dict[uuid.UUID, RecallItem] = {}
    for item in [*pinned, *relevant]:
        if item.memory is not None:
            ranked.setdefault(item.memory.id, item)
    kept: list[tuple[_Fact, bool]] = []
    used = 0
    for memory_id, item in ranked.items():
        cost = lines.full(item)[1]
        room = budget if memory_id in pinned_ids or _near(item, floor) else share
        if used + cost <= room:
            kept.append((item, True))
            used += cost
    return kept


def facts_share(budget: int) -> int:
    """The tokens of a facts' `budget` that facts not about the message may fill (`plan_facts`):
    all but the turns' share (`HINT_TURN_SHARE`)."""
    return int(budget * (1 - HINT_TURN_SHARE))


# the characters `str.split` (so `_one_line`) takes for whitespace; a fact's line keeps its key's
# and value's other characters, each at least one UTF-8 byte
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
# a fact's listing weight beyond its key's and value's characters that are not whitespace: its
# line's `- ` and `: ` (4 bytes) and its newline's token (4 quarter tokens, `_line_cost`)
LISTED_FACT_EXTRA = 8


def listing_weight(key: str, value: str) -> int:
    """At most 4 × the tokens the line of a fact with this key and value costs the hint, in full
    or brief, under the estimate counter (`estimate_tokens`): a line of b bytes costs
    (b + 3) // 4 + 1 ≥ (b + 4) / 4 tokens, and b ≥ 4 + the key's and value's characters that are
    not whitespace."""
    return len("".join(key.split())) + len("".join(value.split())) + LISTED_FACT_EXTRA


def standing_budget(max_tokens: int, *, counter: str) -> int | None:
    """The listing weight (`listing_weight`, summed over the context's facts by standing) above
    which a hint of `max_tokens` lists none of them in full or brief (`plan_facts` then shows the
    relevant ones alone, as without them); None for a counter other than the estimate (`ESTIMATE`):
    a cl100k token may span many characters, so characters bound its count from below by little."""
    if counter != ESTIMATE:
        return None
    return 4 * facts_share(max_tokens - estimate_tokens(KNOWN_HEADER))


def may_list_standing(weights: Iterable[int], budget: int | None) -> bool:
    """Whether facts by standing of these listing weights (`listing_weight`) may be listed in a
    hint of the standing `budget` (`standing_budget`; None: no bound, they may)."""
    return budget is None or sum(weights) <= budget


def choose_facts(
    relevant: Sequence[RecallItem],
    *,
    budget: int,
    every: Sequence[RecallItem | RecallHit] | None = None,
    pinned: Sequence[RecallItem] = (),
    counter: TokenCounter = count_tokens,
    floor: float | None = None,
    pending: Mapping[uuid.UUID, Revision] | None = None,
) -> list[RecallItem]:
    """The facts the hint shows within `budget` tokens, in order (`plan_facts`)."""
    planned = plan_facts(
        relevant, budget=budget, every=every, pinned=pinned, counter=counter, floor=floor, pending=pending
    )
    return [item for item, _ in planned]


def is_near(item: RecallItem, floor: float) -> bool:
    """Whether the recall found the fact near the message: its cosine at least `floor` (a fact the
    vector branch did not find is not)."""
    return item.cosine is not None and item.cosine >= floor


def _near(fact: _Fact, floor: float) -> bool:
    # `is_near` of a fact of the plan: a hit by standing never is (`as_item`)
    return isinstance(fact, RecallItem) and is_near(fact, floor)


def build_hint(
    items: Sequence[RecallItem],
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    message: str = "",
    every: Sequence[RecallItem | RecallHit] | None = None,
    pinned: Sequence[RecallItem] = (),
    counter: TokenCounter = count_tokens,
    pending: Mapping[uuid.UUID, Revision] | None = None,
    turns_new: bool = False,
) -> str:
    """The prompt hint within `max_tokens` (`counter`): "What is known" (`choose_facts` of the
    recall's memories, `every` and `pinned`), then "From earlier conversations": the recall's turns
    that add something new beside the facts shown for the next `message` (`store.rules.novelty`),
    dated, within what the facts leave of at most `HINT_TURN_SHARE` of the budget. A line that does
    not fit is skipped whole; "" when there is nothing to show. `every` may hold the recall's hits
    by standing, their changes awaiting review in `pending` (`plan_facts`). `turns_new`: the items'
    turns are already those new for `message` (`store.rules.turn_recall.facts_then_turns`), so
    only the quotes of the facts shown are checked against them (`unquoted_indexes`)."""
    relevant = [item for item in items if item.kind == "memory" and item.memory is not None]
    turns = [item.turn for item in items if item.kind == "turn" and item.turn is not None]
    header_cost = counter(KNOWN_HEADER)
    lines = _FactLines(counter, pending or {})
    planned = _planned(
        relevant, budget=max_tokens - header_cost, every=every, pinned=pinned, lines=lines, floor=None
    )
    facts = [item for item, _ in planned]
    costed = lines.written(planned)
    fact_lines = [line for line, _ in costed]
    facts_cost = header_cost + sum(cost for _, cost in costed) if facts else 0
    shown = [item.memory for item in facts if item.memory is not None]
    if turns_new:
        fresh = [turns[i] for i in unquoted_indexes(turns, shown=shown)]
    else:
        fresh = [turns[i] for i in new_turn_indexes(turns, message=message, shown=shown)]
    turn_lines: list[str] = []
    if fresh:
        room = min(int(max_tokens * HINT_TURN_SHARE), max_tokens - facts_cost)
        room -= counter(EARLIER_HEADER) + 2  # the header and the blank line before it
        turn_lines, _ = _fit_lines([turn_bullet(turn) for turn in fresh], room, counter)
    return _within(fact_lines, turn_lines, max_tokens, counter)


def _joined(fact_lines: Sequence[str], turn_lines: Sequence[str]) -> str:
    sections = []
    if fact_lines:
        sections.append("\n".join([KNOWN_HEADER, *fact_lines]))
    if turn_lines:
        sections.append("\n".join([EARLIER_HEADER, *turn_lines]))
    return "\n\n".join(sections)


def _within(fact_lines: list[str], turn_lines: list[str], max_tokens: int, counter: TokenCounter) -> str:
    # lines are budgeted one by one; the joined text may count a token or two more: drop the last
    # turn, then the last fact, until the whole fits
    text = _joined(fact_lines, turn_lines)
    while text and counter(text) > max_tokens:
        if turn_lines:
            turn_lines = turn_lines[:-1]
        else:
            fact_lines = fact_lines[:-1]
        text = _joined(fact_lines, turn_lines)
    return text
