"""Errors the API answers with: each maps to one HTTP status and a JSON body `{"error": "…"}`."""

from __future__ import annotations

# the answer to a write Postgres refused at the team boundary (row-level security): a request
# reached past the teams its credential and context allow
TEAM_BOUNDARY_REFUSED = (
    "refused at the team boundary: this request may only touch the rows of the teams its credential "
    "and context allow (the database's row-level security refused the write)"
)


class ApiError(Exception):
    """An error with the HTTP status it answers with; the message is shown to the caller."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthorized(ApiError):
    """No credential, or one that is expired, forged or revoked."""

    status = 401


class Forbidden(ApiError):
    """The caller is known but their role lacks this right."""

    status = 403


class NotFound(ApiError):
    """No such thing, or one the caller may not see (the same answer, so nothing leaks)."""

    status = 404


class Conflict(ApiError):
    """The item changed state (e.g. already decided)."""

    status = 409


class BadInput(ApiError):
    """A request that can never succeed as sent; the message names the field."""

    status = 422
