"""The per-event pipeline: one thin async shell, `process_event`, that runs the pure planning of
`worker.planning` (policy, owners, candidate screening, rows, failure decisions) against the store,
the extractor and the embedder.

Order: policy → the few stored memories most relevant to the
conversation (their keys go into the prompt; a fixed number, whatever the owner's size) →
extraction (prompt, LLM calls, validation, redaction happen inside the extractor) → grounding
(`extraction.grounding`: a value its messages do not support is dropped as `ungrounded`) → allowed
scopes and minimum confidence → ONE batched embeddings call → dedup within the batch → ONE transaction
(`store.writes.write_event`) that, under a per-owner lock, reads each candidate's nearest stored
neighbours in one statement and drops those that restate a stored memory
(`extraction.dedup.decide_against_neighbours`) → what was written.

Nothing here loads an owner's memories: per-event time, memory and prompt size do not grow with
the owner's memory count.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

from extraction.dedup import decide_against_neighbours
from extraction.protocols import Embedder, Extractor
from extraction.types import Candidate, ExtractionRequest, TokenUsage
from store.model import (
    EventWrite,
    MemorySettings,
    NewMemory,
    Scope,
    UpsertAction,
)
from store.services.settings_cache import SettingsCache
from store.team_scope import team_scope, teams_scope
from worker.events import ConversationEnded, event_fingerprint, event_names
from worker.metrics import Metrics
from worker.planning import (
    DEDUP_NEIGHBOURS,
    PROMPT_KEYS,
    Dropped,
    UnknownPersona,
    allowed_scopes,
    embedding_batch,
    ground_candidates,
    owners_for,
    participant_names,
    plan_rows,
    plan_turns,
    prompt_words,
    redacted_texts,
    resolve_evidence,
    screen_candidates,
    split_embeddings,
    transcript,
    unknown_persona,
)
from worker.tracing import span

if TYPE_CHECKING:
    from store.factory import Store

log = logging.getLogger("pmem.pipeline")

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Shell
# ---------------------------------------------------------------------------------------------


class DbRunner(Protocol):
    """Runs one database call; the worker's runner waits out outages (`worker.handling.OutageWaits`)."""

    async def __call__(self, operation: str, call: Callable[[], Awaitable[T]]) -> T: ...


async def run_directly(operation: str, call: Callable[[], Awaitable[T]]) -> T:
    """The plain `DbRunner`: call once, let errors propagate."""
    return await call()


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineDeps:
    """What `process_event` needs from the outside."""

    store: Store
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


def reused_event_id(event: ConversationEnded, fingerprint: str, earlier: str | None) -> str | None:
    """What to log when a duplicate `event_id` came with another body than it was first written
    with (a publisher reusing ids: the new conversation is dropped); None for a true duplicate, or
    when the first write recorded no hash."""
    if earlier is None or earlier == fingerprint:
        return None
    return (
        f"event {event.event_id} was already processed with another body (sha256 {earlier[:16]}…, "
        f"this one {fingerprint[:16]}…): dropped as a duplicate; a new conversation needs a new event_id"
    )


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
    turns: int = 0  # conversation turns stored with the event (history on)


async def process_event(
    event: ConversationEnded, deps: PipelineDeps, *, check_processed: bool = True
) -> Outcome:
    """Run the pipeline for one valid event and commit its memories in one transaction, in the
    event's team scope (`store.team_scope`: the database lets it touch that team's rows only).

    Raises on failure (classify with `decide_failure`); a redelivered or duplicate event returns
    `duplicate`, writes nothing and carries what the event wrote before (`Outcome.earlier`).
    `check_processed=False` (first deliveries) skips the early processed-event lookup; the
    transaction still refuses a duplicate.
    """
    with team_scope(teams_scope([event.team_id])):
        return await _process_event(event, deps, check_processed=check_processed)


