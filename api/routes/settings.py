"""`/v1/settings/…`: memory settings per level (null inherits), with the effective values."""

from __future__ import annotations

import uuid

from fastapi import APIRouter

from api import operations
from api.deps import AppState, Caller, State
from api.principal import Principal
from api.schemas import SettingsBody, settings_json
from store.model import SettingsLevel

router = APIRouter(prefix="/v1/settings", tags=["settings"])


async def _replace(
    state: AppState, principal: Principal, level: SettingsLevel, target: uuid.UUID | None, body: SettingsBody
) -> dict[str, object]:
    """Replace one level's row; the level's settings as they are now."""
    view = await operations.put_settings(
        state.store,
        principal,
        level,
        target,
        body.row(),
        max_input_tokens=state.max_input_tokens,
        settings_cache=state.settings_cache,
    )
    return settings_json(view)


@router.get("/global")
async def get_global(principal: Caller, state: State) -> dict[str, object]:
    """Global settings (admins)."""
    return settings_json(await operations.settings_view(state.store, principal, "global", None))


@router.put("/global")
async def put_global(body: SettingsBody, principal: Caller, state: State) -> dict[str, object]:
    """Replace the global settings (admins)."""
    return await _replace(state, principal, "global", None, body)


@router.get("/teams/{team_id}")
async def get_team(team_id: uuid.UUID, principal: Caller, state: State) -> dict[str, object]:
    """A team's settings (admins, that team's admins)."""
    return settings_json(await operations.settings_view(state.store, principal, "team", team_id))


@router.put("/teams/{team_id}")
async def put_team(
    team_id: uuid.UUID, body: SettingsBody, principal: Caller, state: State
) -> dict[str, object]:
    """Replace a team's settings (admins, that team's admins)."""
    return await _replace(state, principal, "team", team_id, body)


@router.get("/personas/{persona_id}")
async def get_persona(persona_id: uuid.UUID, principal: Caller, state: State) -> dict[str, object]:
    """A persona's settings (admins and team admins read them)."""
    return settings_json(await operations.settings_view(state.store, principal, "persona", persona_id))


@router.put("/personas/{persona_id}")
async def put_persona(
    persona_id: uuid.UUID, body: SettingsBody, principal: Caller, state: State
) -> dict[str, object]:
    """Replace a persona's settings (admins: a persona's settings apply in every team)."""
    return await _replace(state, principal, "persona", persona_id, body)
