"""The pure planning of one event (no I/O): the policy's scopes and owners, the transcript and its
redaction, candidate grounding and screening, the evidence of each fact, the turns to store, the
embedding batch and the rows to write, and what to do with an event whose processing failed.
`worker.pipeline.process_event` runs these against the store, the extractor and the embedder."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np

from extraction.dedup import dedup_candidates
from extraction.errors import PermanentEmbeddingError, PermanentError, TransientEmbeddingError, TransientError
from extraction.grounding import DEFAULT_GROUNDING, PERSONA_GROUNDING, GroundingConfig, grounding
from extraction.types import Candidate, TranscriptMessage
from store.errors import StoreTimeout, StoreUnavailable
from store.model import (
    Memory,
    MemorySettings,
    NewMemory,
    NewTurn,
    OwnerRef,
    Scope,
    TurnRole,
)
from store.rules.admission import admit, has_content
from store.rules.evidence import quoted_text
from store.rules.forgetting import TURN_SEARCH_AFTER, TURN_SEARCH_BEFORE
from store.rules.keys import embedding_text
from store.rules.terms import STOPWORDS, query_terms
from store.rules.turn_recall import TURN_MAX_CHARS
from worker.events import ConversationEnded, EventMessage

# the pipeline's logger: a dropped candidate or turn is logged as the pipeline's
log = logging.getLogger("pmem.pipeline")


def allowed_scopes(event: ConversationEnded, policy: MemorySettings) -> tuple[Scope, ...]:
    """Scopes this event may write: none when memory is disabled; `user` only without a persona;
    with a persona `user` and `persona_user`, plus `persona` when persona learning is on."""
    if not policy.enabled:
        return ()
    if event.persona_id is None:
        return ("user",)
    if policy.persona_learning:
        return ("user", "persona", "persona_user")
    return ("user", "persona_user")


class UnknownPersona(Exception):
    """The event names a persona the directory does not know, and its team accepts known personas
    only (`known_personas_only`): dead-lettered at once (`unknown_persona`), replayable once the
    persona is registered or the setting is off."""


def unknown_persona(event: ConversationEnded, policy: MemorySettings, known: bool) -> str | None:
    """Why the event must not be processed (its persona is unknown to a team that accepts known
    personas only), or None. An event without a persona is never refused for it."""
    if not policy.known_personas_only or event.persona_id is None or known:
        return None
    team = f"team {event.team_id}" if event.team_id is not None else "this deployment"
    return (
        f"persona {event.persona_id} is not in the directory and {team} accepts known personas "
        f"only (known_personas_only); register it (PUT /v1/directory/personas/{event.persona_id}) "
        "or turn the setting off, then replay it (pmem dlq replay)"
    )


def owner_for(scope: Scope, event: ConversationEnded) -> OwnerRef:
    """Owner of a memory of `scope` from this event. The LLM never chooses owner ids."""
    if scope == "user":
        return OwnerRef(scope="user", owner_id=event.user_id)
    if event.persona_id is None:
        raise ValueError(f"scope {scope!r} needs a persona, and event {event.event_id} has none")
    if scope == "persona":
        return OwnerRef(scope="persona", owner_id=event.persona_id)
    return OwnerRef(scope="persona_user", owner_id=event.persona_id, user_id=event.user_id)


def owners_for(event: ConversationEnded, scopes: Sequence[Scope]) -> tuple[OwnerRef, ...]:
    """One owner per allowed scope."""
    return tuple(owner_for(scope, event) for scope in scopes)


def transcript(event: ConversationEnded) -> tuple[TranscriptMessage, ...]:
    """The event's messages as the extractor's input."""
    return tuple(TranscriptMessage(role=m.role, content=m.content) for m in event.messages)


def redacted_texts(messages: Sequence[TranscriptMessage] | Sequence[EventMessage]) -> tuple[str, ...]:
    """Each message's text as the product may keep it (`store.rules.admission.admit`: invisible
    characters removed, secrets redacted): what grounding, evidence and turns read (admitted once
    per event, not once by each)."""
    return tuple(admit(m.content).text for m in messages)


DropReason = Literal[
    "ungrounded", "scope_not_allowed", "low_confidence", "duplicate_in_event", "semantic_duplicate"
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Dropped:
    """A candidate the worker did not write, and why (bounded reason: a metric label)."""

    reason: DropReason
    candidate: Candidate


def grounding_sources(
    candidate: Candidate,
    messages: Sequence[TranscriptMessage],
    *,
    redacted: Sequence[str] | None = None,
    names: Sequence[str] = (),
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(cited, transcript): the redacted texts a candidate is checked against: the messages it
    cites (numbers from 1; one naming no message is ignored) first, then the transcript.

    For the transcript: the user's messages, as facts are the user's to state — an assistant's
    suggestion is not the user's fact; a persona-scope candidate is about the assistant, so for it
    every message counts. `redacted`: the messages' redacted texts, when the caller has them.
    `names`: the participants' names the event gives (`participant_names`); a fact that names the
    person it is about ("Melanie paints") is not unsupported for the name, as nobody says their
    own name, so both sources hold them."""
    texts = redacted_texts(messages) if redacted is None else tuple(redacted)
    known = (" ".join(names),) if names else ()
    cited = tuple(texts[n - 1] for n in candidate.evidence if 0 < n <= len(texts))
    if cited:
        cited += known
    if candidate.scope == "persona":
        return cited, texts + known
    return cited, tuple(text for text, m in zip(texts, messages, strict=True) if m.role == "user") + known