async def _process_event(  # noqa: PLR0915 - the pipeline's steps in their order; each step is a planning function
    event: ConversationEnded, deps: PipelineDeps, *, check_processed: bool
) -> Outcome:
    store, metrics = deps.store, deps.metrics

    async def db(operation: str, call: Callable[[], Awaitable[T]]) -> T:
        start = time.perf_counter()
        try:
            with span(f"pmem.db {operation}"):
                return await deps.run_db(operation, call)
        finally:
            metrics.db_duration.labels(operation=operation).observe(time.perf_counter() - start)

    fingerprint = event_fingerprint(event)

    async def duplicate(usage: TokenUsage | None = None, write: EventWrite | None = None) -> Outcome:
        changed = None if write is None else reused_event_id(event, fingerprint, write.earlier_body_sha256)
        if changed is not None:
            log.warning(changed)
        writes = await db("event_writes", lambda: store.writes.event_writes(event.event_id))
        earlier = tuple(Written(id=w.memory_id, action=w.action, scope=w.scope, key=w.key) for w in writes)
        return Outcome(status="duplicate", earlier=earlier, usage=usage or TokenUsage())

    # A redelivery (a crash or a nack happened) is checked against processed_events first, so it
    # does not pay for the LLM again. A first delivery skips that round trip: a duplicate that
    # arrives as a new message is still caught, without writing anything, by write_event.
    if check_processed and await db("is_processed", lambda: store.writes.is_processed(event.event_id)):
        return await duplicate()
    with span("pmem.policy"):
        policy = await _policy(event, deps, db)
    if policy.known_personas_only and event.persona_id is not None:
        # looked up before the event's own names are stored: an event cannot make its persona known
        persona = event.persona_id
        known = await db("persona_known", lambda: store.directory.names("persona", [persona]))
        refused = unknown_persona(event, policy, persona in known)
        if refused is not None:
            raise UnknownPersona(refused)
    names = event_names(event) if policy.enabled else []  # memory off: nothing about people is kept
    if names:
        await db("set_names", lambda: store.directory.set_names(names))
    scopes = allowed_scopes(event, policy)
    if not scopes:
        write = await db(
            "write_event",
            lambda: store.writes.write_event(event_id=event.event_id, memories=(), body_sha256=fingerprint),
        )
        return await duplicate(write=write) if write.duplicate else Outcome(status="disabled")

    owners = owners_for(event, scopes)
    words = prompt_words(event)
    relevant = await db(
        "prompt_memories",
        lambda: store.listing.prompt_memories(owners, team_id=event.team_id, words=words, limit=PROMPT_KEYS),
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

    said = redacted_texts(event.messages)
    grounded, ungrounded = ground_candidates(
        result.candidates, request.messages, redacted=said, names=participant_names(event)
    )
    kept, screened = screen_candidates(grounded, allowed=scopes, min_confidence=policy.min_confidence)
    dropped = ungrounded + screened
    evidences = [resolve_evidence(event, c.evidence, said) for c in kept]
    unresolved = sum(e.dropped for e in evidences)
    if unresolved:
        # the fact stays, without the numbers that name no message of the conversation
        log.info("%d evidence numbers named no message of the conversation and were dropped", unresolved)
    turns, turn_own, turn_around = (
        plan_turns(event, now=datetime.now(UTC), redacted=said) if policy.history else ([], [], [])
    )
    async with _storing_slot(deps):
        texts = embedding_batch(kept, evidences, turn_own, turn_around)
        vectors: list[list[float]] = []
        if texts:
            with metrics.embedding_duration.time(), span("pmem.embeddings"):
                vectors = await deps.embedder.embed(texts)
            if len(vectors) != len(texts):
                raise RuntimeError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
        memory_vectors, turn_vectors = split_embeddings(vectors, kept, evidences, len(turns))
        stored_turns = [
            dataclasses.replace(turn, embedding=vector)
            for turn, vector in zip(turns, turn_vectors, strict=True)
        ]
        rows, deduped = plan_rows(event, scopes, kept, memory_vectors)
        write = await db(
            "write_event",
            lambda: store.writes.write_event(
                event_id=event.event_id,
                memories=rows,
                dedup=decide_against_neighbours,
                neighbours=DEDUP_NEIGHBOURS,
                turns=stored_turns,
                body_sha256=fingerprint,
            ),
        )
    if write.duplicate:
        # another delivery committed the same event between our check and our write (or the event
        # came again as a new message): nothing was written, so there are no results to read
        return await duplicate(result.usage, write)
    if len(write.results) != len(rows):
        raise RuntimeError(
            f"store.writes.write_event returned {len(write.results)} results for {len(rows)} memories"
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
        # once per rejected item, with the bounded code as the metric label. The item is a personal
        # fact that erasure cannot reach in a log: INFO names the reason and the size only, DEBUG
        # (PMEM_LOG_LEVEL=DEBUG, for troubleshooting) adds the redacted item
        metrics.candidates_dropped.labels(reason=rejection.code).inc()
        log.info(
            "candidate rejected (%s): %s; item of %d characters",
            rejection.code,
            rejection.reason,
            len(rejection.raw),
            extra={"rejection": rejection.code},
        )
        log.debug("rejected candidate (%s), redacted: %s", rejection.code, rejection.raw)
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
        turns=len(stored_turns),
    )


@contextlib.asynccontextmanager
async def _storing_slot(deps: PipelineDeps) -> AsyncIterator[None]:
    """Hold one of PMEM_WRITES_IN_FLIGHT slots while storing (embeddings, write), in arrival order.

    Under load the LLM replies come back in bursts; a burst's events all interleaved on the event
    loop would finish together at its end and start their next LLM calls in step (bench/README.md,
    "What the worker's design rests on"). A few at a time finish one after another, and the next
    calls go out spread."""
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
        return await db(
            "settings_for", lambda: deps.store.settings.settings_for(event.team_id, event.persona_id)
        )

    cache = deps.settings_cache
    if cache is None:
        return await load()
    return await cache.settings((event.team_id, event.persona_id), load)
