"""The web UI's settings pages: the levels a principal may open (global, team, persona) and each
level's form."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from api import access
from api import operations as ops
from api.errors import BadInput, Forbidden
from api.principal import Principal
from api.ui import core
from api.ui.common import (
    NOTICES,
    EarlyAnswer,
    SecureRoute,
    Session,
    app_state_of,
    forbidden_page,
    json_response,
    names_of,
    not_found_page,
    redirect_to,
    refusals_answered,
    render_page,
    require_form,
    require_session,
    role_of,
    store_of,
    wants_json,
)
from store.model import SettingsLevel, SettingsRow

router = APIRouter(prefix="/ui", route_class=SecureRoute, include_in_schema=False)


@dataclass(frozen=True, slots=True)
class _Level:
    href: str
    label: str
    current: bool


def _levels(principal: Principal, path: str, names: core.Names = core.NO_NAMES) -> list[_Level]:
    links: list[tuple[str, str]] = []
    if role_of(principal) == "admin":
        links.append(("/ui/settings/global", "Global"))
    for team in getattr(principal, "teams", ()):
        links.append(
            (f"/ui/settings/teams/{team}", names.name("team", team) or f"Team {core.short_id(team)}")
        )
    return [_Level(href, label, href == path) for href, label in links]


@router.get("/settings")
async def settings_home(request: Request) -> Response:
    session = await require_session(request)
    levels = _levels(session.principal, "")
    if role_of(session.principal) not in core.REVIEWERS or not levels:
        return await forbidden_page(request, session)
    return RedirectResponse(levels[0].href, status_code=303)


@router.get("/settings/open")
async def settings_open(request: Request, level: str = "persona", target_id: str = "") -> Response:
    """The "open another level" form: to the team's or persona's settings page."""
    session = await require_session(request)
    if ":" in target_id:  # a pick from the list of known teams and personas: "team:<id>"
        level, _, target_id = target_id.partition(":")
    try:
        target = core.parse_uuid(target_id)
    except ValueError as exc:
        return await _settings_page(request, session, None, None, errors={}, open_error=str(exc))
    if target is None:
        return await _settings_page(request, session, None, None, errors={}, open_error="Enter an id.")
    kind = "teams" if level == "team" else "personas"
    return RedirectResponse(f"/ui/settings/{kind}/{target}", status_code=303)


async def _settings_page(
    request: Request,
    session: Session,
    level: SettingsLevel | None,
    target: uuid.UUID | None,
    *,
    errors: dict[str, str],
    open_error: str | None = None,
    notice: str | None = None,
    form: Mapping[str, Any] | None = None,
) -> Response:
    view = None
    if level is None and role_of(session.principal) not in core.REVIEWERS:
        return await forbidden_page(request, session)
    if level is not None:
        async with refusals_answered(request, session):
            current = await ops.settings_view(store_of(request), session.principal, level, target)
    teams = list(getattr(session.principal, "teams", ()))
    names = await names_of(
        request,
        {
            "team": [*teams, target] if level == "team" else teams,
            "persona": [target] if level == "persona" else [],
        },
    )
    if level is not None:
        view = _settings_form(session.principal, level, target, current, form, names)
    store = store_of(request)
    if role_of(session.principal) == "admin":
        team_picks = [(str(e.id), e.name) for e in await store.directory.directory("team")]
    else:
        team_picks = [(str(t), names.label("team", t)) for t in teams]
    persona_picks = [(str(e.id), e.name) for e in await store.directory.directory("persona")]
    status_code = 422 if errors or open_error else 200
    return await render_page(
        request,
        session,
        "settings.html",
        title="Settings",
        status_code=status_code,
        notice=notice,
        levels=_levels(session.principal, request.url.path, names),
        view=view,
        team_picks=team_picks,
        persona_picks=persona_picks,
        errors=errors,
        open_error=open_error,
        open_level=request.query_params.get("level", level or "persona"),
        open_query=request.query_params.get("target_id", ""),
        switch_choices=core.SWITCH_CHOICES,
    )


def _may_change(principal: Principal, level: SettingsLevel, target: uuid.UUID | None) -> bool:
    """Whether to offer the form at all (the rule is `api.access`'s; the server checks it again)."""
    try:
        access.check_settings_access(principal, level, target, write=True)
    except Forbidden:
        return False
    return True


def _settings_form(
    principal: Principal,
    level: SettingsLevel,
    target: uuid.UUID | None,
    current: ops.SettingsView,
    form: Mapping[str, Any] | None,
    names: core.Names = core.NO_NAMES,
) -> dict[str, Any]:
    """What the settings form shows: per field the level's own value, and what is in effect there."""
    rows = []
    for field in core.SETTING_FIELDS:
        value = getattr(current.own, field.name)
        effective = getattr(current.effective, field.name)
        source = current.inherited_from.get(field.name, "default")
        rows.append(
            {
                "field": field,
                "form_value": str(form.get(field.name) or "")
                if form is not None
                else core.form_value(field, value),
                "effect": core.effect_of(level, source, effective, field.name),
            }
        )
    if level == "global":
        title, action = "Global", "/ui/settings/global"
    elif level == "team":
        title, action = f"Team {names.name('team', target) or target}", f"/ui/settings/teams/{target}"
    else:
        title, action = (
            f"Persona {names.name('persona', target) or target}",
            f"/ui/settings/personas/{target}",
        )
    return {
        "title": title,
        "action": action,
        "level_name": level,
        "rows": rows,
        "writable": _may_change(principal, level, target),
    }


def _level_of(kind: str, target_id: str) -> tuple[SettingsLevel, uuid.UUID | None]:
    """The settings level a page's path names (`ValueError` when it names none)."""
    if kind not in ("global", "teams", "personas") or (kind == "global") != (target_id == ""):
        raise ValueError(kind)
    if kind == "global":
        return "global", None
    return ("team" if kind == "teams" else "persona"), uuid.UUID(target_id)


async def _level_or_not_found(
    request: Request, session: Session, kind: str, target_id: str
) -> tuple[SettingsLevel, uuid.UUID | None]:
    """The level a page's path names; when it names none the page answers 404."""
    try:
        return _level_of(kind, target_id)
    except ValueError:
        raise EarlyAnswer(await not_found_page(request, session)) from None


@router.get("/settings/{kind}")
@router.get("/settings/{kind}/{target_id}")
async def settings_level(request: Request, kind: str, target_id: str = "") -> Response:
    session = await require_session(request)
    level, target = await _level_or_not_found(request, session, kind, target_id)
    notice = NOTICES.get(request.query_params.get("notice", ""))
    return await _settings_page(request, session, level, target, errors={}, notice=notice)


@router.post("/settings/{kind}")
@router.post("/settings/{kind}/{target_id}")
async def settings_save(request: Request, kind: str, target_id: str = "") -> Response:
    session, form = await require_form(request)
    level, target = await _level_or_not_found(request, session, kind, target_id)
    values, errors = core.parse_settings_form(form)
    saved = None
    if not errors:
        try:
            async with refusals_answered(request, session):
                saved = await ops.put_settings(
                    store_of(request),
                    session.principal,
                    level,
                    target,
                    SettingsRow(level=level, target_id=target, **values),
                    max_input_tokens=app_state_of(request).max_input_tokens,
                    settings_cache=app_state_of(request).settings_cache,
                )
        except BadInput as exc:
            errors[core.field_named(exc.message)] = exc.message
    if errors:
        if wants_json(request):
            name, message = next(iter(errors.items()))
            return json_response(422, error=message, field=name)
        return await _settings_page(request, session, level, target, errors=errors, form=form)
    if wants_json(request) and saved is not None:
        view = _settings_form(session.principal, level, target, saved, None)
        inherit = {
            row["field"].name: {"value": row["effect"].value, "source": row["effect"].source}
            for row in view["rows"]
        }
        return json_response(200, message="Saved.", inherit=inherit)
    return redirect_to(request.url.path, notice="saved")
