"""The memory tools over HTTP, for a chat platform's backend in any language: the schemas to hand
the model, and one endpoint that runs the model's tool call in a user's conversation context."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from api import tool_calls
from api.deps import Caller, State
from store.services.tools import TOOL_NAMES

router = APIRouter(prefix="/v1/tools", tags=["tools"])


class ToolCallBody(BaseModel):
    """One tool call: the name and arguments the model produced, and whose conversation it is."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100, json_schema_extra={"enum": list(TOOL_NAMES)})
    # the model's arguments: an object, or the JSON string the chat completion returned
    arguments: dict[str, Any] | str | None = None
    user_id: uuid.UUID | None = None  # a service: required; a person: omitted or their own
    persona_id: uuid.UUID | None = None
    team_id: uuid.UUID | None = None


@router.get("")
async def list_tools(principal: Caller) -> dict[str, list[dict[str, Any]]]:
    """The tools' OpenAI function schemas (`tools=[…]` of a chat completion)."""
    del principal  # any authenticated caller
    return {"tools": tool_calls.available_tools()}


@router.post("/call")
async def call_tool(body: ToolCallBody, principal: Caller, state: State) -> dict[str, Any]:
    """Run one tool call; `{"result": …}`, or `{"error": …}` (422) to hand back to the model."""
    subject = tool_calls.tool_subject(
        principal, user_id=body.user_id, persona_id=body.persona_id, team_id=body.team_id
    )
    result = await tool_calls.run_tool(state.store, principal, subject, body.name, body.arguments)
    return {"result": result}
