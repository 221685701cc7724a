"""Scoring the hint itself, the text the platform injects into a prompt (pure).

A hint is read as text, the way the model that receives it reads it: a said thing is in the hint
when its words are (a turn line quotes it, or a fact's line quotes it as evidence); a fact is in
the hint when its value is. Words are compared case-folded, punctuation dropped, bounded by word
edges, so "Is vegan" is not found inside "Is veganish". Every check is linear in the text's length.

Hygiene faults are the lines a prompt should not carry: the same thing said twice, a turn with no
content ("Thanks!"), a rejected fact stated, and the user's earlier question that restates the new
message."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from evaluation.locomo import Question, QuestionResult

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# a said thing is matched on at most its first this many words: the hint clips long turns and
# quotes, and the start of a message is what every clipped form keeps
MATCH_WORDS = 12
# a turn line's speaker prefix (`Chef: …`, `user: …`) is at most this long
_SPEAKER_CHARS = 40
_DATE_PREFIX = re.compile(r"\[[^\[\]\n]{0,40}\]\s*")


def words(text: str) -> list[str]:
    """The case-folded words of `text` (letters and digits; punctuation separates)."""
    return _WORD.findall(text.casefold())


def normalised(text: str) -> str:
    """`text` as its words, space-joined with a space at either end, so a word-bounded search is a
    substring search (`holds`)."""
    return f" {' '.join(words(text))} "


def holds(normalised_hint: str, text: str, *, match_words: int = MATCH_WORDS) -> bool:
    """True when `text`'s first `match_words` words occur, in order and word-bounded, in the hint
    (given `normalised`); a text with no words is never held."""
    wanted = words(text)[:match_words]
    if not wanted:
        return False
    return f" {' '.join(wanted)} " in normalised_hint


def content_lines(hint: str) -> list[str]:
    """The hint's item lines: non-empty lines except section headers (a line ending in ':' that is
    not a bullet)."""
    lines = []
    for raw in hint.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.endswith(":") and not line.startswith(("-", "*", "•")):
            continue
        lines.append(line)
    return lines


def said_of(line: str) -> str:
    """What a hint line says, normalised (`normalised`): without its bullet, its `[day]` and its
    `speaker:` (a turn) or `key:` (a fact) prefix, so the same words are the same line whoever
    said them and when."""
    text = line.lstrip("-*• ").strip()
    if text.startswith("["):
        text = _DATE_PREFIX.sub("", text, count=1)
    colon = text.find(": ", 0, _SPEAKER_CHARS)
    if colon > 0:
        text = text[colon + 2 :]
    return normalised(text.rstrip("…"))


# -- LoCoMo ----------------------------------------------------------------------------------------


def evidence_in_hint(hint: str, turn_texts: Mapping[str, str]) -> tuple[str, ...]:
    """The dia_ids among `turn_texts` (dia_id → the turn's text as sent) whose text the hint holds,
    in a turn line or in a fact line quoting it as evidence."""
    hint_words = normalised(hint)
    return tuple(dia_id for dia_id, text in turn_texts.items() if holds(hint_words, text))


def hint_result(question: Question, hint: str, turn_texts: Mapping[str, str]) -> QuestionResult:
    """One question scored on the hint alone, as one retrieved unit: recall@1 is the hint's evidence
    recall (its evidence turns the hint holds) and answer recall@1 its answer containment."""
    wanted = {dia_id: turn_texts[dia_id] for dia_id in question.evidence if dia_id in turn_texts}
    return QuestionResult(
        category=question.category,
        evidence=question.evidence,
        ranked=(evidence_in_hint(hint, wanted),),
        answer=question.answer,
        texts=(hint,),
    )


# -- chat scenarios ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class HintFaults:
    """The hygiene faults of one hint: each offending line (or rejected value) once."""

    repeated: tuple[str, ...] = ()
    filler: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()
    restating: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        """All faults together."""
        return len(self.repeated) + len(self.filler) + len(self.rejected) + len(self.restating)


def repeated_lines(hint: str) -> tuple[str, ...]:
    """Lines saying what an earlier line of the hint already said (the same words, whatever the
    bullet, day or speaker)."""
    seen: set[str] = set()
    repeats: list[str] = []
    for line in content_lines(hint):
        said = said_of(line)
        if said.strip() and said in seen:
            repeats.append(line)
        seen.add(said)
    return tuple(repeats)


def lines_saying(hint: str, texts: Iterable[str]) -> tuple[str, ...]:
    """The hint's lines that say exactly one of `texts` (normalised words equal): a filler turn or
    an earlier question quoted."""
    wanted = {normalised(text) for text in texts} - {"  "}
    return tuple(line for line in content_lines(hint) if said_of(line) in wanted)


def stated_values(hint: str, values: Iterable[str]) -> tuple[str, ...]:
    """The `values` a line of the hint states as a fact: the line says them first (`key: value …`),
    not inside a quoted turn that only mentions the words ("My father eats fish every day")."""
    said = [said_of(line) for line in content_lines(hint)]
    stated = []
    for value in values:
        wanted = normalised(value)
        if wanted.strip() and any(line.startswith(wanted) for line in said):
            stated.append(value)
    return tuple(stated)


def hint_faults(
    hint: str, *, filler: Iterable[str], rejected: Iterable[str], restating: Iterable[str]
) -> HintFaults:
    """The hygiene faults of `hint`: repeated lines, lines quoting a `filler` message, `rejected`
    fact values it states as facts (`stated_values`), and lines quoting a `restating` message (an
    earlier question restating the probe)."""
    return HintFaults(
        repeated=repeated_lines(hint),
        filler=lines_saying(hint, filler),
        rejected=stated_values(hint, rejected),
        restating=lines_saying(hint, restating),
    )


def fact_in_hint(hint: str, value: str) -> bool:
    """True when the hint states the fact's whole value (word-bounded)."""
    return holds(normalised(hint), value, match_words=10_000)


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeScore:
    """One probe's outcome: whether the needed facts are in the hint and among the first recalled
    items, and the hint's hygiene faults."""

    probe: str
    user: str
    split: str
    needed_in_hint: bool
    needed_in_recall: bool
    faults: HintFaults
    missing_from_hint: tuple[str, ...] = ()
    missing_from_recall: tuple[str, ...] = ()


def score_probe(
    *,
    probe: str,
    user: str,
    split: str,
    hint: str,
    recalled_values: Sequence[str],
    needed: Sequence[str],
    filler: Iterable[str],
    rejected: Iterable[str],
    restating: Iterable[str],
) -> ProbeScore:
    """Score one probe: every `needed` fact value in the hint, every one among `recalled_values`
    (the memory values of recall's first items, in order), and the hint's faults."""
    recalled = {normalised(value) for value in recalled_values}
    missing_hint = tuple(value for value in needed if not fact_in_hint(hint, value))
    missing_recall = tuple(value for value in needed if normalised(value) not in recalled)
    return ProbeScore(
        probe=probe,
        user=user,
        split=split,
        needed_in_hint=not missing_hint,
        needed_in_recall=not missing_recall,
        faults=hint_faults(hint, filler=filler, rejected=rejected, restating=restating),
        missing_from_hint=missing_hint,
        missing_from_recall=missing_recall,
    )


def scenario_summary(scores: Sequence[ProbeScore]) -> dict[str, float | int]:
    """Counts over probes: needed fact in the hint, in recall's first items, hints with a fault,
    and faults by kind."""
    return {
        "probes": len(scores),
        "needed_in_hint": sum(score.needed_in_hint for score in scores),
        "needed_in_recall_top10": sum(score.needed_in_recall for score in scores),
        "hints_with_faults": sum(1 for score in scores if score.faults.count),
        "repeated": sum(len(score.faults.repeated) for score in scores),
        "filler": sum(len(score.faults.filler) for score in scores),
        "rejected_stated": sum(len(score.faults.rejected) for score in scores),
        "restating": sum(len(score.faults.restating) for score in scores),
    }
