"""Recall and hint in a conversation's context: the (team, persona) settings decide whether memory is
on at all, and the team decides which memories are visible. One function for the CLI, the API and
the tools, so the same inputs give the same answer everywhere."""

from __future__ import annotations

import uuid
from typing import Any

from store.hint import build_memory_hint
from store.settings_cache import SettingsCache
from store.types import MemorySettings, RecallHit, Retriever
from store.typing import RecallStore


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


async def hint_in_context(
    store: RecallStore,
    *,
    user_id: uuid.UUID,
    persona_id: uuid.UUID | None,
    team_id: uuid.UUID | None,
    query: str,
    limit: int,
) -> str:
    """The prompt hint (bullets, capped) for the same recall; empty when memory is disabled."""
    hits = await recall_in_context(
        store, user_id=user_id, persona_id=persona_id, team_id=team_id, query=query, limit=limit
    )
    return build_memory_hint(hits)


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
    }


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
