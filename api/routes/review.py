"""`/v1/review/…` and `/v1/memories/{id}`: the review queue for admins and team admins."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Query

from api import operations
from api.deps import Caller, State
from api.schemas import (
    BulkBody,
    PinnedBody,
    RejectBody,
    ValueBody,
    bulk_json,
    detail_json,
    rejection_json,
    review_item_json,
)
from store.model import ReviewQuery, Scope
from store.services.json_shapes import memory_json

router = APIRouter(tags=["review"])


@router.get("/v1/review")
async def review_queue(
    principal: Caller,
    state: State,
    team_id: uuid.UUID | None = None,
    scope: Scope | None = None,
    persona_id: uuid.UUID | None = None,
    user_id: uuid.UUID | None = None,
    min_confidence: float | None = Query(default=None, ge=0.0, le=1.0),
    limit: int = Query(default=50, ge=1, le=200),
    cursor: str | None = None,
) -> dict[str, object]:
    """Pending memories and proposed changes the caller may review, newest first."""
    query = ReviewQuery(
        team_id=team_id,
        scope=scope,
        persona_id=persona_id,
        user_id=user_id,
        min_confidence=min_confidence,
        limit=limit,
        cursor=cursor,
    )
    page = await operations.review_page(state.store, principal, query)
    return {"items": [review_item_json(i) for i in page.items], "next_cursor": page.next_cursor}


@router.post("/v1/review/bulk")
async def bulk_decide(body: BulkBody, principal: Caller, state: State) -> dict[str, object]:
    """Approve or reject many items; each id reports done, not_found or nothing_pending."""
    return bulk_json(
        await operations.bulk_decide(state.store, principal, body.action, body.ids, forget=body.forget)
    )


@router.post("/v1/review/{item_id}/approve")
async def approve(item_id: uuid.UUID, principal: Caller, state: State) -> dict[str, object]:
    """Approve a pending memory, or apply a proposed change."""
    return memory_json(await operations.decide(state.store, principal, item_id, "approve"))


@router.post("/v1/review/{item_id}/reject")
async def reject(
    item_id: uuid.UUID, principal: Caller, state: State, body: RejectBody | None = None
) -> dict[str, object]:
    """Reject a pending memory (archived, so it is not proposed again), or discard a proposed change.
    The conversation it comes from stays remembered (history on: recalled as conversation turns).
    With `{"forget": true}` what was said is erased too: the conversation turns its evidence cites
    (every copy in the memory's team), their words in the turns beside them and in the
    conversation's evidence; the answer adds `forgotten_turns`."""
    if body is not None and body.forget:
        rejection = await operations.reject_and_forget(state.store, principal, item_id)
        return rejection_json(rejection, forget=True)
    return memory_json(await operations.decide(state.store, principal, item_id, "reject"))


@router.post("/v1/review/{item_id}/edit")
async def edit(item_id: uuid.UUID, body: ValueBody, principal: Caller, state: State) -> dict[str, object]:
    """Edit and approve: the memory takes the reviewer's value and becomes active."""
    return memory_json(await operations.decide(state.store, principal, item_id, "edit", body.value))


@router.get("/v1/memories/{memory_id}")
async def memory_detail(memory_id: uuid.UUID, principal: Caller, state: State) -> dict[str, object]:
    """One memory with its open proposal and audit history."""
    return detail_json(await operations.memory_detail(state.store, principal, memory_id))


@router.put("/v1/memories/{memory_id}/pinned")
async def pin_memory(
    memory_id: uuid.UUID, body: PinnedBody, principal: Caller, state: State
) -> dict[str, object]:
    """Pin or unpin a memory: while it is active, a pinned memory is in every hint of its user
    (first among the facts), whatever the message."""
    return memory_json(await operations.set_pinned(state.store, principal, memory_id, body.pinned))
