"""The per-event pipeline: pure planning functions (policy, owners, candidate screening, rows,
failure decisions) and one thin async shell, `process_event`, that runs them against the store,
the extractor and the embedder.

Order (issue 3, bounded by issue 9): policy → the few stored memories most relevant to the
conversation (their keys go into the prompt; a fixed number, whatever the owner's size) →
extraction (prompt, LLM calls, validation, redaction happen inside the extractor) → allowed scopes
and minimum confidence → ONE batched embeddings call → dedup within the batch → ONE transaction
(`store.write_event`) that, under a per-owner lock, reads each candidate's nearest stored
neighbours in one statement and drops those that restate a stored memory
(`extraction.dedup.decide_against_neighbours`) → what was written.

Nothing here loads an owner's memories: per-event time, memory and prompt size do not grow with
the owner's memory count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

from extraction.dedup import decide_against_neighbours, dedup_candidates
from extraction.errors import PermanentEmbeddingError, PermanentError, TransientEmbeddingError, TransientError
from extraction.types import Candidate, ExtractionRequest, TokenUsage, TranscriptMessage
from extraction.typing import Embedder, Extractor
from store.errors import StoreTimeout, StoreUnavailable
from store.keys import embedding_text
from store.recall import STOPWORDS, query_terms
from store.settings_cache import SettingsCache
from store.types import Memory, MemorySettings, NewMemory, OwnerRef, Scope, UpsertAction
from store.typing import WorkerStore
from worker.events import ConversationEnded, event_names
from worker.metrics import Metrics
from worker.tracing import span

log = logging.getLogger("pmem.pipeline")

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------
# Pure core
# ---------------------------------------------------------------------------------------------


def allowed_scopes(event: ConversationEnded, policy: MemorySettings) -> tuple[Scope, ...]:
    """Scopes this event may write: none when memory is disabled; `user` only without a persona;
    with a persona `user` and `persona_user`, plus `persona` when persona learning is on (seed §8)."""
    if not policy.enabled:
        return ()
    if event.persona_id is None:
        return ("user",)
    if policy.persona_learning:
        return ("user", "persona", "persona_user")
    return ("user", "persona_user")


def owner_for(scope: Scope, event: ConversationEnded) -> OwnerRef:
    """Owner of a memory of `scope` from this event (seed §2). The LLM never chooses owner ids."""
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


DropReason = Literal["scope_not_allowed", "low_confidence", "duplicate_in_event", "semantic_duplicate"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Dropped:
    """A candidate the worker did not write, and why (bounded reason: a metric label)."""

    reason: DropReason
    candidate: Candidate


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


def build_row(
    event: ConversationEnded,
    candidate: Candidate,
    embedding: Sequence[float] | None,
    *,
    key: str | None = None,
) -> NewMemory:
    """A `pending_review` row for one candidate (under `key` when dedup matched a stored key),
    owned per its scope, with the event's channel as provenance."""
    owner = owner_for(candidate.scope, event)
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
        observed_at=event.occurred_at,
        team_id=event.team_id,
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


def one_line(exc: BaseException) -> str:
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
    category, transient = categorize(exc)
    detail = one_line(exc)
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


# ---------------------------------------------------------------------------------------------
# Shell
# ---------------------------------------------------------------------------------------------


class DbRunner(Protocol):
    """Runs one database call; the app's runner waits out database outages (see worker/app.py)."""

    async def __call__(self, operation: str, call: Callable[[], Awaitable[T]]) -> T: ...


async def run_directly(operation: str, call: Callable[[], Awaitable[T]]) -> T:
    """The plain `DbRunner`: call once, let errors propagate."""
    return await call()


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineDeps:
    """What `process_event` needs from the outside."""

    store: WorkerStore
    extractor: Extractor
    embedder: Embedder
    metrics: Metrics
    run_db: DbRunner = run_directly
    settings_cache: SettingsCache | None = None
    # PMEM_WRITES_IN_FLIGHT: the events that may be storing (embeddings call and write
    # transaction) at once, admitted in arrival order (None: any number)
    storing_slots: asyncio.Semaphore | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Written:
    """One memory the event's transaction wrote."""

    id: uuid.UUID
    action: UpsertAction
    scope: Scope
    key: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """Result of one event: processed (possibly with nothing to write), duplicate or disabled.

    `earlier` (duplicates only) is what the delivery that committed the event wrote, read back from
    the audit trail, so that its `memory.extracted` can be published again in case that delivery
    died between commit and publish."""

    status: Literal["processed", "duplicate", "disabled"]
    written: tuple[Written, ...] = ()
    earlier: tuple[Written, ...] = ()
    dropped: tuple[Dropped, ...] = ()
    rejected: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)