def participant_names(event: ConversationEnded) -> tuple[str, ...]:
    """The names of who took part, as the event gives them: each message's speaker, the user's and
    the persona's display names."""
    named = [m.name for m in event.messages] + [event.user_name, event.persona_name]
    return tuple(dict.fromkeys(name for name in named if name))


def ground_candidates(
    candidates: Sequence[Candidate],
    messages: Sequence[TranscriptMessage],
    *,
    redacted: Sequence[str] | None = None,
    names: Sequence[str] = (),
    config: GroundingConfig = DEFAULT_GROUNDING,
    persona_config: GroundingConfig = PERSONA_GROUNDING,
) -> tuple[tuple[Candidate, ...], tuple[Dropped, ...]]:
    """Keep candidates their messages support (partial support lowers the confidence); the rest
    are dropped as `ungrounded` (extraction/grounding.py). `redacted`: the messages' redacted
    texts (`redacted_texts`), when the caller has them; `names`: the participants' names
    (`grounding_sources`)."""
    kept: list[Candidate] = []
    dropped: list[Dropped] = []
    if redacted is None:
        redacted = redacted_texts(messages) if candidates else ()
    for candidate in candidates:
        cited, texts = grounding_sources(candidate, messages, redacted=redacted, names=names)
        rule = persona_config if candidate.scope == "persona" else config
        verdict = grounding(candidate.key, candidate.value, cited=cited, transcript=texts, config=rule)
        if verdict.outcome == "reject":
            dropped.append(Dropped(reason="ungrounded", candidate=candidate))
            log.info(
                "candidate dropped (ungrounded, %s): score %.2f, %d of %d content words supported, "
                "key %d chars, value %d chars, %d cited messages",
                verdict.cause,
                verdict.score,
                verdict.supported_words,
                verdict.content_words,
                len(candidate.key),
                len(candidate.value),
                len(cited),
                extra={"rejection": "ungrounded", "grounding": verdict.cause},
            )
        elif verdict.outcome == "partial":
            kept.append(
                dataclasses.replace(candidate, confidence=candidate.confidence * verdict.confidence_factor)
            )
        else:
            kept.append(candidate)
    return tuple(kept), tuple(dropped)


