"""Recall and hint in a conversation's context: the (team, persona) settings decide whether memory is
on at all, and the team decides which memories are visible. One function for the CLI, the API and
the tools, so the same inputs give the same answer everywhere."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from store.core.turns import merge_recall
from store.model import (
    INCLUDE_ALL,
    MemorySettings,
    RecallHit,
    RecallInclude,
    RecallItem,
    Retriever,
    Turn,
    TurnHit,
)
from store.protocols import RecallStore
from store.rules.hint import build_hint
from store.services.settings_cache import SettingsCache


async def recall_in_context(
    store: RecallStore,
    *,
    user_id: uuid.UUID,
    persona_id: uuid.UUID | None,
    team_id: uuid.UUID | None,
    query: str,
    limit: int,
    retriever: Retriever = "hybrid",
) -> list[RecallHit]:
    """Recall for a user (and persona) in a team's context; nothing when memory is disabled there."""
    policy = await store.settings_for(team_id, persona_id)
    if not policy.enabled:
        return []
    return await store.recall(user_id, persona_id, query, limit, retriever=retriever, team_id=team_id)


async def items_in_context(
    store: RecallStore,
    *,
    user_id: uuid.UUID,
    persona_id: uuid.UUID | None,
    team_id: uuid.UUID | None,
    query: str,
    limit: int,
    include: Sequence[RecallInclude] = INCLUDE_ALL,
    retriever: Retriever = "hybrid",
) -> list[RecallItem]:
    """Memories and turns of this context in one ranked list (`store.core.turns.merge_recall`), each
    kind only when `include` names it: nothing when memory is disabled there, no turns when the
    setting `history` is off."""
    policy = await store.settings_for(team_id, persona_id)
    if not policy.enabled or limit <= 0:
        return []

    async def memories() -> list[RecallHit]:
        if "memories" not in include:
            return []
        return await store.recall(user_id, persona_id, query, limit, retriever=retriever, team_id=team_id)

    async def turns() -> list[TurnHit]:
        if "turns" not in include or not policy.history:
            return []
        return await store.recall_turns(user_id, persona_id, query, limit, team_id=team_id)

    # side by side: each waits on its own query embedding and statement
    found_memories, found_turns = await asyncio.gather(memories(), turns())
    return merge_recall(found_memories, found_turns, limit)


async def hint_in_context(
    store: RecallStore,
    *,
    user_id: uuid.UUID,
    persona_id: uuid.UUID | None,
    team_id: uuid.UUID | None,
    query: str,
    limit: int,
    include: Sequence[RecallInclude] = INCLUDE_ALL,
) -> str:
    """The prompt hint (what is known, from earlier conversations; capped) for the same recall;
    empty when memory is disabled."""
    items = await items_in_context(
        store,
        user_id=user_id,
        persona_id=persona_id,
        team_id=team_id,
        query=query,
        limit=limit,
        include=include,
    )
    return build_hint(items)


def hit_record(hit: RecallHit) -> dict[str, Any]:
    """One recalled memory as JSON (`pmem recall --json` and `POST /v1/recall`)."""
    m = hit.memory
    return {
        "id": str(m.id),
        "scope": m.scope,
        "owner_id": str(m.owner_id),
        "user_id": str(m.user_id) if m.user_id else None,
        "team_id": str(m.team_id) if m.team_id else None,
        "key": m.key,
        "value": m.value,
        "confidence": m.confidence,
        "status": m.status,
        "score": hit.score,
        "sources": list(hit.sources),
        "source_channel_id": str(m.source_channel_id) if m.source_channel_id else None,
        "created_at": m.created_at.isoformat(),
        "updated_at": m.updated_at.isoformat(),
        "evidence": m.evidence,
        "observed_at": m.observed_at.isoformat() if m.observed_at else None,
    }


def turn_record(turn: Turn, score: float | None = None) -> dict[str, Any]:
    """One stored conversation turn as JSON (its conversation is `event_id`)."""
    record: dict[str, Any] = {
        "id": str(turn.id),
        "channel_id": str(turn.channel_id),
        "event_id": str(turn.event_id),
        "user_id": str(turn.user_id),
        "persona_id": str(turn.persona_id) if turn.persona_id else None,
        "team_id": str(turn.team_id) if turn.team_id else None,
        "role": turn.role,
        "speaker": turn.speaker,
        "text": turn.text,
        "at": turn.at.isoformat(),
        "position": turn.position,
    }
    if score is not None:
        record["score"] = score
    return record


def item_record(item: RecallItem) -> dict[str, Any]:
    """One item of the merged recall as JSON: `kind` "memory" (`hit_record`'s fields) or "turn"
    (`turn_record`'s), with its `score` in the merged list."""
    if item.kind == "memory" and item.memory is not None:
        record = hit_record(RecallHit(memory=item.memory, score=item.score, sources=item.sources))
    elif item.turn is not None:
        record = turn_record(item.turn, item.score)
    else:
        raise ValueError(f"a recall item of kind {item.kind!r} without its {item.kind}")
    return {"kind": item.kind, **record}


class CachedSettingsStore:
    """A RecallStore whose `settings_for` answers come from `cache`: recall is the hot path, and
    settings change rarely (a change applies within the cache's `ttl_s`, or at once where the
    writer forgets the cache)."""

    def __init__(self, store: RecallStore, cache: SettingsCache) -> None:
        self._store = store
        self._cache = cache

    async def settings_for(self, team_id: uuid.UUID | None, persona_id: uuid.UUID | None) -> MemorySettings:
        """The effective settings, from the cache while fresh."""
        return await self._cache.settings(
            (team_id, persona_id), lambda: self._store.settings_for(team_id, persona_id)
        )

    async def recall(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int = 20,
        *,
        retriever: Retriever = "hybrid",
        team_id: uuid.UUID | None = None,
    ) -> list[RecallHit]:
        """The store's recall."""
        return await self._store.recall(
            user_id, persona_id, query, limit, retriever=retriever, team_id=team_id
        )

    async def recall_turns(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int = 10,
        *,
        team_id: uuid.UUID | None = None,
        query_embedding: Sequence[float] | None = None,
    ) -> list[TurnHit]:
        """The store's turn recall."""
        return await self._store.recall_turns(
            user_id, persona_id, query, limit, team_id=team_id, query_embedding=query_embedding
        )
