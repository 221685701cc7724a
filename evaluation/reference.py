"""The reference extractor of `pmem eval locomo --extractor reference`: LoCoMo's own observations
(written for the data set by a GPT model) as the extractor's reply, so the product is measured on
facts as a capable model writes them, not only on the offline rules extractor's.

For the event of one session sent as one speaker, the reply holds that speaker's observations of
that session: per observation a key (its first content words), the observation as value, scope
`user`, and as evidence the numbers of the messages its dia_ids name. The reply is a JSON text
parsed and validated by the same `extraction.validate.parse_output` and screened by the same
`merged_and_screened` as an LLM's; grounding, dedup and the write follow in the pipeline."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evaluation.extracted import session_events
from evaluation.locomo import Conversation, Unit
from extraction.types import ExtractionRequest, ExtractionResult, Rejection
from extraction.validate import merged_and_screened, parse_output

# words a key leaves out: a capable model names the topic, not the person or the grammar
_KEY_SKIP = frozenset(
    (
        "a", "an", "the", "and", "or", "but", "of", "to", "in", "on", "at", "for", "from", "with",
        "by", "about", "as", "is", "are", "was", "were", "be", "been", "has", "have", "had", "do",
        "does", "did", "not", "no", "this", "that", "these", "those", "it", "its", "their", "his",
        "her", "he", "she", "they", "them", "i", "me", "my", "we", "our", "you", "your", "recently",
        "also", "currently", "really", "very", "just", "some", "many", "much", "more", "most", "other",
        "new", "last", "first",
    )
)  # fmt: skip
_WORD = re.compile(r"[a-z0-9]+")
_POSSESSIVE = re.compile(r"['’]s\b")
KEY_WORDS = 4  # of at most 6 the validator accepts


def observation_key(text: str, speaker: str) -> str:
    """A key for one observation: its first `KEY_WORDS` content words, without the speaker's name
    ("Caroline attended an LGBTQ support group" → `attended_lgbtq_support_group`)."""
    names = {part.lower() for part in speaker.split()}
    words = [w for w in _WORD.findall(_POSSESSIVE.sub("", text.lower())) if w not in _KEY_SKIP | names]
    return "_".join(words[:KEY_WORDS]) or "observation"


def reference_reply(observations: Sequence[Unit], positions: Mapping[str, int]) -> str:
    """The reply an LLM would give for these observations: a JSON object with a `memories` list;
    `positions`: each dia_id's message number in the event (from 1)."""
    memories = [
        {
            "key": observation_key(unit.text, unit.speaker),
            "value": unit.text,
            "confidence": 0.9,
            "scope": "user",
            "evidence": [positions[d] for d in unit.dia_ids if d in positions],
        }
        for unit in observations
    ]
    return json.dumps({"memories": memories})


@dataclass(frozen=True, slots=True)
class _Session:
    observations: tuple[Unit, ...]
    positions: Mapping[str, int]


def _transcript_key(messages: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((role, content.strip()) for role, content in messages)


class ReferenceExtractor:
    """`Extractor` answering each LoCoMo session event with the speaker's observations of that
    session (see the module docstring); an event it does not know gets an empty reply."""

    def __init__(self, conversations: Sequence[Conversation]) -> None:
        """Index every session event of `conversations` by its transcript (roles and texts)."""
        import uuid

        self._sessions: dict[tuple[tuple[str, str], ...], _Session] = {}
        for conversation in conversations:
            for item in session_events(conversation, uuid.UUID(int=0)):
                turns = [t for t in conversation.turns if t.session == item.session]
                observed = tuple(
                    unit
                    for unit in conversation.observations
                    if unit.session == item.session and unit.speaker == item.speaker
                )
                key = _transcript_key([(m.role, m.content) for m in item.event.messages])
                positions = {turn.dia_id: number for number, turn in enumerate(turns, start=1)}
                self._sessions[key] = _Session(observations=observed, positions=positions)

    async def extract(self, request: ExtractionRequest) -> ExtractionResult:
        """The session's observations as a validated, screened reply."""
        found = self._sessions.get(_transcript_key([(m.role, m.content) for m in request.messages]))
        if found is None:
            return ExtractionResult(
                candidates=(),
                rejected=(Rejection(code="refused", reason="not a LoCoMo session event", raw=""),),
            )
        candidates, rejections = parse_output(
            reference_reply(found.observations, found.positions), request.allowed_scopes
        )
        screened, unsafe = merged_and_screened(candidates)
        return ExtractionResult(candidates=tuple(screened), rejected=(*rejections, *unsafe))

    async def close(self) -> None:
        """Nothing to close."""
