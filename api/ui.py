"""The web UI under `/ui/`: server-rendered pages (templates in `api/templates/`, static files in
`api/static/`), a session of the server's own from `/ui/login?token=<sign-in token>`, CSRF tokens
on every form.

This is the shell: HTTP in, templates out. Who may do what is decided by `api/operations.py` (the
same functions the JSON API calls), never here; the UI only hides what a role cannot use. Pure
decisions (cookies, CSRF, parsing, view models) live in `api/ui_core.py`.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape

from api import access
from api import auth as api_auth
from api import operations as ops
from api import ui_core as core
from api.deps import AppState
from api.errors import BadInput, Conflict, Forbidden, NotFound, Unauthorized
from api.schemas import export_json
from store.model import Page, ReviewItem, SettingsLevel, SettingsRow, UiSession
from store.rules.admission import admit
from store.team_scope import bind_scope

log = logging.getLogger("pmem.api")

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
STATIC_FILES = {
    "ui.css": "text/css; charset=utf-8",
    "ui.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}

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
MY_CONVERSATIONS = 200  # the newest shown on "My memories"; the download has every one
MY_PAGES = 10  # "My memories" shows up to 2000; the download has everything
QUEUE_ERRORS = {"none_selected": "Select at least one item first."}


class _SecureRoute(APIRoute):
    """Every UI response carries the Content-Security-Policy and the other security headers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def with_headers(request: Request) -> Response:
            response = await handler(request)
            for name, value in core.SECURITY_HEADERS.items():
                response.headers.setdefault(name, value)
            return response

        return with_headers


router = APIRouter(prefix="/ui", route_class=_SecureRoute, include_in_schema=False)


# --- the shell's ports: credentials, the store, the CSRF key -----------------------------------


@dataclass(frozen=True, slots=True)
class Session:
    token: str
    principal: Any
    csrf: str


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.pmem
    return state


def _store(request: Request) -> Any:
    return _state(request).store


async def _names(request: Request, ids: Mapping[str, Any]) -> core.Names:
    """The display names of the ids a page shows (kind → ids); unknown ids keep their short form."""
    found: dict[str, dict[str, str]] = {}
    for kind in ("team", "persona", "user"):
        wanted = [parsed for raw in ids.get(kind, ()) if (parsed := _parse_id(str(raw))) is not None]
        known = await _store(request).names(kind, wanted) if wanted else {}
        found[kind] = {str(item): name for item, name in known.items()}
    return core.Names(teams=found["team"], personas=found["persona"], users=found["user"])


async def _session(request: Request) -> Session | None:
    """The open session of the request's cookie (`store.core.ui_sessions`); None without one."""
    token = request.cookies.get(core.SESSION_COOKIE)
    if not token:
        return None
    principal = await _state(request).session_principal(token)
    if principal is None:
        return None
    # the database's second line (row-level security) keys on the signed-in person's teams
    bind_scope(access.principal_scope(principal))
    return Session(token=token, principal=principal, csrf=api_auth.csrf_token(token, _state(request).auth))


def _role(principal: Any) -> str:
    return str(principal.role)


# --- rendering -----------------------------------------------------------------------------------


async def _signed_in_as(request: Request, principal: Any) -> str:
    """`core.signed_in_as` for a principal, with the name the directory knows for them."""
    subject = principal.subject
    names = await _store(request).names("user", [subject]) if subject is not None else {}
    return core.signed_in_as(_role(principal), names.get(subject), subject)


async def _page(
    request: Request,
    session: Session | None,
    template: str,
    *,
    title: str,
    status_code: int = 200,
    notice: str | None = None,
    **context: Any,
) -> HTMLResponse:
    role = _role(session.principal) if session else ""
    waiting = context.pop("waiting", None)
    if session is not None and waiting is None and role in core.REVIEWERS:
        waiting = await _waiting(request, session)
    html = templates.get_template(template).render(
        title=title,
        principal=session.principal if session else None,
        csrf=session.csrf if session else "",
        nav=core.nav_links(role, request.url.path) if session else (),
        signed_in=await _signed_in_as(request, session.principal) if session else "",
        waiting=waiting,
        notice=notice,
        **context,
    )
    return HTMLResponse(html, status_code=status_code)