async def process_event(
    event: ConversationEnded, deps: PipelineDeps, *, check_processed: bool = True
) -> Outcome:
    """Run the pipeline for one valid event and commit its memories in one transaction.

    Raises on failure (classify with `decide_failure`); a redelivered or duplicate event returns
    `duplicate`, writes nothing and carries what the event wrote before (`Outcome.earlier`).
    `check_processed=False` (first deliveries) skips the early processed-event lookup; the
    transaction still refuses a duplicate.
    """
    store, metrics = deps.store, deps.metrics

    async def db(operation: str, call: Callable[[], Awaitable[T]]) -> T:
        start = time.perf_counter()
        try:
            with span(f"pmem.db {operation}"):
                return await deps.run_db(operation, call)
        finally:
            metrics.db_duration.labels(operation=operation).observe(time.perf_counter() - start)

    async def duplicate(usage: TokenUsage | None = None) -> Outcome:
        writes = await db("event_writes", lambda: store.event_writes(event.event_id))
        earlier = tuple(Written(id=w.memory_id, action=w.action, scope=w.scope, key=w.key) for w in writes)
        return Outcome(status="duplicate", earlier=earlier, usage=usage or TokenUsage())

    # A redelivery (a crash or a nack happened) is checked against processed_events first, so it
    # does not pay for the LLM again. A first delivery skips that round trip: a duplicate that
    # arrives as a new message is still caught, without writing anything, by write_event.
    if check_processed and await db("is_processed", lambda: store.is_processed(event.event_id)):
        return await duplicate()
    with span("pmem.policy"):
        policy = await _policy(event, deps, db)
    names = event_names(event) if policy.enabled else []  # memory off: nothing about people is kept
    if names:
        await db("set_names", lambda: store.set_names(names))
    scopes = allowed_scopes(event, policy)
    if not scopes:
        write = await db("write_event", lambda: store.write_event(event_id=event.event_id, memories=()))
        return await duplicate() if write.duplicate else Outcome(status="disabled")

    owners = owners_for(event, scopes)
    words = prompt_words(event)
    relevant = await db(
        "prompt_memories",
        lambda: store.prompt_memories(owners, team_id=event.team_id, words=words, limit=PROMPT_KEYS),
    )

    request = ExtractionRequest(
        messages=transcript(event),
        allowed_scopes=scopes,
        existing=tuple(relevant),
        prompt_override=policy.extraction_prompt,
    )
    with metrics.llm_duration.time(), span("pmem.llm"):
        result = await deps.extractor.extract(request)
    metrics.llm_tokens.labels(kind="prompt").inc(result.usage.prompt_tokens)
    metrics.llm_tokens.labels(kind="completion").inc(result.usage.completion_tokens)
    metrics.llm_calls.inc(result.llm_calls)

    kept, dropped = screen_candidates(result.candidates, allowed=scopes, min_confidence=policy.min_confidence)
    async with _storing_slot(deps):
        vectors: list[list[float]] = []
        if kept:
            with metrics.embedding_duration.time(), span("pmem.embeddings"):
                vectors = await deps.embedder.embed([embedding_text(c.key, c.value) for c in kept])
            if len(vectors) != len(kept):
                raise RuntimeError(f"the embedder returned {len(vectors)} vectors for {len(kept)} texts")
        rows, deduped = plan_rows(event, scopes, kept, vectors)
        write = await db(
            "write_event",
            lambda: store.write_event(
                event_id=event.event_id,
                memories=rows,
                dedup=decide_against_neighbours,
                neighbours=DEDUP_NEIGHBOURS,
            ),
        )
    if not write.duplicate and len(write.results) != len(rows):
        raise RuntimeError(
            f"store.write_event returned {len(write.results)} results for {len(rows)} memories"
        )
    # restating a stored memory (found inside the write transaction): dropped, not written
    near = tuple(
        Dropped(reason="semantic_duplicate", candidate=_candidate(row))
        for r, row in zip(write.results, rows, strict=True)
        if r.near_duplicate
    )
    dropped_all = dropped + deduped + near
    for item in dropped_all:
        metrics.candidates_dropped.labels(reason=item.reason).inc()
    for rejection in result.rejected:
        # once per rejected item, with the bounded code as the metric label; `raw` is redacted
        metrics.candidates_dropped.labels(reason=rejection.code).inc()
        log.info(
            "candidate rejected (%s): %s; item: %s",
            rejection.code,
            rejection.reason,
            rejection.raw,
            extra={"rejection": rejection.code},
        )
    if write.duplicate:
        # another delivery committed the same event between our check and our write
        return await duplicate(result.usage)
    written = tuple(
        Written(id=r.memory_id, action=r.action, scope=row.scope, key=row.key)
        for r, row in zip(write.results, rows, strict=True)
        if not r.near_duplicate
    )
    for done in written:
        metrics.memories_written.labels(scope=done.scope, action=done.action).inc()
    return Outcome(
        status="processed",
        written=written,
        dropped=dropped_all,
        rejected=len(result.rejected),
        usage=result.usage,
    )


@contextlib.asynccontextmanager
async def _storing_slot(deps: PipelineDeps) -> AsyncIterator[None]:
    """Hold one of PMEM_WRITES_IN_FLIGHT slots while storing (embeddings, write), in arrival order.

    Under load the LLM replies come back in bursts; a burst's events all interleaved on the event
    loop would finish together at its end and start their next LLM calls in step (bench/README.md,
    "waves"). A few at a time finish one after another, and the next calls go out spread."""
    if deps.storing_slots is None:
        yield
        return
    waited = time.perf_counter()
    async with deps.storing_slots:
        deps.metrics.storing_wait.observe(time.perf_counter() - waited)
        yield


def _candidate(row: NewMemory) -> Candidate:
    return Candidate(key=row.key, value=row.value, confidence=row.confidence, scope=row.scope)


async def _policy(event: ConversationEnded, deps: PipelineDeps, db: DbRunner) -> MemorySettings:
    async def load() -> MemorySettings:
        return await db("settings_for", lambda: deps.store.settings_for(event.team_id, event.persona_id))

    cache = deps.settings_cache
    if cache is None:
        return await load()
    return await cache.settings((event.team_id, event.persona_id), load)
