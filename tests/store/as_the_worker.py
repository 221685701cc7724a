"""Writing a conversation as the worker does (its own functions: evidence, turns, embeddings),
without NATS or an LLM: the candidates are given."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from extraction.types import Candidate
from store.team_scope import TeamScope, team_scope, teams_scope
from tests.store.store_testkit import Store
from worker.events import ConversationEnded
from worker.planning import (
    build_row,
    embedding_batch,
    plan_turns,
    redacted_texts,
    resolve_evidence,
    split_embeddings,
)

SAID = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)


def event_of(
    lines: Sequence[str],
    *,
    user: uuid.UUID,
    channel: uuid.UUID,
    team: uuid.UUID | None = None,
    persona: uuid.UUID | None = None,
    names: Sequence[str | None] | None = None,
) -> ConversationEnded:
    """A conversation.ended event: `lines` said by the user and the assistant in turn, a second apart."""
    messages: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        message: dict[str, Any] = {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": line,
            "at": (SAID + timedelta(seconds=i)).isoformat(),
        }
        if names is not None and names[i] is not None:
            message["name"] = names[i]
        messages.append(message)
    return ConversationEnded.model_validate(
        {
            "event_id": str(uuid.uuid4()),
            "type": "conversation.ended",
            "occurred_at": SAID.isoformat(),
            "team_id": str(team) if team else None,
            "channel_id": str(channel),
            "user_id": str(user),
            "persona_id": str(persona) if persona else None,
            "messages": messages,
        }
    )


async def write_as_the_worker(
    store: Store,
    event: ConversationEnded,
    facts: Sequence[tuple[str, str, tuple[int, ...]]] = (),
    *,
    scope: TeamScope | None = None,
) -> list[uuid.UUID]:
    """Store the event's turns and one `user` memory per (key, value, evidence numbers), with the
    evidence, turns and embeddings the worker computes, in `scope` (default: the event's team, as
    the worker writes); the memories' ids."""
    said = redacted_texts(event.messages)
    candidates = [Candidate(key=k, value=v, confidence=0.9, scope="user", evidence=n) for k, v, n in facts]
    evidences = [resolve_evidence(event, c.evidence, said) for c in candidates]
    turns, own, around = plan_turns(event, now=SAID, redacted=said)
    vectors = await store.embedder.embed(embedding_batch(candidates, evidences, own, around))
    memory_vectors, turn_vectors = split_embeddings(vectors, candidates, evidences, len(turns))
    rows = [
        build_row(event, c, vector, evidence=e)
        for c, vector, e in zip(candidates, memory_vectors, evidences, strict=True)
    ]
    stored = [replace(t, embedding=v) for t, v in zip(turns, turn_vectors, strict=True)]
    with team_scope(scope or teams_scope([event.team_id])):
        written = await store.writes.write_event(event_id=event.event_id, memories=rows, turns=stored)
    return [result.memory_id for result in written.results]
