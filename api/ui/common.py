"""What the web UI's pages share: the signed-in session, rendering a page or a message, refusals,
redirects and reading a posted form. This is the shell: HTTP in, templates out; the pure
decisions live in `api.ui.core`."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

from fastapi import Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape

from api import access
from api import auth as api_auth
from api import operations as ops
from api.deps import AppState
from api.errors import BadInput, Conflict, Forbidden, NotFound
from api.principal import Principal
from api.ui import core
from store.core.store import CoreStore
from store.rules.admission import admit
from store.team_scope import bind_scope

log = logging.getLogger("pmem.api")

HERE = Path(__file__).resolve().parent.parent  # api/: its templates/ and static/

templates = Environment(
    loader=FileSystemLoader(str(HERE / "templates")),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)

# Known notices and errors shown after a redirect (codes in the query string, never free text).
NOTICES = {
    "approved": "Approved.",
    "rejected": "Rejected.",
    "forgotten": "Rejected, and what was said was erased.",
    "forgotten_mine": "Rejected, and what you said there was erased. No assistant uses it.",
    "edited": "Saved and approved.",
    "bulk": "Done: the selected items were decided.",
    "saved": "Saved.",
    "deleted": "Deleted.",
    "deleted_all": "Everything remembered about you was erased.",
    "conversation_deleted": "Deleted. That conversation is no longer remembered.",
    "conversations_deleted": "Every remembered conversation was erased. Your memories stay.",
    "pinned": "Pinned: once approved, assistants see it in every conversation.",
    "unpinned": "Unpinned: assistants see it only when it is relevant.",
}


class EarlyAnswer(Exception):
    """The answer a page gives before its own work is done (not signed in, a refused form, a
    refusal of the operation); `SecureRoute` sends it."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


class SecureRoute(APIRoute):
    """Every UI response carries the Content-Security-Policy and the other security headers; an
    `EarlyAnswer` raised by a page is its response."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def with_headers(request: Request) -> Response:
            try:
                response = await handler(request)
            except EarlyAnswer as early:
                response = early.response
            for name, value in core.SECURITY_HEADERS.items():
                response.headers.setdefault(name, value)
            return response

        return with_headers


# --- the shell's ports: credentials, the store, the CSRF key -----------------------------------


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in person's open session: its cookie's token, who they are, their forms' CSRF token."""

    token: str
    principal: Principal
    csrf: str


def app_state_of(request: Request) -> AppState:
    state: AppState = request.app.state.pmem
    return state


def store_of(request: Request) -> CoreStore:
    return app_state_of(request).store


async def names_of(request: Request, ids: Mapping[str, Any]) -> core.Names:
    """The display names of the ids a page shows (kind → ids); unknown ids keep their short form."""
    found: dict[str, dict[str, str]] = {}
    for kind in ("team", "persona", "user"):
        wanted = [parsed for raw in ids.get(kind, ()) if (parsed := parse_id(str(raw))) is not None]
        known = await store_of(request).directory.names(kind, wanted) if wanted else {}
        found[kind] = {str(item): name for item, name in known.items()}
    return core.Names(teams=found["team"], personas=found["persona"], users=found["user"])


async def open_session(request: Request) -> Session | None:
    """The open session of the request's cookie (`store.core.ui_sessions`); None without one."""
    token = request.cookies.get(core.SESSION_COOKIE)
    if not token:
        return None
    principal = await app_state_of(request).session_principal(token)
    if principal is None:
        return None
    # the database's second line (row-level security) keys on the signed-in person's teams
    bind_scope(access.principal_scope(principal))
    return Session(
        token=token, principal=principal, csrf=api_auth.csrf_token(token, app_state_of(request).auth)
    )


async def require_session(request: Request) -> Session:
    """The request's open session; without one the page answers with the sign-in page."""
    session = await open_session(request)
    if session is None:
        raise EarlyAnswer(await signed_out_page(request))
    return session


def role_of(principal: Principal) -> str:
    return str(principal.role)


# --- rendering -----------------------------------------------------------------------------------


