"""Recall in a conversation's context: the (team, persona) settings decide whether memory is on at
all, and the team decides which memories are visible. One function for the CLI, the API and
the tools, so the same inputs give the same answer everywhere: recall (`items_in_context`) and the
prompt hint (`hint_in_context`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from store.core.store import CoreStore
from store.model import (
    INCLUDE_ALL,
    ContextFacts,
    Memory,
    RecallHit,
    RecallInclude,
    RecallItem,
    RecallQuery,
    Retriever,
    Revision,
    TurnHit,
)
from store.rules.hint import build_hint, standing_budget
from store.rules.tokens import counter_name
from store.rules.turn_recall import facts_then_turns
from store.services.settings_cache import SettingsCache


async def recall_in_context(
    store: CoreStore,
    *,
    user_id: uuid.UUID,
    persona_id: uuid.UUID | None,
    team_id: uuid.UUID | None,
    query: str,
    limit: int,
    retriever: Retriever = "hybrid",
) -> list[RecallHit]:
    """Recall for a user (and persona) in a team's context; nothing when memory is disabled there."""
    policy = await store.settings.settings_for(team_id, persona_id)
    if not policy.enabled:
        return []
    return await store.recall(user_id, persona_id, query, limit, retriever=retriever, team_id=team_id)


# how many turns recall adds after the memories when the caller does not say
DEFAULT_TURN_LIMIT = 5
# turns ranked per turn asked for: the novelty rules leave some out (restatements, filler, repeats)
TURN_CANDIDATES_PER_TURN = 3
# the hint reads the context's facts by standing, at most one per this many tokens of its budget:
# when they are fewer, that is all of them (a fact's line is rarely shorter)
TOKENS_PER_LISTED_FACT = 15


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextRecall:
    """One recall in a conversation's context: for whom (user, persona or none), in which team's
    context, what for (`query`: the next message), how many memories (`limit`) and how many turns
    of earlier conversations after them (`turn_limit`, 0: none), and which kinds (`include`)."""

    user_id: uuid.UUID
    persona_id: uuid.UUID | None
    team_id: uuid.UUID | None
    query: str
    limit: int
    turn_limit: int = DEFAULT_TURN_LIMIT
    include: Sequence[RecallInclude] = INCLUDE_ALL
    retriever: Retriever = "hybrid"


@dataclass(frozen=True, kw_only=True, slots=True)
class _Found:
    """What one recall read: the memories by relevance, the turns by relevance, the context's facts
    by standing (None: not read), its pinned facts, and the open proposed change of each of them
    that has one."""

    memories: list[RecallHit]
    turns: list[TurnHit]
    every: list[RecallHit] | None
    pinned: list[Memory]
    pending: dict[uuid.UUID, Revision]


async def _found(
    store: CoreStore,
    asked: ContextRecall,
    settings: SettingsCache | None,
    *,
    every_limit: int = 0,
    every_budget: int | None = None,
    with_pinned: bool = False,
) -> _Found | None:
    """The reads of one recall, side by side; None when memory is disabled in the context.
    `every_limit`: also read up to this many of the context's facts by standing, none when their
    listing weight exceeds `every_budget` (`store.rules.hint.standing_budget`); `with_pinned`:
    also its pinned facts."""
    key = (asked.team_id, asked.persona_id)
    load = partial(store.settings.settings_for, *key)
    policy = await (load() if settings is None else settings.settings(key, load))
    if not policy.enabled:
        return None
    user_id, persona_id, team_id = asked.user_id, asked.persona_id, asked.team_id
    with_memories = "memories" in asked.include

    async def facts() -> ContextFacts:
        # the relevant facts (the hint's standing and pinned ones too) and their proposed changes
        # together: one read on Postgres
        if not with_memories:
            return ContextFacts(relevant=[], standing=None, pinned=[], pending={})
        recalled = RecallQuery(
            user_id=user_id,
            persona_id=persona_id,
            team_id=team_id,
            text=asked.query,
            limit=max(asked.limit, 0),
            retriever=asked.retriever,
        )
        return await store.context_facts(
            recalled, standing=every_limit, pinned=with_pinned, standing_budget=every_budget
        )

    async def turns() -> list[TurnHit]:
        if "turns" not in asked.include or not policy.history or asked.turn_limit <= 0:
            return []
        candidates = asked.turn_limit * TURN_CANDIDATES_PER_TURN
        return await store.turns.recall_turns(user_id, persona_id, asked.query, candidates, team_id=team_id)

    # side by side: each waits on its own query embedding and statement
    found_facts, found_turns = await asyncio.gather(facts(), turns())
    return _Found(
        memories=found_facts.relevant,
        turns=found_turns,
        every=found_facts.standing,
        pinned=found_facts.pinned,
        pending=found_facts.pending,
    )


async def items_in_context(
    store: CoreStore, asked: ContextRecall, *, settings: SettingsCache | None = None
) -> list[RecallItem]:
    """Recall's one list for this context (`store.rules.turn_recall.facts_then_turns`): the first
    `limit` memories by relevance, each with its change awaiting review, then at most `turn_limit`
    turns that add something new; each kind only when `include` names it, nothing when memory is
    disabled there, no turns when the setting `history` is off. `settings`: where the context's
    settings are kept between requests (the API's recall is the hot path; a settings change
    applies within the cache's `ttl_s`)."""
    found = await _found(store, asked, settings)
    if found is None:
        return []
    return _listed(found, asked)


def _listed(found: _Found, asked: ContextRecall) -> list[RecallItem]:
    """What recall lists from what was found: the `limit` facts, then the new turns (`turn_limit`)."""
    return facts_then_turns(
        found.memories,
        found.turns,
        limit=asked.limit,
        turn_limit=asked.turn_limit,
        message=asked.query,
        pending=found.pending,
    )


async def hint_in_context(
    store: CoreStore, asked: ContextRecall, *, max_tokens: int, settings: SettingsCache | None = None
) -> str:
    """The prompt hint for the next message (`asked.query`) within `max_tokens`
    (`store.rules.hint.build_hint`): every fact of the context when they all fit the facts' share,
    else the `limit` most relevant that fit; then the new turns (`turn_limit`) in what is left.
    "" when memory is disabled in the context or nothing is known."""
    every_limit = max(1, max_tokens // TOKENS_PER_LISTED_FACT)
    # facts by standing too long to be listed are not read (with the estimate counter, the one
    # `build_hint` uses by default here, when tiktoken is not installed)
    every_budget = standing_budget(max_tokens, counter=counter_name())
    found = await _found(
        store, asked, settings, every_limit=every_limit, every_budget=every_budget, with_pinned=True
    )
    if found is None:
        return ""
    items = _listed(found, asked)
    # the facts by standing go to the hint as the store's hits: it makes items only of the ones it
    # shows (with a crowd of facts, few or none)
    every = found.every if found.every is not None and len(found.every) < every_limit else None
    pinned = [
        RecallItem(kind="memory", score=1.0, memory=memory, pending_change=found.pending.get(memory.id))
        for memory in found.pinned
    ]
    return build_hint(
        items,
        max_tokens=max_tokens,
        message=asked.query,
        every=every,
        pinned=pinned,
        pending=found.pending,
        turns_new=True,  # `_listed` kept them for this message
    )
