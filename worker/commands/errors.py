"""How store commands report database problems: one message and exit code per kind of failure."""

from __future__ import annotations

import sys
from collections.abc import Callable

from sqlalchemy.exc import OperationalError, ProgrammingError

from store.migrate import SchemaError
from store.urls import DatabaseUrlError


def run_reporting_database_errors(
    command: str, action: Callable[[], int], *, usage_errors: tuple[type[Exception], ...] = ()
) -> int:
    """Run `action`; a bad URL, a missing schema or an unreachable database prints what to fix.

    Exit codes: 2 for configuration/usage errors (and `usage_errors`), 1 for database failures."""
    configuration_errors: tuple[type[Exception], ...] = (DatabaseUrlError, SchemaError, *usage_errors)
    try:
        return action()
    except configuration_errors as exc:
        print(f"pmem {command}: {exc}", file=sys.stderr)
        return 2
    except ProgrammingError as exc:
        print(
            f"pmem {command}: {exc.orig}. Has the database been migrated? Run `pmem migrate`.",
            file=sys.stderr,
        )
        return 1
    except OperationalError as exc:
        print(
            f"pmem {command}: cannot reach the database ({exc.orig}); check PMEM_DATABASE_URL",
            file=sys.stderr,
        )
        return 1