async def signed_in_label(request: Request, principal: Principal) -> str:
    """`core.signed_in_as` for a principal, with the name the directory knows for them."""
    subject = principal.subject
    if subject is None:
        return core.signed_in_as(role_of(principal), None, subject)
    names = await store_of(request).directory.names("user", [subject])
    return core.signed_in_as(role_of(principal), names.get(subject), subject)


async def render_page(
    request: Request,
    session: Session | None,
    template: str,
    *,
    title: str,
    status_code: int = 200,
    notice: str | None = None,
    **context: Any,
) -> HTMLResponse:
    role = role_of(session.principal) if session else ""
    waiting = context.pop("waiting", None)
    if session is not None and waiting is None and role in core.REVIEWERS:
        waiting = await queue_waiting(request, session)
    html = templates.get_template(template).render(
        title=title,
        principal=session.principal if session else None,
        csrf=session.csrf if session else "",
        nav=core.nav_links(role, request.url.path) if session else (),
        signed_in=await signed_in_label(request, session.principal) if session else "",
        waiting=waiting,
        notice=notice,
        **context,
    )
    return HTMLResponse(html, status_code=status_code)


def message_page(
    request: Request,
    session: Session | None,
    *,
    title: str,
    lines: tuple[str, ...],
    status_code: int,
    link: tuple[str, str] | None = None,
    refresh_to: str | None = None,
) -> Awaitable[HTMLResponse]:
    return render_page(
        request,
        session,
        "message.html",
        title=title,
        lines=lines,
        status_code=status_code,
        bad=status_code >= 400,
        link={"href": link[0], "label": link[1]} if link else None,
        refresh_to=refresh_to,
        waiting=0 if status_code >= 400 else None,
    )


async def signed_out_page(request: Request, *, expired: bool = False) -> HTMLResponse:
    """401 with what to do; a session cookie that no longer verifies (expired) is removed."""
    stale = core.SESSION_COOKIE in request.cookies
    lines = (
        ("Your session has ended." if expired or stale else "You are not signed in."),
        "Open the memory page again from your chat platform: its link signs you in.",
    )
    response = await message_page(request, None, title="Sign in to continue", lines=lines, status_code=401)
    if stale:
        response.delete_cookie(core.SESSION_COOKIE, path=core.COOKIE_PATH, httponly=True, samesite="strict")
    return response


# status → the page's title, its line and the label of the link back to the person's page
REFUSAL_PAGES = {
    403: ("Not available to you", "This page is for admins and team admins.", "Go to your page"),
    404: (
        "Not found",
        "It does not exist, or it is not yours to see. It may have been decided or erased already.",
        "Back",
    ),
}


def refusal_page(
    request: Request, session: Session, status_code: Literal[403, 404]
) -> Awaitable[HTMLResponse]:
    """403 (the page is not for this role) or 404 (nothing there for this person), with a way back."""
    title, line, label = REFUSAL_PAGES[status_code]
    landing = core.landing_path(role_of(session.principal))
    return message_page(
        request, session, title=title, lines=(line,), status_code=status_code, link=(landing, label)
    )


def forbidden_page(request: Request, session: Session) -> Awaitable[HTMLResponse]:
    """403: the page is not for this role."""
    return refusal_page(request, session, 403)


def not_found_page(request: Request, session: Session) -> Awaitable[HTMLResponse]:
    """404: nothing there for this person."""
    return refusal_page(request, session, 404)


async def refused_page(request: Request, session: Session, exc: Exception) -> Response:
    """NotFound (or an id that is not one) → 404, Forbidden → 403, Conflict → 409; JSON for
    fetch, else a page."""
    if isinstance(exc, Conflict):
        message = "Someone else decided this already. Reload the page to see the queue as it is now."
        if wants_json(request):
            return json_response(409, error=message)
        return await message_page(
            request, session, title="Already decided", lines=(message,), status_code=409
        )
    if isinstance(exc, Forbidden):
        return (
            json_response(403, error="Not allowed.")
            if wants_json(request)
            else await forbidden_page(request, session)
        )
    if wants_json(request):
        return json_response(
            404, error="Not found: it may have been decided or erased already. Reload the page."
        )
    return await not_found_page(request, session)


