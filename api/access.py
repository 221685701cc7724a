"""Authorization rules (pure): what a principal may do to which memory or setting.

A memory the caller may not see is reported as missing (404), exactly like one that does not exist.
A right the role lacks altogether is 403."""

from __future__ import annotations

import uuid

from api.errors import Forbidden, NotFound
from api.principal import Principal
from store.model import Memory, SettingsLevel
from store.team_scope import TeamScope, narrowed, platform, teams_scope


def principal_scope(principal: Principal) -> TeamScope:
    """The teams the database lets a request of this caller touch: a person's token teams, every
    team for an admin (the platform scope, logged), none for a service until a route names the team
    it acts in (`request_scope`) or enters the platform scope."""
    if principal.role == "admin":
        return platform(f"request of {principal.actor}")
    if principal.role == "service":
        return teams_scope(())
    return teams_scope(principal.teams)


def request_scope(principal: Principal, team_id: uuid.UUID | None) -> TeamScope:
    """The scope of a request acting in one team's context (None: no team's): that team when the
    caller may act in it (a service or an admin: any team; a person: their token's), else none."""
    authorized = (
        TeamScope(teams=None) if principal.role in ("service", "admin") else teams_scope(principal.teams)
    )
    return narrowed(authorized, team_id)


def require_person(principal: Principal) -> uuid.UUID:
    """The person's UUID; 403 for services (they act for users through the platform endpoints)."""
    if not principal.is_person or principal.subject is None:
        raise Forbidden("this endpoint is for people (a JWT); services use /v1/recall, /v1/hint and erasure")
    return principal.subject


def require_reviewer(principal: Principal) -> frozenset[uuid.UUID] | None:
    """The teams a reviewer may review (None: every team and team-less memories, for admins)."""
    if principal.role == "admin":
        return None
    if principal.role == "team_admin":
        return principal.teams
    raise Forbidden("reviewing needs the admin or team_admin role")


def require_service(principal: Principal) -> None:
    """403 unless the caller is a service (an API key)."""
    if principal.role != "service":
        raise Forbidden("this endpoint is for services: use an API key from `pmem keys create`")


def require_eraser(principal: Principal) -> frozenset[uuid.UUID] | None:
    """The teams within which the caller may erase a user's memories and conversations (None: all
    of them, for a service or an admin; a team admin: their own teams); 403 for anybody else.
    Erasing never shows what it erases: no role but the person reads their own turns."""
    if principal.role in ("service", "admin"):
        return None
    if principal.role == "team_admin":
        return principal.teams
    raise Forbidden("erasing a user's memories needs an admin, a team admin or a service key")


def may_review(principal: Principal, memory: Memory) -> bool:
    """Admins review everything; team admins the memories of their teams (not team-less ones)."""
    teams = require_reviewer(principal)
    return teams is None or (memory.team_id is not None and memory.team_id in teams)


def is_about(person: uuid.UUID, memory: Memory) -> bool:
    """Whether a memory is the person's own: their `user` memory or a `persona_user` one about them."""
    if memory.scope == "user":
        return memory.owner_id == person
    return memory.scope == "persona_user" and memory.user_id == person


def reviewable(principal: Principal, memory: Memory | None) -> Memory:
    """The memory if the reviewer may see it, else 404; 403 for a role that reviews nothing, whether
    or not the memory is visible to it (the database shows a person only their teams' rows)."""
    require_reviewer(principal)
    if memory is None or not may_review(principal, memory):
        raise NotFound("no such memory")
    return memory


def own(principal: Principal, memory: Memory | None) -> Memory:
    """The memory if it is the person's own, else 404."""
    person = require_person(principal)
    if memory is None or not is_about(person, memory):
        raise NotFound("no such memory")
    return memory


def check_settings_access(
    principal: Principal, level: SettingsLevel, target: uuid.UUID | None, *, write: bool
) -> None:
    """Global settings: admins. A team's: admins and that team's admins. A persona's: admins; team
    admins may read them, but a persona's settings apply in every team, so only admins change them."""
    if principal.role == "admin":
        return
    if principal.role != "team_admin":
        raise Forbidden("settings need the admin or team_admin role")
    if level == "global":
        raise Forbidden("global settings need the admin role")
    if level == "team" and target not in principal.teams:
        raise Forbidden("a team admin manages only the settings of their own teams")
    if level == "persona" and write:
        raise Forbidden("a persona's settings apply in every team; only an admin changes them")
