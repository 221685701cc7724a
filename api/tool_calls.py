"""Who a tool call acts for, and running it: the one place for the HTTP endpoint and MCP alike.

A service (API key) names the user it acts for; a person acts for themselves only, and in a team
only if their token lists it. The decision is pure (`tool_subject`); `run_tool` is the shell."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from api import access
from api.errors import BadInput, Forbidden
from api.principal import Principal
from store.core.store import CoreStore
from store.services.tools import MemoryTools, ToolCallError, ToolContext, tool_schemas
from store.team_scope import team_scope


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSubject:
    """The conversation context a tool call runs in."""

    user_id: uuid.UUID
    persona_id: uuid.UUID | None
    team_id: uuid.UUID | None


def tool_subject(
    principal: Principal,
    *,
    user_id: uuid.UUID | None,
    persona_id: uuid.UUID | None,
    team_id: uuid.UUID | None,
) -> ToolSubject:
    """The context a caller may run tools in; Forbidden (a person naming someone else or a team
    their token does not list) or BadInput (a service without a user) otherwise."""
    if principal.is_person:
        if principal.subject is None:
            raise Forbidden("the credential names no person")
        if user_id is not None and user_id != principal.subject:
            raise Forbidden("a person's tools act for themselves only; leave user_id out or use your own")
        if team_id is not None and team_id not in principal.teams:
            raise Forbidden("your token does not list this team (claim pmem_teams)")
        return ToolSubject(user_id=principal.subject, persona_id=persona_id, team_id=team_id)
    if user_id is None:
        raise BadInput("user_id: a service names the user the tool acts for")
    return ToolSubject(user_id=user_id, persona_id=persona_id, team_id=team_id)


def available_tools() -> list[dict[str, Any]]:
    """Every memory tool's OpenAI function schema."""
    return tool_schemas()


def bound_tools(store: CoreStore, principal: Principal, subject: ToolSubject) -> MemoryTools:
    """The tools bound to a checked context; audit rows name the caller."""
    return MemoryTools(
        ToolContext(
            user_id=subject.user_id,
            persona_id=subject.persona_id,
            team_id=subject.team_id,
            store=store,
            actor=principal.actor,
        )
    )


async def run_tool(
    store: CoreStore, principal: Principal, subject: ToolSubject, name: str, arguments: Any
) -> dict[str, Any]:
    """One tool call's result; BadInput with the tool's message for an unknown tool or bad arguments."""
    try:
        with team_scope(access.request_scope(principal, subject.team_id)):
            return await bound_tools(store, principal, subject).handle_tool_call(name, arguments)
    except ToolCallError as exc:
        raise BadInput(str(exc)) from exc
