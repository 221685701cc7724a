"""Errors the store raises for its callers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Literal


class StoreError(RuntimeError):
    """A store operation failed for a reason the caller can fix; the message says how."""


class NothingPending(StoreError):
    """A review decision on a memory that has nothing waiting for review (already decided, or
    never queued)."""


class StoreUnavailable(RuntimeError):
    """The database cannot be reached right now (connection refused or lost, server shutting down,
    no free connection): not the caller's fault; wait and try again."""


class StoreConflict(RuntimeError):
    """A deadlock or serialisation failure that outlived the store's immediate retries."""


class StoreTimeout(RuntimeError):
    """A statement ran past the session's statement_timeout."""


class StoreIntegrityError(RuntimeError):
    """A constraint was violated: a bug in the caller or the store, never an outage."""


class TeamBoundaryViolation(RuntimeError):
    """Postgres refused a row outside the transaction's team scope (row-level security,
    `store.team_scope`): the work reached past the teams its caller may touch. Never an outage, never
    retried: the same statement is refused again."""


DbFailure = Literal["unavailable", "conflict", "timeout", "integrity", "team_boundary", "other"]

# SQLSTATE classes and codes (https://www.postgresql.org/docs/current/errcodes-appendix.html)
_CONFLICT_STATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected
_TIMEOUT_STATES = frozenset({"57014"})  # query_canceled (statement_timeout)
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03", "53300", "53400"})  # shutdown, too many
_INSUFFICIENT_PRIVILEGE = "42501"
# how Postgres words a row its row-level security refuses ("new row violates row-level security
# policy for table …"); a missing GRANT is the same SQLSTATE, worded "permission denied"
_ROW_LEVEL_SECURITY = "row-level security"


def db_failure(exc: BaseException) -> DbFailure:
    """What a database driver/SQLAlchemy error means for the caller (pure; see the classes above).
    Looks through SQLAlchemy's wrapper at the driver's error and its SQLSTATE."""
    import sqlalchemy.exc

    orig = exc.orig if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.orig is not None else exc
    state = getattr(orig, "sqlstate", None)
    if isinstance(state, str):
        if state in _CONFLICT_STATES:
            return "conflict"
        if state in _TIMEOUT_STATES:
            return "timeout"
        if state.startswith("23"):
            return "integrity"
        if state == _INSUFFICIENT_PRIVILEGE and _ROW_LEVEL_SECURITY in str(orig):
            return "team_boundary"
        if state.startswith("08") or state in _UNAVAILABLE_STATES:
            return "unavailable"
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated:
        return "unavailable"
    if isinstance(exc, sqlalchemy.exc.IntegrityError):
        return "integrity"
    if isinstance(exc, sqlalchemy.exc.TimeoutError):  # no free connection in the pool
        return "unavailable"
    if isinstance(exc, sqlalchemy.exc.InterfaceError | ConnectionError | OSError | TimeoutError):
        return "unavailable"
    if isinstance(exc, sqlalchemy.exc.OperationalError) and state is None:
        # no SQLSTATE: the driver could not talk to the server (connect failed, connection lost)
        return "unavailable"
    if type(orig).__module__.startswith("psycopg") and type(orig).__name__ in (
        "OperationalError",
        "InterfaceError",
    ):
        return "unavailable"
    return "other"


_RAISED: dict[DbFailure, type[Exception]] = {
    "unavailable": StoreUnavailable,
    "conflict": StoreConflict,
    "timeout": StoreTimeout,
    "integrity": StoreIntegrityError,
    "team_boundary": TeamBoundaryViolation,
}


def _first_line(exc: BaseException) -> str:
    import sqlalchemy.exc

    orig = exc.orig if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.orig is not None else exc
    lines = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {lines[0]}" if lines else type(orig).__name__


@contextlib.asynccontextmanager
async def translating_errors() -> AsyncIterator[None]:
    """Database errors leave the store as its own exceptions (one line, no SQL, no parameters);
    the driver's error stays reachable as `__cause__`. Other errors pass unchanged."""
    try:
        yield
    except (
        StoreUnavailable,
        StoreConflict,
        StoreTimeout,
        StoreIntegrityError,
        TeamBoundaryViolation,
        StoreError,
    ):
        raise
    except Exception as exc:
        kind = db_failure(exc)
        raised = _RAISED.get(kind)
        if raised is None:
            raise
        raise raised(_first_line(exc)) from exc