def screen_candidates(
    candidates: Sequence[Candidate], *, allowed: Sequence[Scope], min_confidence: float
) -> tuple[tuple[Candidate, ...], tuple[Dropped, ...]]:
    """Keep candidates of allowed scopes at or above `min_confidence` (in order); the rest are
    dropped with their reason."""
    kept: list[Candidate] = []
    dropped: list[Dropped] = []
    for candidate in candidates:
        if candidate.scope not in allowed:
            # defence in depth: the extractor filters too, but the owner decision is the worker's
            dropped.append(Dropped(reason="scope_not_allowed", candidate=candidate))
        elif not (candidate.confidence >= min_confidence):  # also drops NaN
            dropped.append(Dropped(reason="low_confidence", candidate=candidate))
        else:
            kept.append(candidate)
    return tuple(kept), tuple(dropped)


# what a memory keeps of the messages it comes from: each message's first characters
# (`store.rules.evidence.EVIDENCE_MESSAGE_CHARS`), and all of them
EVIDENCE_MAX_CHARS = 1500
# a turn's embedding is the mean direction of its own text's and that of the turn after the up to
# this many turns before it (what it answers), and its full text also holds them and the
# `TURN_SEARCH_AFTER` turns after it (what answered it): the LoCoMo dialog unit's choices on dev,
# kept in the store, which reads a turn again after forgetting one beside it
TURN_CONTEXT = TURN_SEARCH_BEFORE
# how much a memory's embedding leans towards its evidence: the direction of
# unit(fact) + EVIDENCE_EMBEDDING_WEIGHT * unit(evidence, then fact); 0 ignores the evidence
EVIDENCE_EMBEDDING_WEIGHT = 1.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """What a candidate's evidence numbers resolve to: the cited messages' text (redacted, with the
    speaker's role, capped), when they were said, and how many numbers named no message."""

    text: str | None
    observed_at: datetime | None
    dropped: int = 0


def said_at(event: ConversationEnded, index: int) -> datetime | None:
    """When message `index` (0-based) was said: its own time, else the event's."""
    return event.messages[index].at or event.occurred_at


def resolve_evidence(
    event: ConversationEnded, numbers: Sequence[int], redacted: Sequence[str] | None = None
) -> Evidence:
    """The messages a candidate cites (numbers from 1, as the prompt shows them) as
    `role: text` lines, redacted and capped; `observed_at` is the first cited message's time (else
    the event's). A number naming no user or assistant message with text is dropped (counted),
    never the fact. `redacted`: the event's `redacted_texts`, when the caller has them."""
    lines: list[str] = []
    first: int | None = None
    dropped = 0
    used = 0
    for number in numbers:
        index = number - 1
        if not 0 <= index < len(event.messages):
            dropped += 1
            continue
        message = event.messages[index]
        content = message.content.strip()
        if message.role not in ("user", "assistant") or not content:
            dropped += 1
            continue
        if first is None:
            first = index
        said = admit(content).text if redacted is None else redacted[index]
        text = quoted_text(said)
        line = f"{message.role}: {text}"
        if used + len(line) > EVIDENCE_MAX_CHARS:
            break
        lines.append(line)
        used += len(line) + 1
    observed = said_at(event, first) if first is not None else event.occurred_at
    return Evidence(text="\n".join(lines) or None, observed_at=observed, dropped=dropped)


def evidence_embedding_text(candidate: Candidate, evidence: str) -> str:
    """The text embedded beside a fact's own: what was said, then the fact."""
    return f"{evidence}\n{embedding_text(candidate.key, candidate.value)}"


def fold_evidence(own: Sequence[float], with_evidence: Sequence[float], weight: float) -> list[float]:
    """A memory's embedding: the unit direction of its fact's and `weight` times its evidence's
    (both unit vectors), so the wording it was said in is found too."""
    if weight <= 0:
        return list(own)
    folded: list[float] = _folded(unit_rows_of([own]), unit_rows_of([with_evidence]), weight)[0].tolist()
    return folded


