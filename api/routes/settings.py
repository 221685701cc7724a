"""`/v1/settings/…`: memory settings per level (null inherits), with the effective values."""

from __future__ import annotations

import uuid

from fastapi import APIRouter

from api import operations
from api.deps import Caller, State
from api.schemas import SettingsBody, settings_json

router = APIRouter(prefix="/v1/settings", tags=["settings"])


@router.get("/global")
async def get_global(principal: Caller, state: State) -> dict[str, object]:
    """Global settings (admins)."""
    return settings_json(await operations.settings_view(state.store, principal, "global", None))


@router.put("/global")
async def put_global(body: SettingsBody, principal: Caller, state: State) -> dict[str, object]:
    """Replace the global settings (admins)."""
    view = await operations.put_settings(
        state.store,
        principal,
        "global",
        None,
        body.row(),
        max_input_tokens=state.max_input_tokens,
        settings_cache=state.settings_cache,
    )
    return settings_json(view)


@router.get("/teams/{team_id}")
async def get_team(team_id: uuid.UUID, principal: Caller, state: State) -> dict[str, object]:
    """A team's settings (admins, that team's admins)."""
    return settings_json(await operations.settings_view(state.store, principal, "team", team_id))


@router.put("/teams/{team_id}")
async def put_team(
    team_id: uuid.UUID, body: SettingsBody, principal: Caller, state: State
) -> dict[str, object]:
    """Replace a team's settings (admins, that team's admins)."""
    view = await operations.put_settings(
        state.store,
        principal,
        "team",
        team_id,
        body.row(),
        max_input_tokens=state.max_input_tokens,
        settings_cache=state.settings_cache,
    )
    return settings_json(view)


@router.get("/personas/{persona_id}")
async def get_persona(persona_id: uuid.UUID, principal: Caller, state: State) -> dict[str, object]:
    """A persona's settings (admins and team admins read them)."""
    return settings_json(await operations.settings_view(state.store, principal, "persona", persona_id))


@router.put("/personas/{persona_id}")
async def put_persona(
    persona_id: uuid.UUID, body: SettingsBody, principal: Caller, state: State
) -> dict[str, object]:
    """Replace a persona's settings (admins: a persona's settings apply in every team)."""
    view = await operations.put_settings(
        state.store,
        principal,
        "persona",
        persona_id,
        body.row(),
        max_input_tokens=state.max_input_tokens,
        settings_cache=state.settings_cache,
    )
    return settings_json(view)
