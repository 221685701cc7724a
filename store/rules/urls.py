"""Database URLs as users write them (`postgresql://…`, `postgres://…`, `sqlite:///path`) turned into
the SQLAlchemy URLs the stores use (psycopg 3 for Postgres, aiosqlite/pysqlite for SQLite). Pure."""

from __future__ import annotations

from typing import Literal

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

Backend = Literal["postgresql", "sqlite"]

_POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
_SQLITE_SCHEMES = ("sqlite", "sqlite+aiosqlite", "sqlite+pysqlite")


class DatabaseUrlError(ValueError):
    """The database URL cannot be used; the message says what is wrong and what to write instead."""


def _scheme(url: str) -> str:
    if "://" not in url:
        raise DatabaseUrlError(
            f"not a database URL: {_redact(url)!r}. Write postgresql://USER:PASSWORD@HOST:PORT/DB "
            "(or postgresql://USER@/DB?host=/socket/dir, or sqlite:///path/to/file.db)"
        )
    return url.split("://", 1)[0].lower()


def _redact(url: str) -> str:
    # never echo a password back into logs or error messages
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in credentials else url


def redacted_url(url: str) -> str:
    """`url` with its password replaced by `***` (for logs and error messages)."""
    return _redact(url)


def backend_of(url: str) -> Backend:
    """Which store a URL selects: `postgresql` or `sqlite`; raise `DatabaseUrlError` for anything else."""
    scheme = _scheme(url)
    if scheme in _POSTGRES_SCHEMES:
        return "postgresql"
    if scheme in _SQLITE_SCHEMES:
        return "sqlite"
    raise DatabaseUrlError(
        f"unsupported database URL scheme {scheme!r} in {_redact(url)!r}: use postgresql://… "
        "(Postgres with pgvector, driven by psycopg 3) or sqlite:///path (SQLite fallback)"
    )


def _parse(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError as exc:
        raise DatabaseUrlError(f"malformed database URL {_redact(url)!r}: {exc}") from exc


def to_sqlalchemy_url(url: str, *, asynchronous: bool = True) -> URL:
    """The SQLAlchemy URL for a user's URL: `postgresql+psycopg://…` or `sqlite+aiosqlite:///…`.

    `asynchronous=False` gives the blocking driver (pysqlite) for SQLite; psycopg serves both."""
    backend = backend_of(url)
    if backend == "postgresql":
        # make_url keeps `?host=/socket/dir` and an empty password (`postgres:@`) as psycopg expects
        parsed = _parse("postgresql" + url[url.index("://") :])
        return parsed.set(drivername="postgresql+psycopg")
    parsed = _parse("sqlite" + url[url.index("://") :])
    if parsed.database in (None, ""):
        raise DatabaseUrlError(
            f"SQLite URL {url!r} names no file: write sqlite:///relative/path.db or sqlite:////abs/path.db "
            "(or sqlite:///:memory: for a throwaway database)"
        )
    return parsed.set(drivername="sqlite+aiosqlite" if asynchronous else "sqlite+pysqlite")