async def edit_refused_page(
    request: Request, session: Session, exc: BadInput, *, title: str, action: str, value: str, back: str
) -> Response:
    """A refused edit: the error next to the field (JSON for scripts, else the form again, holding
    what was sent as admitted: a refused secret is not painted back into the page)."""
    if wants_json(request):
        return json_response(422, error=str(exc), field="value")
    return await render_page(
        request,
        session,
        "edit.html",
        title=title,
        status_code=422,
        action=action,
        value=admit(value).text,
        error=str(exc),
        back=back,
    )


@asynccontextmanager
async def refusals_answered(request: Request, session: Session) -> AsyncIterator[None]:
    """NotFound, Forbidden or Conflict raised inside the block: the page answers `refused_page`."""
    try:
        yield
    except (NotFound, Forbidden, Conflict) as exc:
        raise EarlyAnswer(await refused_page(request, session, exc)) from exc


def parse_id(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def id_or_not_found(text: str) -> uuid.UUID:
    """The id a path names; `NotFound` when it names none."""
    parsed = parse_id(text)
    if parsed is None:
        raise NotFound(text)
    return parsed


def wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def json_response(status_code: int, **body: Any) -> JSONResponse:
    return JSONResponse(body, status_code=status_code)


def redirect_to(path: str, **params: str) -> RedirectResponse:
    query = urlencode({k: v for k, v in params.items() if v})
    return RedirectResponse(f"{path}?{query}" if query else path, status_code=303)


def to_queue(back: str, **params: str) -> RedirectResponse:
    """Back to the review queue at `back` (its query string, see `back_to`), with `params` added."""
    query = "&".join(part for part in (back, urlencode(params)) if part)
    return RedirectResponse(f"/ui/review?{query}", status_code=303)


def changed(request: Request, redirect: Response, **body: Any) -> Response:
    """After a change: `body` as JSON (200) for fetch, else `redirect`, the page that shows it."""
    return json_response(200, **body) if wants_json(request) else redirect


def back_to(form: Mapping[str, Any]) -> str:
    """The queue's query string to return to (re-parsed, so only known filters survive)."""
    raw = str(form.get("back") or "")
    filters, _ = core.parse_review_filters(dict(query_pairs(raw)))
    return filters.query(cursor=filters.cursor)


def query_pairs(query: str) -> list[tuple[str, str]]:
    from urllib.parse import parse_qsl

    return parse_qsl(query, keep_blank_values=False)[:20]


@dataclass(frozen=True, slots=True)
class Posted:
    """A POSTed form after the session and CSRF checks (or the response refusing it)."""

    session: Session | None
    form: dict[str, Any]
    refusal: Response | None


async def read_posted(request: Request) -> Posted:
    """Read a form; refuse it without a valid session (401) or without its CSRF token (403)."""
    form_data = await request.form()
    form: dict[str, Any] = {}
    for key, value in form_data.multi_items():
        if isinstance(value, str):
            form.setdefault(key, []).append(value)
    flat = {k: (v if k == "ids" else v[-1]) for k, v in form.items()}
    session = await open_session(request)
    if session is None:
        if wants_json(request):
            return Posted(None, flat, json_response(401, error="You are not signed in."))
        return Posted(None, flat, await signed_out_page(request, expired=True))
    if not api_auth.csrf_ok(session.token, flat.get(core.CSRF_FIELD), app_state_of(request).auth):
        message = "This form has expired or did not come from this site. Reload the page and try again."
        if wants_json(request):
            return Posted(session, flat, json_response(403, error=message))
        response = await message_page(
            request, session, title="Form refused", lines=(message,), status_code=403
        )
        return Posted(session, flat, response)
    return Posted(session, flat, None)


async def require_form(request: Request) -> tuple[Session, dict[str, Any]]:
    """A POSTed form with its session; without them the page answers `read_posted`'s refusal."""
    posted = await read_posted(request)
    if posted.refusal is not None:
        raise EarlyAnswer(posted.refusal)
    assert posted.session is not None
    return posted.session, posted.form


# --- sign-in -------------------------------------------------------------------------------------


async def queue_waiting(request: Request, session: Session) -> int | None:
    """How many items wait in the queues this session reviews; None when it reviews none."""
    try:
        return sum((await ops.waiting_counts(store_of(request), session.principal)).values())
    except Forbidden:
        return None