def _folded(
    first: np.ndarray[Any, np.dtype[np.float64]], second: np.ndarray[Any, np.dtype[np.float64]], weight: float
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Row by row, the unit direction of `first` plus `weight` times `second` (unit rows both)."""
    return unit_rows_of(first + weight * second)


def turn_texts(event: ConversationEnded, redacted: Sequence[str] | None = None) -> list[tuple[int, str]]:
    """(0-based index, text) of the event's messages kept as turns: user and assistant messages
    with content (`store.rules.admission.has_content`: a letter, digit or emoji once redaction
    markers are removed), admitted, capped at `TURN_MAX_CHARS`. A message without content (only
    redacted secrets, whitespace or punctuation) is logged with its reason and not kept.
    `redacted`: the event's `redacted_texts`."""
    said = redacted_texts(event.messages) if redacted is None else redacted
    kept: list[tuple[int, str]] = []
    for index, (message, text) in enumerate(zip(event.messages, said, strict=True)):
        if message.role not in ("user", "assistant"):
            continue
        if not has_content(text):
            # the reason and the size only: what was said stays out of the log
            reason = "only a redacted secret" if "[REDACTED:" in text else "no words"
            log.info(
                "turn %d of event %s not stored: %s (%d characters)",
                index + 1,
                event.event_id,
                reason,
                len(text),
                extra={"rejection": "turn_without_content"},
            )
            continue
        kept.append((index, text.strip()[:TURN_MAX_CHARS]))
    return kept


def turn_line(event: ConversationEnded, index: int, text: str) -> str:
    """Message `index` as a turn reads to search (its embedding's input and `search_text`, never
    its displayed text): `Speaker said, "text"`, the speaker's name when the event gives one, else
    the role; the LoCoMo dialog unit's wording (`dialog_text`), chosen on dev over `Speaker: text`.
    Turns stored before 2026-12-04 keep the `Speaker: text` they were embedded and searched as (no
    migration rewrites them)."""
    message = event.messages[index]
    return f'{message.name or message.role} said, "{text}"'


def plan_turns(
    event: ConversationEnded, *, now: datetime, redacted: Sequence[str] | None = None
) -> tuple[list[NewTurn], list[str], list[str]]:
    """The event's turns to store (without embeddings, with their search text: the up to
    `TURN_CONTEXT` turns before, the turn, the up to `TURN_SEARCH_AFTER` after), and per turn the
    two texts its embedding is the mean direction of: its own, and the turns before it then itself."""
    kept = turn_texts(event, redacted)
    lines = [turn_line(event, index, text) for index, text in kept]
    turns: list[NewTurn] = []
    own: list[str] = []
    around: list[str] = []
    for position, (index, text) in enumerate(kept):
        message = event.messages[index]
        role: TurnRole = "user" if message.role == "user" else "assistant"
        line = lines[position]
        before = lines[max(0, position - TURN_CONTEXT) : position]
        after = lines[position + 1 : position + 1 + TURN_SEARCH_AFTER]
        turns.append(
            NewTurn(
                channel_id=event.channel_id,
                user_id=event.user_id,
                persona_id=event.persona_id,
                team_id=event.team_id,
                role=role,
                text=text,
                at=said_at(event, index) or now,
                position=index + 1,
                speaker=message.name,
                search_text="\n".join([*before, line, *after]),
            )
        )
        own.append(line)
        around.append("\n".join([*before, line]))
    return turns, own, around


def embedding_batch(
    candidates: Sequence[Candidate],
    evidences: Sequence[Evidence],
    turn_own: Sequence[str],
    turn_around: Sequence[str],
) -> list[str]:
    """Every text an event embeds, for ONE embeddings call: each candidate's fact, the evidence
    then the fact of those with evidence, then each turn's own text and its text in context."""
    facts = [embedding_text(c.key, c.value) for c in candidates]
    cited = [
        evidence_embedding_text(c, e.text)
        for c, e in zip(candidates, evidences, strict=True)
        if e.text is not None
    ]
    return [*facts, *cited, *turn_own, *turn_around]


def split_embeddings(
    vectors: Sequence[Sequence[float]],
    candidates: Sequence[Candidate],
    evidences: Sequence[Evidence],
    turn_count: int,
    *,
    evidence_weight: float = EVIDENCE_EMBEDDING_WEIGHT,
) -> tuple[list[list[float]], list[list[float]]]:
    """`embedding_batch`'s vectors back per candidate (its fact's, folded with its evidence's) and
    per turn (the mean direction of its own and its in-context text's)."""
    if not vectors:
        return [], []
    # the whole batch as one array: a dozen vectors per event, folded in a few array operations
    matrix = np.asarray(vectors, dtype=np.float64)
    count = len(candidates)
    cites = [index for index, found in enumerate(evidences) if found.text is not None]
    memories = matrix[:count].copy()
    if cites and evidence_weight > 0:
        cited = matrix[count : count + len(cites)]
        memories[cites] = _folded(unit_rows_of(memories[cites]), unit_rows_of(cited), evidence_weight)
    start = count + len(cites)
    own = unit_rows_of(matrix[start : start + turn_count])
    around = unit_rows_of(matrix[start + turn_count : start + 2 * turn_count])
    memory_vectors: list[list[float]] = memories.tolist()
    turn_vectors: list[list[float]] = _folded(own, around, 1.0).tolist()
    return memory_vectors, turn_vectors


def unit_rows_of(
    vectors: Sequence[Sequence[float]] | np.ndarray[Any, np.dtype[np.float64]],
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The vectors as rows of a float64 array, each scaled to length 1 (zero rows stay zero)."""
    matrix = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    scaled: np.ndarray[Any, np.dtype[np.float64]] = matrix / norms
    return scaled


def build_row(
    event: ConversationEnded,
    candidate: Candidate,
    embedding: Sequence[float] | None,
    *,
    key: str | None = None,
    evidence: Evidence | None = None,
) -> NewMemory:
    """A `pending_review` row for one candidate (under `key` when dedup matched a stored key),
    owned per its scope, with the event's channel as provenance and the candidate's evidence and
    time (`resolve_evidence`)."""
    owner = owner_for(candidate.scope, event)
    found = evidence or resolve_evidence(event, candidate.evidence)
    return NewMemory(
        scope=candidate.scope,
        owner_id=owner.owner_id,
        user_id=owner.user_id,
        key=candidate.key if key is None else key,
        value=candidate.value,
        confidence=max(0.0, min(1.0, candidate.confidence)),
        status="pending_review",
        source_channel_id=event.channel_id,
        embedding=list(embedding) if embedding is not None else None,
        observed_at=found.observed_at,
        team_id=event.team_id,
        evidence=found.text,
    )


# How many words of the conversation select the prompt's existing keys, and how many keys.
PROMPT_WORDS = 16
PROMPT_KEYS = 40
# Nearest stored neighbours read per candidate inside the write transaction.
DEDUP_NEIGHBOURS = 8


def prompt_words(event: ConversationEnded, *, limit: int = PROMPT_WORDS) -> tuple[str, ...]:
    """The conversation's most frequent informative words (no stopwords, 3+ letters; ties in
    order of appearance): what selects the stored keys shown to the LLM."""
    counts: dict[str, int] = {}
    for message in event.messages:
        if message.role not in ("user", "assistant"):
            continue
        for term in query_terms(message.content):
            if len(term) >= 3 and term not in STOPWORDS and not term.isdigit():
                counts[term] = counts.get(term, 0) + 1
    ranked = sorted(counts, key=lambda term: -counts[term])  # stable: first appearance breaks ties
    return tuple(ranked[:limit])


def plan_rows(
    event: ConversationEnded,
    scopes: Sequence[Scope],
    candidates: Sequence[Candidate],
    embeddings: Sequence[Sequence[float]] | None,
    existing: Sequence[tuple[Memory, Sequence[float] | None]] = (),
) -> tuple[tuple[NewMemory, ...], tuple[Dropped, ...]]:
    """Semantic dedup (extraction/dedup.py) against the existing memories of this event's owners
    and within the batch, then one row per candidate to write. A candidate with an existing key is
    written (the store turns it into an update or a pending revision); one that restates an
    existing memory under another key, or repeats the batch, is dropped."""
    owners = {scope: owner_for(scope, event) for scope in scopes}
    rows: list[NewMemory] = []
    dropped: list[Dropped] = []
    for decision in dedup_candidates(candidates, embeddings, existing, owners=owners):
        if decision.action == "write":
            rows.append(build_row(event, decision.candidate, decision.embedding, key=decision.key))
        else:
            reason: DropReason = (
                "semantic_duplicate" if decision.outcome == "duplicate" else "duplicate_in_event"
            )
            dropped.append(Dropped(reason=reason, candidate=decision.candidate))
    return tuple(rows), tuple(dropped)


FailureCategory = Literal["llm", "embedding", "database", "deadline", "unexpected"]


class EventDeadlineExceeded(Exception):
    """One delivery of an event ran past PMEM_EVENT_TIMEOUT_S (LLM chunks and retries, embeddings,
    database waits included); retried later, dead-lettered with label `deadline_exhausted` on the
    last delivery."""


def exception_line(exc: BaseException) -> str:
    """`Type: first line of the message`: driver errors append the SQL statement and help links on
    further lines, which belong in neither a log line nor a DLQ reason."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


@dataclass(frozen=True, kw_only=True, slots=True)
class FailureDecision:
    """What to do with an event whose processing raised: retry later (nack with a delay) or send it
    to the DLQ now. `label` is bounded (metric label), `reason` is for humans (DLQ header/body)."""

    action: Literal["retry", "dead_letter"]
    delay_s: float
    label: str
    reason: str


def categorize(exc: BaseException) -> tuple[FailureCategory, bool]:
    """(category, transient?) of an exception raised while processing an event."""
    if isinstance(exc, EventDeadlineExceeded):
        return "deadline", True
    if isinstance(exc, TransientEmbeddingError | PermanentEmbeddingError):
        return "embedding", isinstance(exc, TransientError)
    if isinstance(exc, TransientError | PermanentError):
        return "llm", isinstance(exc, TransientError)
    if isinstance(exc, StoreUnavailable | StoreTimeout):
        return "database", True
    # A bug or an unforeseen error: retried like a transient failure, then dead-lettered, so it
    # is neither lost nor retried forever.
    return "unexpected", True


def is_database_unavailable(exc: BaseException) -> bool:
    """True when the store says the database cannot be reached right now (not "this write is
    wrong"): the store translates driver errors into its own exceptions (store.errors)."""
    return isinstance(exc, StoreUnavailable)


def retry_delay(delivery_count: int, *, base_s: float, max_s: float) -> float:
    """Exponential backoff for the next delivery: base, 2·base, 4·base, … capped at `max_s`."""
    exponent = max(0, delivery_count - 1)
    return min(max_s, base_s * (2.0 ** min(exponent, 30)))


def decide_failure(
    exc: BaseException,
    *,
    delivery_count: int,
    max_deliver: int,
    retry_delay_s: float,
    max_retry_delay_s: float,
) -> FailureDecision:
    """Retry transient failures with a delay (the provider's Retry-After when it gave one, else
    exponential backoff) until the `max_deliver`-th delivery; dead-letter permanent ones at once."""
    if isinstance(exc, UnknownPersona):
        return FailureDecision(action="dead_letter", delay_s=0.0, label="unknown_persona", reason=str(exc))
    category, transient = categorize(exc)
    detail = exception_line(exc)
    if not transient:
        return FailureDecision(
            action="dead_letter", delay_s=0.0, label=f"{category}_permanent", reason=detail
        )
    if delivery_count >= max_deliver:
        return FailureDecision(
            action="dead_letter",
            delay_s=0.0,
            label=f"{category}_exhausted",
            reason=f"still failing after {delivery_count} deliveries "
            f"(PMEM_MAX_DELIVER={max_deliver}): {detail}",
        )
    hint = getattr(exc, "retry_after_s", None)
    if isinstance(hint, int | float) and math.isfinite(hint) and hint >= 0:
        delay = min(float(hint), max_retry_delay_s)
    else:
        delay = retry_delay(delivery_count, base_s=retry_delay_s, max_s=max_retry_delay_s)
    return FailureDecision(action="retry", delay_s=delay, label=category, reason=detail)
