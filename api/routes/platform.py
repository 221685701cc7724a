"""The chat platform's endpoints (API keys): recall, the prompt hint, and erasing a user."""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api import operations
from api.deps import Caller, State
from api.schemas import HintBody, RecallBody
from store.services.json_shapes import recall_item_json

router = APIRouter(tags=["platform"])


@router.post("/v1/recall")
async def recall(body: RecallBody, principal: Caller, state: State) -> JSONResponse:
    """Active memories (`limit`, by relevance) then earlier conversations' turns that add something
    new (`turn_limit`), as `include` says, for the user (and persona) in the team's context, one
    list, each item with its `kind`; the same items as `pmem recall --json`."""
    items = await operations.platform_recall(state.store, principal, body.asked(), state.settings_cache)
    # a JSONResponse skips FastAPI's generic encoder: this is the platform's hot path
    return JSONResponse({"items": [recall_item_json(item) for item in items]})


@router.post("/v1/hint", response_model=dict[str, str])
async def hint(body: HintBody, principal: Caller, state: State) -> JSONResponse:
    """The prompt hint for the next message (`query`): what is known, then what earlier
    conversations add, at most `max_tokens` (capped by PMEM_HINT_MAX_TOKENS)."""
    text = await operations.platform_hint(
        state.store,
        principal,
        body.asked(),
        state.settings_cache,
        max_tokens=body.max_tokens,
        most_tokens=state.hint_max_tokens,
    )
    # as the recall: a JSONResponse skips FastAPI's validation and encoding of the return value
    return JSONResponse({"hint": text})


@router.delete("/v1/users/{user_id}/memories")
async def erase_user(user_id: uuid.UUID, principal: Caller, state: State) -> dict[str, int]:
    """Erase everything about a user, remembered conversations included (a service key or an admin;
    a team admin: what was said in their own teams)."""
    return {"erased": await operations.erase_user(state.store, principal, user_id)}
