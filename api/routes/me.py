"""`/v1/me/…`: what is remembered about the signed-in person, and their controls over it."""

from __future__ import annotations

import uuid
from typing import Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from api import operations
from api.deps import Caller, State
from api.schemas import MyMemoryBody, RejectBody, conversation_json, export_json, rejection_json
from store.model import Status
from store.services.json_shapes import memory_json

router = APIRouter(prefix="/v1/me", tags=["me"])


@router.get("/memories")
async def list_my_memories(
    principal: Caller,
    state: State,
    scope: Literal["user", "persona_user"] | None = None,
    persona_id: uuid.UUID | None = None,
    status: Status | None = None,
    team_id: uuid.UUID | None = None,
    limit: int = Query(default=50, ge=1, le=200),
    cursor: str | None = None,
) -> dict[str, object]:
    """Own `user` and `persona_user` memories, every status (pending ones are not used yet)."""
    page = await operations.my_memories(
        state.store,
        principal,
        scope=scope,
        persona_id=persona_id,
        status=status,
        team_id=team_id,
        limit=limit,
        cursor=cursor,
    )
    return {"items": [memory_json(m) for m in page.items], "next_cursor": page.next_cursor}


@router.patch("/memories/{memory_id}")
async def edit_my_memory(
    memory_id: uuid.UUID, body: MyMemoryBody, principal: Caller, state: State
) -> dict[str, object]:
    """Change an own memory: a new `value` (a person's edit makes it active), `pinned` (a pinned
    active memory is in every hint), or both."""
    memory = await operations.edit_mine(state.store, principal, memory_id, body.value, pinned=body.pinned)
    return memory_json(memory)


@router.post("/memories/{memory_id}/reject")
async def reject_my_memory(
    memory_id: uuid.UUID, principal: Caller, state: State, body: RejectBody | None = None
) -> dict[str, object]:
    """Reject an own memory, whatever its status: archived, no assistant uses it and extraction does
    not propose the same value again. With `{"forget": true}` the caller's conversation turns its
    evidence cites are erased too (with their words in the turns beside them and in the
    conversation's evidence); the answer adds `forgotten_turns`."""
    forget = body is not None and body.forget
    rejection = await operations.reject_mine(state.store, principal, memory_id, forget=forget)
    return rejection_json(rejection, forget=forget)


@router.delete("/memories/{memory_id}", status_code=204)
async def erase_my_memory(memory_id: uuid.UUID, principal: Caller, state: State) -> None:
    """Erase one own memory (row, revisions, embedding and its text in the audit trail), and the
    caller's words it quotes from the evidence of the team's other memories (the conversation's
    turns stay: `DELETE /v1/me/conversations/{channel_id}` erases those)."""
    await operations.erase_mine(state.store, principal, memory_id)


@router.delete("/memories")
async def erase_all_my_memories(principal: Caller, state: State) -> dict[str, int]:
    """Erase everything remembered about the caller, remembered conversations included."""
    return {"erased": await operations.erase_all_mine(state.store, principal)}


@router.get("/conversations")
async def list_my_conversations(
    principal: Caller,
    state: State,
    persona_id: uuid.UUID | None = None,
    team_id: uuid.UUID | None = None,
    limit: int = Query(default=50, ge=1, le=200),
    cursor: str | None = None,
) -> dict[str, object]:
    """Own remembered conversations, one per channel, latest first: when, with which personas, the
    first line and how many turns are kept (only the person reads them)."""
    page = await operations.my_conversations(
        state.store, principal, persona_id=persona_id, team_id=team_id, limit=limit, cursor=cursor
    )
    return {"items": [conversation_json(c) for c in page.items], "next_cursor": page.next_cursor}


@router.delete("/conversations/{channel_id}")
async def erase_my_conversation(channel_id: uuid.UUID, principal: Caller, state: State) -> dict[str, int]:
    """Erase the caller's remembered turns of one conversation (channel); memories stay."""
    return {"erased": await operations.erase_my_conversation(state.store, principal, channel_id)}


@router.delete("/conversations")
async def erase_all_my_conversations(principal: Caller, state: State) -> dict[str, int]:
    """Erase every remembered conversation of the caller; memories stay."""
    return {"erased": await operations.erase_my_conversations(state.store, principal)}


@router.get("/export")
async def export_my_data(principal: Caller, state: State) -> JSONResponse:
    """Every memory and revision (with evidence), audit row and remembered conversation turn about
    the caller, as a JSON download."""
    body = export_json(await operations.export_mine(state.store, principal))
    return JSONResponse(body, headers={"Content-Disposition": 'attachment; filename="my-memories.json"'})
