"""FastAPI dependencies: the app's state (store, auth) and the authenticated caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from api import access
from api.auth import (
    CSRF_HEADER,
    SESSION_COOKIE,
    ApiKeyCache,
    AuthConfig,
    authenticate,
    csrf_ok,
    session_digest,
)
from api.errors import Forbidden
from api.principal import PERSON_ROLES, Principal
from api.read_routing import RecentWriters
from store.core.store import CoreStore
from store.read_scope import current_scope
from store.services.settings_cache import SettingsCache
from store.team_scope import bind_scope

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(kw_only=True, slots=True)
class AppState:
    """What every request handler needs, created once per app."""

    store: CoreStore
    auth: AuthConfig
    keys: ApiKeyCache
    settings_cache: SettingsCache  # the settings the platform's recall (the hot path) reads
    max_input_tokens: int
    hint_max_tokens: int  # the prompt hint's largest size (PMEM_HINT_MAX_TOKENS)
    max_body_bytes: int
    ui_session_s: float = 8 * 3600  # how long a web-UI session lasts after sign-in
    sign_in_max_s: float = 600  # the longest life a sign-in token may have
    # with read replicas: who wrote lately, so their reads go to the primary (api.read_routing)
    recent_writers: RecentWriters | None = None

    async def session_principal(self, cookie: str) -> Principal | None:
        """The person signed in with this session cookie; None when it is unknown, ended or expired."""
        session = await self.store.ui_sessions.ui_session(session_digest(cookie))
        if session is None or session.role not in PERSON_ROLES:
            return None
        role = next(r for r in PERSON_ROLES if r == session.role)
        return Principal(role=role, subject=session.subject, teams=frozenset(session.teams))


async def app_state(request: Request) -> AppState:
    """The app's state (a coroutine: FastAPI runs a plain function dependency in its thread pool,
    a thread hop on every request)."""
    state: AppState = request.app.state.pmem
    return state


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def current_principal(request: Request, state: Annotated[AppState, Depends(app_state)]) -> Principal:
    """The caller, from the bearer token or the session cookie. A cookie-authenticated change must
    carry the session's CSRF token (header `X-CSRF-Token` or form field `csrf_token`)."""
    bearer = _bearer(request)
    cookie = request.cookies.get(SESSION_COOKIE)
    principal = await authenticate(
        bearer=bearer, cookie=cookie, config=state.auth, keys=state.keys, sessions=state.session_principal
    )
    if bearer is None and cookie and request.method not in _SAFE_METHODS:
        presented = request.headers.get(CSRF_HEADER)
        if presented is None and request.headers.get("content-type", "").startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")
        ):
            form = await request.form()
            field = form.get("csrf_token")
            presented = field if isinstance(field, str) else None
        if not csrf_ok(cookie, presented, state.auth):
            raise Forbidden("the form's CSRF token is missing or wrong; reload the page and try again")
    request.state.principal = principal
    # the database's second line (row-level security) keys on the caller's own teams
    bind_scope(access.principal_scope(principal))
    writers = state.recent_writers
    if writers is not None and writers.wrote_recently(principal.actor):
        scope = current_scope()
        if scope is not None:
            scope.primary = True  # this caller's own recent write must show
    return principal


Caller = Annotated[Principal, Depends(current_principal)]
State = Annotated[AppState, Depends(app_state)]
