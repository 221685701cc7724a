"""Recall in a conversation's context: the (team, persona) settings decide whether memory is on at
all, and the team decides which memories are visible. One function for the CLI, the API and
the tools, so the same inputs give the same answer everywhere."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from store.model import (
    INCLUDE_ALL,
    Memory,
    MemorySettings,
    RecallHit,
    RecallInclude,
    RecallItem,
    Retriever,
    TurnHit,
)
from store.protocols import RecallStore
from store.rules.turn_recall import merge_recall
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


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextRecall:
    """One recall in a conversation's context: for whom (user, persona or none), in which team's
    context, what for, how many, and which kinds (`include`)."""

    user_id: uuid.UUID
    persona_id: uuid.UUID | None
    team_id: uuid.UUID | None
    query: str
    limit: int
    include: Sequence[RecallInclude] = INCLUDE_ALL
    retriever: Retriever = "hybrid"


async def _policy(store: RecallStore, asked: ContextRecall, settings: SettingsCache | None) -> MemorySettings:
    """The context's settings, from `settings` when given (kept between requests)."""
    key = (asked.team_id, asked.persona_id)
    load = partial(store.settings_for, *key)
    return await (load() if settings is None else settings.settings(key, load))


async def pinned_in_context(
    store: RecallStore, asked: ContextRecall, *, settings: SettingsCache | None = None
) -> list[Memory]:
    """The active pinned facts every hint of this context states first: none when memory is
    disabled there or `include` leaves memories out."""
    if "memories" not in asked.include:
        return []
    policy = await _policy(store, asked, settings)
    if not policy.enabled:
        return []
    return await store.pinned_facts(asked.user_id, asked.persona_id, team_id=asked.team_id)


async def items_in_context(
    store: RecallStore, asked: ContextRecall, *, settings: SettingsCache | None = None
) -> list[RecallItem]:
    """Memories and turns of this context in one ranked list (`store.rules.turn_recall.merge_recall`), each
    kind only when `include` names it: nothing when memory is disabled there, no turns when the
    setting `history` is off. `settings`: where the context's settings are kept between requests
    (the API's recall is the hot path; a settings change applies within the cache's `ttl_s`)."""
    policy = await _policy(store, asked, settings)
    if not policy.enabled or asked.limit <= 0:
        return []
    user_id, persona_id, query, limit = asked.user_id, asked.persona_id, asked.query, asked.limit

    async def memories() -> list[RecallHit]:
        if "memories" not in asked.include:
            return []
        return await store.recall(
            user_id, persona_id, query, limit, retriever=asked.retriever, team_id=asked.team_id
        )

    async def turns() -> list[TurnHit]:
        if "turns" not in asked.include or not policy.history:
            return []
        return await store.recall_turns(user_id, persona_id, query, limit, team_id=asked.team_id)

    # side by side: each waits on its own query embedding and statement
    found_memories, found_turns = await asyncio.gather(memories(), turns())
    return merge_recall(found_memories, found_turns, limit)