def _message(
    request: Request,
    session: Session | None,
    *,
    title: str,
    lines: tuple[str, ...],
    status_code: int,
    link: tuple[str, str] | None = None,
    refresh_to: str | None = None,
) -> Awaitable[HTMLResponse]:
    return _page(
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


async def _signed_out(request: Request, *, expired: bool = False) -> HTMLResponse:
    """401 with what to do; a session cookie that no longer verifies (expired) is removed."""
    stale = core.SESSION_COOKIE in request.cookies
    lines = (
        ("Your session has ended." if expired or stale else "You are not signed in."),
        "Open the memory page again from your chat platform: its link signs you in.",
    )
    response = await _message(request, None, title="Sign in to continue", lines=lines, status_code=401)
    if stale:
        response.delete_cookie(core.SESSION_COOKIE, path=core.COOKIE_PATH, httponly=True, samesite="strict")
    return response


def _forbidden(request: Request, session: Session) -> Awaitable[HTMLResponse]:
    return _message(
        request,
        session,
        title="Not available to you",
        lines=("This page is for admins and team admins.",),
        status_code=403,
        link=(core.landing_path(_role(session.principal)), "Go to your page"),
    )


def _not_found(request: Request, session: Session) -> Awaitable[HTMLResponse]:
    return _message(
        request,
        session,
        title="Not found",
        lines=("It does not exist, or it is not yours to see. It may have been decided or erased already.",),
        status_code=404,
        link=(core.landing_path(_role(session.principal)), "Back"),
    )


async def _refuse(request: Request, session: Session, exc: Exception) -> Response:
    """NotFound (or an id that is not one) → 404, Forbidden → 403, Conflict → 409; JSON for
    fetch, else a page."""
    if isinstance(exc, Conflict):
        message = "Someone else decided this already. Reload the page to see the queue as it is now."
        if _wants_json(request):
            return _json(409, error=message)
        return await _message(request, session, title="Already decided", lines=(message,), status_code=409)
    if isinstance(exc, Forbidden):
        return (
            _json(403, error="Not allowed.") if _wants_json(request) else await _forbidden(request, session)
        )
    if _wants_json(request):
        return _json(404, error="Not found: it may have been decided or erased already. Reload the page.")
    return await _not_found(request, session)


async def _edit_refused(
    request: Request, session: Session, exc: BadInput, *, title: str, action: str, value: str, back: str
) -> Response:
    """A refused edit: the error next to the field (JSON for scripts, else the form again, holding
    what was sent as admitted: a refused secret is not painted back into the page)."""
    if _wants_json(request):
        return _json(422, error=str(exc), field="value")
    return await _page(
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


def _parse_id(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _id_or_not_found(text: str) -> uuid.UUID:
    """The id a path names; `NotFound` when it names none."""
    parsed = _parse_id(text)
    if parsed is None:
        raise NotFound(text)
    return parsed


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def _json(status_code: int, **body: Any) -> JSONResponse:
    return JSONResponse(body, status_code=status_code)


def _redirect(path: str, **params: str) -> RedirectResponse:
    query = urlencode({k: v for k, v in params.items() if v})
    return RedirectResponse(f"{path}?{query}" if query else path, status_code=303)


def _back(form: Mapping[str, Any]) -> str:
    """The queue's query string to return to (re-parsed, so only known filters survive)."""
    raw = str(form.get("back") or "")
    filters, _ = core.parse_review_filters(dict(_pairs(raw)))
    return filters.query(cursor=filters.cursor)


def _pairs(query: str) -> list[tuple[str, str]]:
    from urllib.parse import parse_qsl

    return parse_qsl(query, keep_blank_values=False)[:20]


@dataclass(frozen=True, slots=True)
class _Posted:
    """A POSTed form after the session and CSRF checks (or the response refusing it)."""

    session: Session | None
    form: dict[str, Any]
    refusal: Response | None


async def _posted(request: Request) -> _Posted:
    """Read a form; refuse it without a valid session (401) or without its CSRF token (403)."""
    form_data = await request.form()
    form: dict[str, Any] = {}
    for key, value in form_data.multi_items():
        if isinstance(value, str):
            form.setdefault(key, []).append(value)
    flat = {k: (v if k == "ids" else v[-1]) for k, v in form.items()}
    session = await _session(request)
    if session is None:
        if _wants_json(request):
            return _Posted(None, flat, _json(401, error="You are not signed in."))
        return _Posted(None, flat, await _signed_out(request, expired=True))
    if not api_auth.csrf_ok(session.token, flat.get(core.CSRF_FIELD), _state(request).auth):
        message = "This form has expired or did not come from this site. Reload the page and try again."
        if _wants_json(request):
            return _Posted(session, flat, _json(403, error=message))
        response = await _message(request, session, title="Form refused", lines=(message,), status_code=403)
        return _Posted(session, flat, response)
    return _Posted(session, flat, None)


async def _signed_form(request: Request) -> tuple[Session, dict[str, Any]] | Response:
    """A POSTed form with its session, or the response refusing it (see `_posted`)."""
    posted = await _posted(request)
    if posted.refusal is not None:
        return posted.refusal
    assert posted.session is not None
    return posted.session, posted.form


# --- sign-in -------------------------------------------------------------------------------------


@router.get("/login")
async def login(request: Request, token: str = "", next: str = "") -> Response:
    """`/ui/login?token=<sign-in token>`: exchange a single-use sign-in token for a session of the
    server's own (its cookie is a random value, never a JWT), then continue to the role's page.

    It answers a small page that continues by itself (meta refresh) instead of a redirect: the
    link arrives from the chat platform, another site, and a browser does not send a SameSite=Strict
    cookie on a redirect that a cross-site navigation started, so the person would land signed out."""
    state = _state(request)
    now = time.time()
    try:
        sign_in = api_auth.verify_sign_in_token(token, state.auth, now=now, max_life_s=state.sign_in_max_s)
    except Unauthorized as exc:
        return await _link_refused(request, str(exc))
    if not sign_in.principal.is_person:  # pragma: no cover - principal_from_claims makes people
        return await _link_refused(request, "not a person's token")
    session_token = api_auth.new_session_token()
    expires_at = now + state.ui_session_s
    opened = await state.store.open_ui_session(
        digest=api_auth.session_digest(session_token),
        sign_in_id=sign_in.token_id,
        sign_in_expires_at=sign_in.expires_at,
        session=UiSession(
            subject=sign_in.principal.subject or uuid.UUID(int=0),
            role=sign_in.principal.role,
            teams=tuple(sorted(sign_in.principal.teams)),
            expires_at=datetime.fromtimestamp(expires_at, UTC),
        ),
    )
    if not opened:
        return await _link_refused(request, "this sign-in link was used already; each link works once")
    cookie = core.session_cookie(session_token, expires_at=expires_at, now=now, scheme=request.url.scheme)
    if cookie is None:  # pragma: no cover - a session lasts at least a second
        return await _signed_out(request, expired=True)
    role = _role(sign_in.principal)
    destination = core.safe_next(next, role)
    response = await _message(
        request,
        None,
        title="Signed in",
        lines=(
            f"{await _signed_in_as(request, sign_in.principal)}.",
            "Taking you to your page…",
        ),
        status_code=200,
        link=(destination, "Continue"),
        refresh_to=destination,
    )
    response.set_cookie(
        core.SESSION_COOKIE,
        cookie.value,
        max_age=cookie.max_age,
        path=cookie.path,
        secure=cookie.secure,
        httponly=cookie.httponly,
        samesite=cookie.samesite,
    )
    return response


async def _link_refused(request: Request, reason: str) -> HTMLResponse:
    """401: the sign-in link does not work (expired, used, forged, or not a sign-in token)."""
    log.info("sign-in refused: %s", reason)
    return await _message(
        request,
        None,
        title="This sign-in link does not work",
        lines=(
            "It has expired, was used already, or is not valid.",
            "Open the memory page again from your chat platform to get a new link.",
        ),
        status_code=401,
    )


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the session on the server (its cookie opens nothing after this), then delete the cookie."""
    posted = await _posted(request)
    if posted.refusal is not None and posted.session is not None:
        return posted.refusal
    if posted.session is not None:
        await _state(request).store.end_ui_session(api_auth.session_digest(posted.session.token))
    response = await _message(
        request,
        None,
        title="Signed out",
        lines=("You are signed out. Open the memory page from your chat platform to sign in again.",),
        status_code=200,
    )
    response.delete_cookie(core.SESSION_COOKIE, path=core.COOKIE_PATH, httponly=True, samesite="strict")
    return response


@router.get("/signed-out")
async def signed_out(request: Request, expired: int = 0) -> Response:
    return await _signed_out(request, expired=bool(expired))


@router.get("/")
@router.get("")
async def home(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return await _signed_out(request)
    return RedirectResponse(core.landing_path(_role(session.principal)), status_code=303)


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in STATIC_FILES:
        return Response("not found", status_code=404, media_type="text/plain")
    response = FileResponse(STATIC / name, media_type=STATIC_FILES[name])
    response.headers["Cache-Control"] = "public, max-age=300"
    return response


# --- review queue ------------------------------------------------------------------------------


async def _waiting(request: Request, session: Session) -> int | None:
    try:
        return sum((await ops.waiting_counts(_store(request), session.principal)).values())
    except Forbidden:
        return None


@router.get("/review")
async def review(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return await _signed_out(request)
    raw = dict(request.query_params)
    filters, errors = core.parse_review_filters(raw)
    queue_error = QUEUE_ERRORS.get(raw.get("error", ""))
    if queue_error:
        errors["bulk"] = queue_error
    try:
        page: Page[ReviewItem] = await ops.review_page(
            _store(request),
            session.principal,
            team_id=filters.team_id,
            scope=filters.scope,
            persona_id=filters.persona_id,
            user_id=filters.user_id,
            min_confidence=filters.min_confidence,
            cursor=filters.cursor,
            limit=25,
        )
        waiting = await _waiting(request, session)
    except Forbidden:
        return await _forbidden(request, session)
    except BadInput as exc:
        errors["cursor" if "cursor" in str(exc) else "team_id"] = str(exc)
        page = Page(items=(), next_cursor=None)
        waiting = 0
    rows = [core.review_row(item) for item in core.field_of(page, "items", [])]
    teams = [str(t) for t in getattr(session.principal, "teams", ())]
    wanted = core.review_ids(rows)
    wanted["team"].update(teams)
    names = await _names(request, wanted)
    return await _page(
        request,
        session,
        "review.html",
        title="Review queue",
        notice=NOTICES.get(raw.get("notice", "")),
        rows=rows,
        next_cursor=core.field_of(page, "next_cursor"),
        filters=filters,
        errors=errors,
        raw=raw,
        back=filters.query(cursor=filters.cursor),
        waiting=waiting,
        team_choices=teams if _role(session.principal) == "team_admin" else [],
        scope_choices=core.SCOPE_CHOICES,
        names=names,
    )


async def _decide(request: Request, item_id: str, action: ops.Decision) -> Response:
    signed = await _signed_form(request)
    if isinstance(signed, Response):
        return signed
    session, form = signed
    back = _back(form)
    value = str(form.get("value") or "")
    forget = action == "reject" and form.get("forget") == "yes"
    try:
        if forget:
            rejection = await ops.reject_and_forget(
                _store(request), session.principal, _id_or_not_found(item_id)
            )
            decided = rejection.memory
        else:
            decided = await ops.decide(
                _store(request), session.principal, _id_or_not_found(item_id), action, value
            )
    except (NotFound, Forbidden, Conflict) as exc:
        return await _refuse(request, session, exc)
    except BadInput as exc:
        return await _edit_refused(
            request,
            session,
            exc,
            title="Edit before approving",
            action=f"/ui/review/{item_id}/edit",
            value=value,
            back=back,
        )
    notice = (
        "forgotten" if forget else {"approve": "approved", "reject": "rejected", "edit": "edited"}[action]
    )
    if _wants_json(request):
        return _json(200, message=NOTICES[notice], done=[item_id], value=decided.value)
    return RedirectResponse(f"/ui/review?{back}&notice={notice}".replace("?&", "?"), status_code=303)


@router.post("/review/{item_id}/approve")
async def approve(request: Request, item_id: str) -> Response:
    return await _decide(request, item_id, "approve")


@router.post("/review/{item_id}/reject")
async def reject(request: Request, item_id: str) -> Response:
    return await _decide(request, item_id, "reject")


@router.post("/review/{item_id}/edit")
async def edit(request: Request, item_id: str) -> Response:
    return await _decide(request, item_id, "edit")


@router.post("/review/bulk")
async def bulk(request: Request) -> Response:
    signed = await _signed_form(request)
    if isinstance(signed, Response):
        return signed
    session, form = signed
    back = _back(form)
    action = str(form.get("decision") or "")
    ids, _bad = core.parse_ids(form.get("ids") or [])
    if not ids or action not in ("approve", "reject"):
        message = QUEUE_ERRORS["none_selected"] if not ids else "Choose approve or reject."
        if _wants_json(request):
            return _json(422, error=message, field="bulk")
        return RedirectResponse(f"/ui/review?{back}&error=none_selected".replace("?&", "?"), status_code=303)
    try:
        decision: Literal["approve", "reject"] = "approve" if action == "approve" else "reject"
        results = await ops.bulk_decide(_store(request), session.principal, decision, ids)
    except Forbidden:
        return await _refuse(request, session, Forbidden("not allowed"))
    except BadInput as exc:
        if _wants_json(request):
            return _json(422, error=str(exc), field="bulk")
        return await _message(request, session, title="Not done", lines=(str(exc),), status_code=422)
    done = [str(r.id) for r in results if r.status == "done"]
    failed = [str(r.id) for r in results if r.status != "done"]
    verb = "Approved" if action == "approve" else "Rejected"
    message = f"{verb} {core.plural(len(done), 'item')}."
    if failed:
        message += f" {core.plural(len(failed), 'item')} could not be decided (already decided or not yours)."
    if _wants_json(request):
        return _json(200, message=message, done=done, failed=failed)
    return RedirectResponse(f"/ui/review?{back}&notice=bulk".replace("?&", "?"), status_code=303)


@router.get("/memories/{memory_id}")
async def memory_detail(request: Request, memory_id: str) -> Response:
    session = await _session(request)
    if session is None:
        return await _signed_out(request)
    try:
        detail = await ops.memory_detail(_store(request), session.principal, _id_or_not_found(memory_id))
    except (NotFound, Forbidden, Conflict) as exc:
        return await _refuse(request, session, exc)
    memory = detail.memory
    history = [
        {
            "when": core.show_time(entry.at),
            "action": core.AUDIT_ACTIONS.get(entry.action, entry.action),
            "actor": entry.actor,
            "old_value": entry.old_value,
            "new_value": entry.new_value,
        }
        for entry in detail.history
    ]
    view = {
        "id": str(memory.id),
        "key": memory.key,
        "value": memory.value,
        "status": memory.status,
        "scope": memory.scope,
        "confidence": core.show_confidence(memory.confidence),
        "created": core.show_time(memory.created_at),
        "updated": core.show_time(memory.updated_at),
        "channel_id": memory.source_channel_id,
        "owner_id": memory.owner_id,
        "user_id": memory.user_id,
        "team_id": memory.team_id,
        "pinned": memory.pinned,
        **core.said_fields(memory),
    }
    names = await _names(
        request,
        {
            "team": [memory.team_id] if memory.team_id else [],
            "user": [memory.user_id or memory.owner_id] if memory.scope != "persona" else [],
            "persona": [memory.owner_id] if memory.scope != "user" else [],
        },
    )
    proposal = detail.pending_revision
    decide_id = (
        proposal.id if proposal is not None else (memory.id if memory.status == "pending_review" else None)
    )
    return await _page(
        request,
        session,
        "memory.html",
        title=f"Memory “{view['key']}”",
        notice=NOTICES.get(request.query_params.get("notice", "")),
        memory=view,
        names=names,
        history=history,
        proposal=proposal
        and {
            "old_value": proposal.old_value,
            "new_value": proposal.new_value,
            "confidence": core.show_confidence(proposal.confidence),
            "created": core.show_time(proposal.created_at),
            **core.said_fields(proposal),
        },
        decide_id=decide_id,
    )


@router.post("/memories/{memory_id}/pin")
async def pin(request: Request, memory_id: str) -> Response:
    """A reviewer pins (`pinned=yes`) or unpins a memory; back to the queue, or to the memory's page
    when the form came from there (`from=memory`)."""
    signed = await _signed_form(request)
    if isinstance(signed, Response):
        return signed
    session, form = signed
    pinned = form.get("pinned") == "yes"
    try:
        memory = _id_or_not_found(memory_id)
        changed = await ops.set_pinned(_store(request), session.principal, memory, pinned)
    except (NotFound, Forbidden, Conflict) as exc:
        return await _refuse(request, session, exc)
    notice = "pinned" if pinned else "unpinned"
    if _wants_json(request):
        return _json(200, message=NOTICES[notice], pinned=changed.pinned)
    if form.get("from") == "memory":
        return _redirect(f"/ui/memories/{changed.id}", notice=notice)
    return RedirectResponse(f"/ui/review?{_back(form)}&notice={notice}".replace("?&", "?"), status_code=303)


# --- my memories -------------------------------------------------------------------------------


async def _my_page(
    request: Request, session: Session, *, errors: dict[str, str], notice: str | None
) -> Response:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(MY_PAGES):
        page = await ops.my_memories(_store(request), session.principal, limit=200, cursor=cursor)
        items.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    remembered = await ops.my_conversations(_store(request), session.principal, limit=MY_CONVERSATIONS)
    personas = {str(item.owner_id) for item in items if item.scope == "persona_user"}
    for conversation in remembered.items:
        personas.update(str(p) for p in core.field_of(conversation, "persona_ids", ()) or () if p is not None)
    names = await _names(request, {"persona": personas})
    groups = core.group_my_memories(items, names)
    total = sum(len(g.cards) for g in groups)
    conversations = [core.conversation_row(c, names) for c in remembered.items]
    return await _page(
        request,
        session,
        "me.html",
        title="My memories",
        notice=notice,
        groups=groups,
        total=total,
        conversations=conversations,
        more_conversations=remembered.next_cursor is not None,
        errors=errors,
        status_code=422 if errors else 200,
    )


@router.get("/me")
async def me(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return await _signed_out(request)
    notice = NOTICES.get(request.query_params.get("notice", ""))
    return await _my_page(request, session, errors={}, notice=notice)


@router.post("/me/memories/{memory_id}/edit")
async def me_edit(request: Request, memory_id: str) -> Response:
    signed = await _signed_form(request)
    if isinstance(signed, Response):
        return signed
    session, form = signed
    value = str(form.get("value") or "")
    try:
        edited = await ops.edit_mine(_store(request), session.principal, _id_or_not_found(memory_id), value)
    except (NotFound, Forbidden, Conflict) as exc:
        return await _refuse(request, session, exc)
    except BadInput as exc:
        return await _edit_refused(
            request,
            session,
            exc,
            title="Correct a memory",
            action=f"/ui/me/memories/{memory_id}/edit",
            value=value,
            back="",
        )
    if _wants_json(request):
        message = "Saved. Assistants use the corrected value from now on."
        return _json(200, message=message, value=edited.value)
    return _redirect("/ui/me", notice="saved")


@router.post("/me/memories/{memory_id}/pin")
async def me_pin(request: Request, memory_id: str) -> Response:
    """The person pins (`pinned=yes`) or unpins one of their own memories."""
    signed = await _signed_form(request)
    if isinstance(signed, Response):
        return signed
    session, form = signed
    pinned = form.get("pinned") == "yes"
    try:
        changed = await ops.edit_mine(
            _store(request), session.principal, _id_or_not_found(memory_id), None, pinned=pinned
        )
    except (NotFound, Forbidden, Conflict) as exc:
        return await _refuse(request, session, exc)
    notice = "pinned" if pinned else "unpinned"
    if _wants_json(request):
        return _json(200, message=NOTICES[notice], pinned=changed.pinned)
    return _redirect("/ui/me", notice=notice)


async def _erase_mine(
    request: Request,
    raw_id: str,
    erase: Callable[[Any, Any, uuid.UUID], Awaitable[object]],
    *,
    message: str,
    notice: str,
) -> Response:
    """Erase one of the signed-in person's own things (`erase(store, principal, id)`)."""
    signed = await _signed_form(request)
    if isinstance(signed, Response):
        return signed
    session, _ = signed
    try:
        await erase(_store(request), session.principal, _id_or_not_found(raw_id))
    except (NotFound, Forbidden, Conflict) as exc:
        return await _refuse(request, session, exc)
    if _wants_json(request):
        return _json(200, message=message)
    return _redirect("/ui/me", notice=notice)


async def _erase_all_mine(
    request: Request, confirm: str, erase: Callable[[Any, Any], Awaitable[object]], *, notice: str
) -> Response:
    """Erase all of the signed-in person's memories or conversations, once the `confirm` box is ticked."""
    signed = await _signed_form(request)
    if isinstance(signed, Response):
        return signed
    session, form = signed
    if form.get(confirm) != "yes":
        errors = {confirm: "Tick this box to confirm; nothing was deleted."}
        return await _my_page(request, session, errors=errors, notice=None)
    await erase(_store(request), session.principal)
    return _redirect("/ui/me", notice=notice)


@router.post("/me/memories/{memory_id}/reject")
async def me_reject(request: Request, memory_id: str) -> Response:
    """Reject one of the person's own memories; with `forget=yes`, and erase what they said there."""
    signed = await _signed_form(request)
    if isinstance(signed, Response):
        return signed
    session, form = signed
    forget = form.get("forget") == "yes"
    try:
        await ops.reject_mine(_store(request), session.principal, _id_or_not_found(memory_id), forget=forget)
    except (NotFound, Forbidden, Conflict) as exc:
        return await _refuse(request, session, exc)
    notice = "forgotten_mine" if forget else "rejected"
    if _wants_json(request):
        return _json(200, message=NOTICES[notice])
    return _redirect("/ui/me", notice=notice)


@router.post("/me/memories/{memory_id}/delete")
async def me_delete(request: Request, memory_id: str) -> Response:
    message = "Deleted. It is erased, not just hidden."
    return await _erase_mine(request, memory_id, ops.erase_mine, message=message, notice="deleted")


@router.post("/me/delete-all")
async def me_delete_all(request: Request) -> Response:
    return await _erase_all_mine(request, "confirm", ops.erase_all_mine, notice="deleted_all")


@router.post("/me/conversations/{channel_id}/delete")
async def me_delete_conversation(request: Request, channel_id: str) -> Response:
    message = NOTICES["conversation_deleted"]
    return await _erase_mine(
        request, channel_id, ops.erase_my_conversation, message=message, notice="conversation_deleted"
    )


@router.post("/me/conversations/delete-all")
async def me_delete_conversations(request: Request) -> Response:
    return await _erase_all_mine(
        request, "confirm_conversations", ops.erase_my_conversations, notice="conversations_deleted"
    )


@router.get("/me/export")
async def me_export(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return await _signed_out(request)
    data = export_json(await ops.export_mine(_store(request), session.principal))
    body = json.dumps(data, indent=2, ensure_ascii=False)
    return Response(
        body,
        media_type="application/json",
        headers={"Content-Disposition": 'attachment; filename="my-memories.json"'},
    )


# --- settings ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Level:
    href: str
    label: str
    current: bool


def _levels(principal: Any, path: str, names: core.Names = core.NO_NAMES) -> list[_Level]:
    links: list[tuple[str, str]] = []
    if _role(principal) == "admin":
        links.append(("/ui/settings/global", "Global"))
    for team in getattr(principal, "teams", ()):
        links.append(
            (f"/ui/settings/teams/{team}", names.name("team", team) or f"Team {core.short_id(team)}")
        )
    return [_Level(href, label, href == path) for href, label in links]


@router.get("/settings")
async def settings_home(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return await _signed_out(request)
    levels = _levels(session.principal, "")
    if _role(session.principal) not in core.REVIEWERS or not levels:
        return await _forbidden(request, session)
    return RedirectResponse(levels[0].href, status_code=303)


@router.get("/settings/open")
async def settings_open(request: Request, level: str = "persona", target_id: str = "") -> Response:
    """The "open another level" form: to the team's or persona's settings page."""
    session = await _session(request)
    if session is None:
        return await _signed_out(request)
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
    if level is None and _role(session.principal) not in core.REVIEWERS:
        return await _forbidden(request, session)
    if level is not None:
        try:
            current = await ops.settings_view(_store(request), session.principal, level, target)
        except (Forbidden, NotFound) as exc:
            return await _refuse(request, session, exc)
    teams = list(getattr(session.principal, "teams", ()))
    names = await _names(
        request,
        {
            "team": [*teams, target] if level == "team" else teams,
            "persona": [target] if level == "persona" else [],
        },
    )
    if level is not None:
        view = _settings_form(session.principal, level, target, current, form, names)
    store = _store(request)
    if _role(session.principal) == "admin":
        team_picks = [(str(e.id), e.name) for e in await store.directory("team")]
    else:
        team_picks = [(str(t), names.label("team", t)) for t in teams]
    persona_picks = [(str(e.id), e.name) for e in await store.directory("persona")]
    status_code = 422 if errors or open_error else 200
    return await _page(
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


def _may_change(principal: Any, level: SettingsLevel, target: uuid.UUID | None) -> bool:
    """Whether to offer the form at all (the rule is `api.access`'s; the server checks it again)."""
    try:
        access.check_settings_access(principal, level, target, write=True)
    except Forbidden:
        return False
    return True


def _settings_form(
    principal: Any,
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
    if kind == "global":
        return "global", None
    return ("team" if kind == "teams" else "persona"), uuid.UUID(target_id)


@router.get("/settings/{kind}")
@router.get("/settings/{kind}/{target_id}")
async def settings_level(request: Request, kind: str, target_id: str = "") -> Response:
    session = await _session(request)
    if session is None:
        return await _signed_out(request)
    if kind not in ("global", "teams", "personas") or (kind == "global") != (target_id == ""):
        return await _not_found(request, session)
    try:
        level, target = _level_of(kind, target_id)
    except ValueError:
        return await _not_found(request, session)
    notice = NOTICES.get(request.query_params.get("notice", ""))
    return await _settings_page(request, session, level, target, errors={}, notice=notice)


@router.post("/settings/{kind}")
@router.post("/settings/{kind}/{target_id}")
async def settings_save(request: Request, kind: str, target_id: str = "") -> Response:
    signed = await _signed_form(request)
    if isinstance(signed, Response):
        return signed
    session, form = signed
    if kind not in ("global", "teams", "personas") or (kind == "global") != (target_id == ""):
        return await _not_found(request, session)
    try:
        level, target = _level_of(kind, target_id)
    except ValueError:
        return await _not_found(request, session)
    values, errors = core.parse_settings_form(form)
    saved = None
    if not errors:
        try:
            saved = await ops.put_settings(
                _store(request),
                session.principal,
                level,
                target,
                SettingsRow(level=level, target_id=target, **values),
                max_input_tokens=_state(request).max_input_tokens,
                settings_cache=_state(request).settings_cache,
            )
        except (Forbidden, NotFound) as exc:
            return await _refuse(request, session, exc)
        except BadInput as exc:
            errors[core.field_named(exc.message)] = exc.message
    if errors:
        if _wants_json(request):
            name, message = next(iter(errors.items()))
            return _json(422, error=message, field=name)
        return await _settings_page(request, session, level, target, errors=errors, form=form)
    if _wants_json(request) and saved is not None:
        view = _settings_form(session.principal, level, target, saved, None)
        inherit = {
            row["field"].name: {"value": row["effect"].value, "source": row["effect"].source}
            for row in view["rows"]
        }
        return _json(200, message="Saved.", inherit=inherit)
    return _redirect(request.url.path, notice="saved")
