"""LoCoMo (Maharana et al., 2024) for recall evaluation: load the JSON into retrievable units and score
retrieval the official way. Pure: no database, no embedder; `load_locomo` is the only I/O.

Scoring (as in the LoCoMo repository's `task_eval/evaluation.py`): a question scores the fraction of
its evidence `dia_id`s found among the `dia_id`s of the top-k retrieved units; a question without
(known) evidence scores 1. The data set is CC BY-NC: read it from where the user keeps it, never
ship it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

UnitKind = Literal["observation", "dialog"]
UNIT_KINDS: tuple[UnitKind, ...] = ("observation", "dialog")
Split = Literal["dev", "test", "all"]
SPLITS: tuple[Split, ...] = ("dev", "test", "all")
# what an observation is embedded beside (`Conversation.observation_context_texts`): nothing, or the
# dialog turns it cites
ObservationContext = Literal["none", "source"]
OBSERVATION_CONTEXTS: tuple[ObservationContext, ...] = ("none", "source")

# The data set's `category` ids (the paper's table order differs; these are the ids in the JSON).
CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

_SESSION_KEY = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D(\d+):(\d+)")
_ID_SEPARATORS = re.compile(r"[;,\s]+")


class LocomoFormatError(ValueError):
    """The file is not LoCoMo-shaped; the message names the offending path in the JSON."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Turn:
    """One dialog turn."""

    dia_id: str
    session: int
    speaker: str
    text: str
    blip_caption: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Unit:
    """One retrievable text (an observation or a dialog turn) with the dia_ids it stands for."""

    kind: UnitKind
    text: str
    dia_ids: tuple[str, ...]
    session: int
    speaker: str
    session_date: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Question:
    """One QA item; `evidence` holds the normalised, known dia_ids (`raw_evidence` as in the file)."""

    question: str
    answer: str | None
    category: int
    evidence: tuple[str, ...]
    raw_evidence: tuple[str, ...]

    @property
    def category_name(self) -> str:
        """The category's name (`multi-hop`, …), or `category-<id>` for an id outside 1–5."""
        return CATEGORY_NAMES.get(self.category, f"category-{self.category}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Conversation:
    """One LoCoMo sample: its turns, observations and questions."""

    sample_id: str
    speakers: tuple[str, ...]
    session_dates: Mapping[int, str]
    turns: tuple[Turn, ...]
    observations: tuple[Unit, ...]
    questions: tuple[Question, ...]

    @property
    def dia_ids(self) -> frozenset[str]:
        """Every dia_id of the conversation's turns."""
        return frozenset(turn.dia_id for turn in self.turns)

    def units(self, kind: UnitKind) -> tuple[Unit, ...]:
        """The conversation's retrievable units of one kind."""
        if kind == "observation":
            return self.observations
        return tuple(dialog_unit(turn, self.session_dates.get(turn.session)) for turn in self.turns)

    def preceding_texts(self, kind: UnitKind, context: int) -> tuple[str, ...]:
        """Per unit of `units(kind)`, in order, what comes before it: for a dialog turn, the up to
        `context` turns before it in the same session, one per line ("" for a session's first
        turn); for any other unit, or `context` 0, ""."""
        return self._session_neighbours(kind, context, after=False)

    def following_texts(self, kind: UnitKind, context: int) -> tuple[str, ...]:
        """Per unit of `units(kind)`, in order, what comes after it: for a dialog turn, the up to
        `context` turns after it in the same session, one per line ("" for a session's last turn);
        for any other unit, or `context` 0, ""."""
        return self._session_neighbours(kind, context, after=True)

    def _session_neighbours(self, kind: UnitKind, context: int, *, after: bool) -> tuple[str, ...]:
        units = self.units(kind)
        if kind != "dialog" or context <= 0:
            return tuple("" for _ in units)
        return tuple(
            "\n".join(
                u.text
                for u in (units[i + 1 : i + 1 + context] if after else units[max(0, i - context) : i])
                if u.session == unit.session
            )
            for i, unit in enumerate(units)
        )

    def context_texts(self, kind: UnitKind, context: int) -> tuple[str, ...]:
        """Per unit of `units(kind)`, in order, the text a store of conversation turns embeds *beside*
        the unit's own: for a dialog turn with `context` > 0, the up to `context` turns before it in
        the same session and the turn itself, one per line (what the turn answers, then the turn);
        for any other unit, or `context` 0, the unit's text."""
        return tuple(
            f"{before}\n{unit.text}" if before else unit.text
            for before, unit in zip(self.preceding_texts(kind, context), self.units(kind), strict=True)
        )

    def source_texts(self, preceding: int = 0) -> tuple[str, ...]:
        """Per observation, in order, the dialog turns it cites (as `dialog_text` reads them, in the
        order cited), one per line: what the extractor read when it wrote the fact ("" when it cites
        no turn of the conversation). With `preceding` > 0 each cited turn comes after the up to
        `preceding` turns before it in its session that are not cited or listed already (the
        question a cited answer replies to)."""
        order = self.turns
        position = {turn.dia_id: index for index, turn in enumerate(order)}
        texts: list[str] = []
        for unit in self.observations:
            cited = set(unit.dia_ids)
            listed: list[int] = []
            for dia_id in unit.dia_ids:
                if dia_id not in position:
                    continue
                at = position[dia_id]
                before = [
                    i
                    for i in range(max(0, at - preceding), at)
                    if order[i].session == order[at].session
                    and order[i].dia_id not in cited
                    and i not in listed
                ]
                listed.extend([*before, at])
            texts.append(
                "\n".join(dialog_text(order[i].speaker, order[i].text, order[i].blip_caption) for i in listed)
            )
        return tuple(texts)

    def observation_context_texts(self, context: ObservationContext) -> tuple[str, ...]:
        """Per observation, in order, the text a store embeds *beside* the observation's own: with
        `context` "source", its `source_texts` and then the observation, one per line; with "none",
        or for an observation citing no turn, the observation's text."""
        sources = self.source_texts() if context == "source" else tuple("" for _ in self.observations)
        return tuple(
            f"{source}\n{unit.text}" if source else unit.text
            for source, unit in zip(sources, self.observations, strict=True)
        )


# -- dia_id normalisation ---------------------------------------------------------------------------


def canonical_dia_id(token: str) -> str | None:
    """`D<session>:<turn>` with leading zeros dropped (`D30:05` → `D30:5`); None if not that shape."""
    match = _DIA_ID.fullmatch(token.strip())
    if match is None:
        return None
    return f"D{int(match.group(1))}:{int(match.group(2))}"


def split_dia_ids(raw: str | Sequence[str]) -> list[str]:
    """Split evidence strings on `;`, `,` and whitespace into canonical dia_ids (malformed tokens dropped)."""
    items = [raw] if isinstance(raw, str) else list(raw)
    out: list[str] = []
    for item in items:
        for token in _ID_SEPARATORS.split(str(item)):
            canonical = canonical_dia_id(token) if token else None
            if canonical is not None and canonical not in out:
                out.append(canonical)
    return out


def normalise_evidence(raw: str | Sequence[str], known: Iterable[str]) -> tuple[str, ...]:
    """The evidence's dia_ids that exist in the conversation (`known`), in order, without duplicates."""
    known_ids = known if isinstance(known, (set, frozenset)) else set(known)
    return tuple(dia_id for dia_id in split_dia_ids(raw) if dia_id in known_ids)


# -- units ------------------------------------------------------------------------------------------


def dialog_text(speaker: str, text: str, blip_caption: str | None = None) -> str:
    """A dialog turn as a memory: `<speaker> said, "<text>"`, plus ` [shares <caption>]` for an image."""
    out = f'{speaker} said, "{text.strip()}"'
    if blip_caption:
        out += f" [shares {blip_caption.strip()}]"
    return out


def dialog_unit(turn: Turn, session_date: str | None = None) -> Unit:
    """The retrievable unit for one dialog turn."""
    return Unit(
        kind="dialog",
        text=dialog_text(turn.speaker, turn.text, turn.blip_caption),
        dia_ids=(turn.dia_id,),
        session=turn.session,
        speaker=turn.speaker,
        session_date=session_date,
    )


# -- parsing ----------------------------------------------------------------------------------------


def _require(mapping: Any, key: str, where: str) -> Any:
    if not isinstance(mapping, dict) or key not in mapping:
        raise LocomoFormatError(f"{where}: missing key {key!r}; is this the LoCoMo JSON (locomo10.json)?")
    return mapping[key]


def _parse_turns(conversation: Mapping[str, Any], where: str) -> tuple[list[Turn], dict[int, str]]:
    turns: list[Turn] = []
    dates: dict[int, str] = {}
    sessions = sorted(
        (int(m.group(1)), key) for key in conversation if (m := _SESSION_KEY.fullmatch(key)) is not None
    )
    for number, key in sessions:
        date = conversation.get(f"{key}_date_time")
        if isinstance(date, str):
            dates[number] = date
        raw_turns = conversation[key]
        if not isinstance(raw_turns, list):
            raise LocomoFormatError(f"{where}.{key}: expected a list of turns")
        for index, raw in enumerate(raw_turns):
            turn_where = f"{where}.{key}[{index}]"
            dia_id = canonical_dia_id(str(_require(raw, "dia_id", turn_where)))
            if dia_id is None:
                raise LocomoFormatError(f"{turn_where}: dia_id {raw['dia_id']!r} is not D<session>:<turn>")
            caption = raw.get("blip_caption")
            turns.append(
                Turn(
                    dia_id=dia_id,
                    session=number,
                    speaker=str(_require(raw, "speaker", turn_where)),
                    text=str(_require(raw, "text", turn_where)),
                    blip_caption=str(caption) if caption else None,
                )
            )
    return turns, dates


def _parse_observations(
    observation: Any, dates: Mapping[int, str], known: frozenset[str], where: str
) -> list[Unit]:
    if not isinstance(observation, dict):
        raise LocomoFormatError(f"{where}: expected an object of session_N_observation entries")
    units: list[Unit] = []
    sessions = sorted(
        (int(m.group(1)), key)
        for key in observation
        if (m := re.fullmatch(r"session_(\d+)_observation", key)) is not None
    )
    for number, key in sessions:
        per_speaker = observation[key]
        if not isinstance(per_speaker, dict):
            raise LocomoFormatError(f"{where}.{key}: expected an object of speaker → facts")
        for speaker, facts in per_speaker.items():
            for index, fact in enumerate(facts):
                if not isinstance(fact, list) or len(fact) != 2:
                    raise LocomoFormatError(f"{where}.{key}.{speaker}[{index}]: expected [text, dia_id(s)]")
                text, raw_ids = fact
                units.append(
                    Unit(
                        kind="observation",
                        text=str(text).strip(),
                        dia_ids=normalise_evidence(raw_ids, known),
                        session=number,
                        speaker=str(speaker),
                        session_date=dates.get(number),
                    )
                )
    return units


def _parse_question(raw: Any, known: frozenset[str], where: str) -> Question:
    evidence = _require(raw, "evidence", where)
    raw_evidence = (evidence,) if isinstance(evidence, str) else tuple(str(e) for e in evidence)
    answer = raw.get("answer", raw.get("adversarial_answer"))
    return Question(
        question=str(_require(raw, "question", where)),
        answer=None if answer is None else str(answer),
        category=int(_require(raw, "category", where)),
        evidence=normalise_evidence(raw_evidence, known),
        raw_evidence=raw_evidence,
    )


def parse_locomo(data: Any) -> list[Conversation]:
    """Conversations from the parsed LoCoMo JSON (a list of samples)."""
    if not isinstance(data, list):
        raise LocomoFormatError("top level: expected a list of conversations (locomo10.json)")
    conversations: list[Conversation] = []
    for index, sample in enumerate(data):
        where = f"[{index}]"
        sample_id = str(sample.get("sample_id", f"sample-{index}")) if isinstance(sample, dict) else ""
        conversation = _require(sample, "conversation", where)
        turns, dates = _parse_turns(conversation, f"{where}.conversation")
        known = frozenset(turn.dia_id for turn in turns)
        observations = _parse_observations(
            sample.get("observation", {}), dates, known, f"{where}.observation"
        )
        questions = [
            _parse_question(raw, known, f"{where}.qa[{q}]")
            for q, raw in enumerate(_require(sample, "qa", where))
        ]
        speakers = tuple(str(conversation[key]) for key in ("speaker_a", "speaker_b") if key in conversation)
        conversations.append(
            Conversation(
                sample_id=sample_id,
                speakers=speakers,
                session_dates=dates,
                turns=tuple(turns),
                observations=tuple(observations),
                questions=tuple(questions),
            )
        )
    return conversations


def load_locomo(path: str | Path) -> list[Conversation]:
    """Read and parse a LoCoMo JSON file (e.g. locomo10.json)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise LocomoFormatError(
            f"{file}: no such file; pass the path of the LoCoMo JSON (locomo10.json)"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise LocomoFormatError(f"{file}: cannot read it ({exc}); pass the LoCoMo JSON file") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LocomoFormatError(f"{file}: not valid JSON ({exc}); pass the LoCoMo JSON file") from exc
    return parse_locomo(data)


# -- held-out split ---------------------------------------------------------------------------------


def split_of(index: int, count: int) -> Split:
    """`dev` for the first half of `count` conversations in file order (the larger half when odd),
    `test` for the rest: constants are chosen on `dev`, reported on `test`."""
    return "dev" if index < (count + 1) // 2 else "test"


def select_split(conversations: Sequence[Conversation], split: Split) -> list[Conversation]:
    """The conversations of one split (`all`: every one), in file order."""
    if split == "all":
        return list(conversations)
    return [c for i, c in enumerate(conversations) if split_of(i, len(conversations)) == split]


# -- scoring ----------------------------------------------------------------------------------------


def evidence_recall(evidence: Sequence[str], retrieved: Iterable[Iterable[str]]) -> float:
    """Fraction of `evidence` dia_ids covered by the retrieved units' dia_ids; 1.0 for no evidence."""
    if not evidence:
        return 1.0
    covered = {dia_id for unit_ids in retrieved for dia_id in unit_ids}
    return sum(1 for dia_id in evidence if dia_id in covered) / len(evidence)


@dataclass(frozen=True, kw_only=True, slots=True)
class QuestionResult:
    """What the retriever returned for one question: the ranked units' dia_ids and texts, best first."""

    category: int
    evidence: tuple[str, ...]
    ranked: tuple[tuple[str, ...], ...]
    answer: str | None = None
    texts: tuple[str, ...] | None = None  # None: not recorded (no answer recall)


_ANSWER_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_ARTICLES = frozenset({"a", "an", "the"})


def answer_tokens(text: str) -> list[str]:
    """Normalised tokens for answer matching: lower case, runs of letters and digits (punctuation and
    `_` separate), the articles a/an/the dropped."""
    return [t for t in _ANSWER_TOKEN.findall(text.lower()) if t not in _ARTICLES]


def answer_found(answer: str, texts: Iterable[str]) -> bool:
    """True when every normalised token of `answer` occurs among the normalised tokens of `texts`
    taken together (an answer with no token is never found)."""
    wanted = _token_set(answer)
    if not wanted:
        return False
    pool: set[str] = set()
    for text in texts:
        pool.update(_token_set(text))
        if wanted <= pool:
            return True
    return False


@functools.lru_cache(maxsize=65_536)
def _token_set(text: str) -> frozenset[str]:
    # the same texts are scored at every k, category and split: tokenise each once
    return frozenset(answer_tokens(text))


def answerable(result: QuestionResult) -> bool:
    """Questions scored by answer recall: a gold answer with at least one token, not adversarial
    (category 5: the right answer is that the conversation does not say)."""
    return result.category != 5 and result.answer is not None and bool(answer_tokens(result.answer))


def answer_recall_at_k(result: QuestionResult, k: int) -> float:
    """1.0 when the gold answer is found in the top-k texts (`answer_found`), else 0.0."""
    texts = result.texts or ()
    return 1.0 if result.answer is not None and answer_found(result.answer, texts[:k]) else 0.0


def recall_at_k(result: QuestionResult, k: int) -> float:
    """`evidence_recall` of one question over its top-k results."""
    return evidence_recall(result.evidence, result.ranked[:k])


def parse_ks(text: str) -> tuple[int, ...]:
    """`"5,10,25,50"` → (5, 10, 25, 50): sorted, unique, each ≥ 1."""
    try:
        ks = sorted({int(part) for part in text.replace(" ", "").split(",") if part})
    except ValueError as exc:
        raise ValueError(f"--k expects comma-separated integers such as 5,10,25,50, got {text!r}") from exc
    if not ks or ks[0] < 1:
        raise ValueError(f"--k expects positive integers such as 5,10,25,50, got {text!r}")
    return tuple(ks)


def summarise(results: Sequence[QuestionResult], ks: Sequence[int]) -> dict[str, Any]:
    """Mean recall@k over all questions and per category:
    `{"questions": N, "recall@5": …, "by_category": {"multi-hop": {"questions": n, "recall@5": …}}}`;
    where the results carry texts, also `answer_recall@k` over the `answer_questions` that are
    `answerable`.
    Categories appear in id order; a question set without a category leaves it out."""
    summary = _scores(results, ks)
    by_category: dict[str, Any] = {}
    for category in sorted({r.category for r in results}):
        members = [r for r in results if r.category == category]
        name = CATEGORY_NAMES.get(category, f"category-{category}")
        by_category[name] = _scores(members, ks)
    summary["by_category"] = by_category
    return summary


def _scores(results: Sequence[QuestionResult], ks: Sequence[int]) -> dict[str, Any]:
    entry: dict[str, Any] = {"questions": len(results)}
    for k in ks:
        entry[f"recall@{k}"] = _mean([recall_at_k(r, k) for r in results])
    scored = [r for r in results if answerable(r) and r.texts is not None]
    if scored:
        entry["answer_questions"] = len(scored)
        for k in ks:
            entry[f"answer_recall@{k}"] = _mean([answer_recall_at_k(r, k) for r in scored])
    return entry


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def session_datetime(session_date: str | None) -> datetime | None:
    """The time of a session (`"1:56 pm on 8 May, 2023"`, UTC) or None when absent or unreadable."""
    if not session_date:
        return None
    text = " ".join(session_date.split())
    for layout in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B, %Y"):
        try:
            return datetime.strptime(text, layout).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None
