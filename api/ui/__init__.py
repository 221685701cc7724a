"""The web UI under `/ui/`: server-rendered pages (templates in `api/templates/`, static files in
`api/static/`), a session of the server's own from `/ui/login?token=<sign-in token>`, CSRF tokens
on every form.

One module per page: `session` (sign-in, sign-out, home, static files), `review` (the queue and a
memory's detail), `me` (a person's own memories), `settings`; `common` holds what they share (the
session, rendering, form parsing) and `core` the pure decisions (cookies, CSRF, parsing, view
models). Who may do what is decided by `api/operations.py` (the same functions the JSON API
calls), never here; the UI only hides what a role cannot use.
"""

from __future__ import annotations

from fastapi import APIRouter

from api.ui import me, review, session, settings

router = APIRouter()
for page in (session, review, me, settings):
    router.include_router(page.router)
