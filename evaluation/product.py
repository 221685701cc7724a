"""LoCoMo through the product as a user runs it (pure part): which dialog turn each recalled item
stands for, and the per-question results the official scoring reads.

The runner sends every session through the pipeline as `conversation.ended` events
(`evaluation.extracted.session_events`), so each LoCoMo turn is one message of an event whose
channel is the session. Recall returns memories and stored turns: a turn covers its own dia_id, a
memory the dia_ids of its evidence (the messages it was extracted from). This module maps those back
to dia_ids: by the message's position in its conversation when the product records it, else by its
text (the product stores redacted, capped text, so an exact match is not always possible)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from evaluation.extracted import session_events
from evaluation.locomo import Conversation, Question, QuestionResult
from store.model import RecallInclude
from store.rules.evidence import evidence_lines

Include = Literal["memories", "turns", "both"]
INCLUDES: tuple[Include, ...] = ("memories", "turns", "both")
ItemKind = Literal["memory", "turn"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# how much of a quote's words a message must share to be taken as its source when nothing matches
# exactly (a redacted e-mail address or phone number changes a few words, not half of them)
_MIN_SHARED_WORDS = 0.6
_MIN_SHARED_WORD_COUNT = 4
# a quote found inside a longer message (a capped quote is its start) must be long enough not to
# match by chance ("yes" is inside many messages)
_MIN_INNER_CHARS = 20


@dataclass(frozen=True, kw_only=True, slots=True)
class Quote:
    """One message a recalled item stands for: its conversation (None: unknown), its 0-based position
    in that conversation's messages (None: unknown) and its text as the product returns it."""

    channel_id: uuid.UUID | None
    position: int | None
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Recalled:
    """One item of the product's recall, as the evaluation reads it: its kind, the text a caller
    reads (what answer recall looks in) and the messages it stands for (a turn: itself; a memory:
    its evidence, none without)."""

    kind: ItemKind
    text: str
    quotes: tuple[Quote, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionIndex:
    """Per conversation (channel) id the runner sends, the session's turns in message order as
    (dia_id, message text as sent)."""

    by_channel: Mapping[uuid.UUID, tuple[tuple[str, str], ...]]

    def locate(self, quote: Quote) -> str | None:
        """The dia_id of the turn `quote` stands for, or None when none matches: its position in its
        conversation when recorded (a position out of range matches nothing), else the turn of its
        conversation whose text it is (exactly, inside it as a capped quote is, or sharing most
        words), else such a turn of any conversation."""
        if quote.channel_id is not None:
            turns = self.by_channel.get(quote.channel_id, ())
            if quote.position is not None and 0 <= quote.position < len(turns):
                return turns[quote.position][0]
            found = _match_text(quote.text, turns)
            if found is not None or quote.position is not None:
                return found
        # no conversation, or a quote its conversation does not hold (a fact restated later keeps
        # the later conversation and may keep earlier words): any conversation's turns
        everywhere = tuple(turn for session in self.by_channel.values() for turn in session)
        return _match_text(quote.text, everywhere)

    def dia_ids(self, item: Recalled) -> tuple[str, ...]:
        """The dia_ids `item` covers, in quote order, without duplicates (quotes that match no turn
        are left out)."""
        found = (self.locate(quote) for quote in item.quotes)
        return tuple(dict.fromkeys(dia_id for dia_id in found if dia_id is not None))


def session_index(conversation: Conversation, owner: uuid.UUID) -> SessionIndex:
    """Where each turn of `conversation` lands when its sessions are sent for `owner`
    (`session_events`): the session's channel and the turn's position among its messages."""
    by_channel: dict[uuid.UUID, tuple[tuple[str, str], ...]] = {}
    turns_of = {
        session: [t for t in conversation.turns if t.session == session]
        for session in {t.session for t in conversation.turns}
    }
    for item in session_events(conversation, owner):
        if item.event.channel_id in by_channel:
            continue  # the other speaker's event of the same session: the same messages
        turns = turns_of[item.session]
        by_channel[item.event.channel_id] = tuple(
            (turn.dia_id, message.content) for turn, message in zip(turns, item.event.messages, strict=True)
        )
    return SessionIndex(by_channel=by_channel)


def evidence_quotes(evidence: str | None, channel_id: uuid.UUID | None) -> tuple[Quote, ...]:
    """A memory's evidence as quotes: one per cited message (`store.rules.evidence.evidence_lines`),
    all from the memory's conversation (`channel_id`)."""
    return tuple(
        Quote(channel_id=channel_id, position=None, text=said.text) for said in evidence_lines(evidence)
    )


def include_kinds(include: Include) -> tuple[RecallInclude, ...]:
    """What the product's recall is asked for: `memories`, `turns` or both."""
    if include == "both":
        return ("memories", "turns")
    return ("memories",) if include == "memories" else ("turns",)


def question_result(question: Question, items: Sequence[Recalled], index: SessionIndex) -> QuestionResult:
    """One question's scored result: the ranked items' dia_ids (evidence recall) and texts (answer
    recall), best first."""
    return QuestionResult(
        category=question.category,
        evidence=question.evidence,
        ranked=tuple(index.dia_ids(item) for item in items),
        answer=question.answer,
        texts=tuple(item.text for item in items),
    )


def kinds_count(items: Sequence[Sequence[Recalled]], k: int) -> dict[str, float]:
    """Mean number of memories and of turns among the top `k` items per question (how the fused
    list is made up)."""
    count = len(items)
    if not count:
        return {"memories": 0.0, "turns": 0.0}
    memories = sum(sum(1 for item in ranked[:k] if item.kind == "memory") for ranked in items)
    turns = sum(sum(1 for item in ranked[:k] if item.kind == "turn") for ranked in items)
    return {"memories": memories / count, "turns": turns / count}


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _match_text(text: str, turns: Sequence[tuple[str, str]]) -> str | None:
    wanted = " ".join(_words(text))
    if not wanted:
        return None
    normalised = [(dia_id, " ".join(_words(content))) for dia_id, content in turns]
    for dia_id, content in normalised:
        if content == wanted:
            return dia_id
    if len(wanted) >= _MIN_INNER_CHARS:
        for dia_id, content in normalised:
            if wanted in content:
                return dia_id
    quote_words = set(wanted.split())
    if len(quote_words) < _MIN_SHARED_WORD_COUNT:
        return None
    best: tuple[float, str] | None = None
    for dia_id, content in normalised:
        shared = len(quote_words & set(content.split())) / len(quote_words)
        if shared >= _MIN_SHARED_WORDS and (best is None or shared > best[0]):
            best = (shared, dia_id)
    return best[1] if best else None
