"""`TeamScope`: the teams the running work may touch, the database's second line behind the team
filters every query writes.

Postgres enforces it (row-level security, migration 0014): each transaction the store opens first
sets the transaction-local `pmem.teams` from the current scope. The API derives the scope from
the authenticated caller (a person's token teams; a service narrowed to the team it names), the
worker from the event it handles. Work across teams (retention, the commands, a platform admin)
enters `platform_scope(reason)`, which logs the reason. Outside any scope a session sees only rows
of no team: a path that forgot its scope shows nothing rather than everything.

Enforced only when the store connects as a role that owns no table (`pmem_app`); SQLite has no
such second line. Backend-agnostic: the SQLite store ignores it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

_log = logging.getLogger("pmem.platform_scope")

# what `pmem.teams` holds for the platform scope (every team)
EVERY_TEAM = "*"
# a session of the product's role outside any scope: rows of no team only
NO_TEAM = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class TeamScope:
    """The teams the work may touch; `teams=None` is the platform scope (every team), entered
    only through `platform_scope` with its `reason`."""

    teams: frozenset[uuid.UUID] | None
    reason: str = ""

    @property
    def is_platform(self) -> bool:
        """Whether this scope reaches every team."""
        return self.teams is None


def teams_scope(teams: Iterable[uuid.UUID | None]) -> TeamScope:
    """The scope of these teams (None entries, work of no team, add nothing)."""
    return TeamScope(teams=frozenset(team for team in teams if team is not None))


def narrowed(scope: TeamScope, team: uuid.UUID | None) -> TeamScope:
    """`scope` cut down to the one team a request names (None: rows of no team only); a scope
    is only ever narrowed by what a request says, never widened."""
    wanted = frozenset() if team is None else frozenset({team})
    if scope.teams is None:
        return TeamScope(teams=wanted, reason=scope.reason)
    return TeamScope(teams=scope.teams & wanted, reason=scope.reason)


def scope_setting(scope: TeamScope | None) -> str:
    """The value of `pmem.teams` for `scope`: `*`, the teams comma-separated, or empty."""
    if scope is None:
        return NO_TEAM
    if scope.teams is None:
        return EVERY_TEAM
    return ",".join(sorted(str(team) for team in scope.teams))


@dataclass(slots=True)
class ScopeCell:
    """Where the running task's scope lives; `request_cell` opens one that a later step of the
    same request fills in (the caller is known only once authenticated)."""

    scope: TeamScope | None = None


_CELL: ContextVar[ScopeCell | None] = ContextVar("pmem_team_scope", default=None)


def current_team_scope() -> TeamScope | None:
    """The scope the running task is in (None: none, so rows of no team only)."""
    cell = _CELL.get()
    return None if cell is None else cell.scope


def current_setting() -> str:
    """`pmem.teams` for the running task (`scope_setting` of its scope)."""
    return scope_setting(current_team_scope())


@contextmanager
def request_cell() -> Iterator[ScopeCell]:
    """Run the block with an empty scope (rows of no team) that `bind_scope` may fill later."""
    cell = ScopeCell()
    token = _CELL.set(cell)
    try:
        yield cell
    finally:
        _CELL.reset(token)


def bind_scope(scope: TeamScope) -> None:
    """Set the scope of the enclosing `request_cell`; ValueError outside one."""
    cell = _CELL.get()
    if cell is None:
        raise ValueError("no request scope is open to bind a team scope to")
    cell.scope = scope


@contextmanager
def team_scope(scope: TeamScope) -> Iterator[TeamScope]:
    """Run the block (and the tasks it starts) in `scope`."""
    token = _CELL.set(ScopeCell(scope))
    try:
        yield scope
    finally:
        _CELL.reset(token)


@contextmanager
def platform_scope(reason: str) -> Iterator[TeamScope]:
    """Run the block across every team; the reason is logged, so such work leaves a trail."""
    _log.info("platform scope entered: %s", reason)
    with team_scope(TeamScope(teams=None, reason=reason)) as scope:
        yield scope


def platform(reason: str) -> TeamScope:
    """The platform scope for `bind_scope`, its reason logged as by `platform_scope`."""
    _log.info("platform scope entered: %s", reason)
    return TeamScope(teams=None, reason=reason)
