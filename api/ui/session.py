"""The web UI's session pages: sign-in from a link (`/ui/login?token=…`), sign-out, the home page
that sends each role where it works, and the static files."""

from __future__ import annotations

import dataclasses
import time
import uuid
from datetime import UTC, datetime

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

from api import auth as api_auth
from api.errors import Unauthorized
from api.ui import core
from api.ui.common import (
    HERE,
    SecureRoute,
    app_state_of,
    log,
    message_page,
    read_posted,
    require_session,
    role_of,
    signed_in_label,
    signed_out_page,
)
from store.model import UiSession

STATIC = HERE / "static"
STATIC_FILES = {
    "ui.css": "text/css; charset=utf-8",
    "ui.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}

router = APIRouter(prefix="/ui", route_class=SecureRoute, include_in_schema=False)


@router.get("/login")
async def login(request: Request, token: str = "", next: str = "") -> Response:
    """`/ui/login?token=<sign-in token>`: exchange a single-use sign-in token for a session of the
    server's own (its cookie is a random value, never a JWT), then continue to the role's page.

    It answers a small page that continues by itself (meta refresh) instead of a redirect: the
    link arrives from the chat platform, another site, and a browser does not send a SameSite=Strict
    cookie on a redirect that a cross-site navigation started, so the person would land signed out."""
    state = app_state_of(request)
    now = time.time()
    try:
        sign_in = api_auth.verify_sign_in_token(token, state.auth, now=now, max_life_s=state.sign_in_max_s)
    except Unauthorized as exc:
        return await _link_refused(request, str(exc))
    if not sign_in.principal.is_person:  # pragma: no cover - principal_from_claims makes people
        return await _link_refused(request, "not a person's token")
    session_token = api_auth.new_session_token()
    expires_at = now + state.ui_session_s
    opened = await state.store.ui_sessions.open_ui_session(
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
        return await signed_out_page(request, expired=True)
    role = role_of(sign_in.principal)
    destination = core.safe_next(next, role)
    response = await message_page(
        request,
        None,
        title="Signed in",
        lines=(
            f"{await signed_in_label(request, sign_in.principal)}.",
            "Taking you to your page…",
        ),
        status_code=200,
        link=(destination, "Continue"),
        refresh_to=destination,
    )
    response.set_cookie(core.SESSION_COOKIE, **dataclasses.asdict(cookie))
    return response


async def _link_refused(request: Request, reason: str) -> HTMLResponse:
    """401: the sign-in link does not work (expired, used, forged, or not a sign-in token)."""
    log.info("sign-in refused: %s", reason)
    return await message_page(
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
    posted = await read_posted(request)
    if posted.refusal is not None and posted.session is not None:
        return posted.refusal
    if posted.session is not None:
        await app_state_of(request).store.ui_sessions.end_ui_session(
            api_auth.session_digest(posted.session.token)
        )
    response = await message_page(
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
    return await signed_out_page(request, expired=bool(expired))


@router.get("/")
@router.get("")
async def home(request: Request) -> Response:
    session = await require_session(request)
    return RedirectResponse(core.landing_path(role_of(session.principal)), status_code=303)


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in STATIC_FILES:
        return Response("not found", status_code=404, media_type="text/plain")
    response = FileResponse(STATIC / name, media_type=STATIC_FILES[name])
    response.headers["Cache-Control"] = "public, max-age=300"
    return response


# --- review queue ------------------------------------------------------------------------------
