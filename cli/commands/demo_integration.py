"""What `pmem demo --keep-running` gives an integrator: the ports it serves on (stable, refused when
taken), who is in the sample conversations, and the lines to paste into another shell — pure
functions — plus the demo's credentials, kept in its data directory so that pasted lines stay
valid when the demo is started again on the same directory."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.commands.errors import UsageError

if TYPE_CHECKING:
    from store.core.api_keys import ApiKeys

DEFAULT_NATS_PORT = 4222
DEFAULT_API_PORT = 8080
NATS_PORT_VARIABLE = "PMEM_DEMO_NATS_PORT"
API_PORT_VARIABLE = "PMEM_API_PORT"
CREDENTIALS_FILE = "credentials.json"
SERVICE_KEY_NAME = "pmem-demo"
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoPorts:
    """Where a running demo listens on loopback: nats-server and the API (with the web UI)."""

    nats: int
    api: int


def _port_from(raw: str, source: str) -> int:
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise UsageError(f"{source} is {raw!r}, not a port; give a number from 1 to 65535")
    return port


def demo_ports(*, nats_port: int | None, api_port: int | None, environ: Mapping[str, str]) -> DemoPorts:
    """The ports a kept-running demo uses: the flags, else the variables, else 4222 and 8080 (the
    defaults of PMEM_NATS_URL and PMEM_API_PORT, so `pmem` commands reach them unconfigured)."""
    nats = (
        _port_from(str(nats_port), "--nats-port")
        if nats_port is not None
        else _port_from(environ.get(NATS_PORT_VARIABLE, str(DEFAULT_NATS_PORT)), NATS_PORT_VARIABLE)
    )
    api = (
        _port_from(str(api_port), "--port")
        if api_port is not None
        else _port_from(environ.get(API_PORT_VARIABLE, str(DEFAULT_API_PORT)), API_PORT_VARIABLE)
    )
    if nats == api:
        raise UsageError(f"nats-server and the API cannot share port {nats}; pass --nats-port or --port")
    return DemoPorts(nats=nats, api=api)


def port_free(host: str, port: int) -> bool:
    """Whether a TCP server could listen on `host:port` right now."""
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def refuse_taken_ports(
    ports: DemoPorts, *, host: str = "127.0.0.1", is_free: Callable[[str, int], bool] = port_free
) -> None:
    """A `UsageError` naming the first port another process holds and how to choose another."""
    for port, what, flag, variable in (
        (ports.nats, "nats-server", "--nats-port", NATS_PORT_VARIABLE),
        (ports.api, "the API and web UI", "--port", API_PORT_VARIABLE),
    ):
        if not is_free(host, port):
            raise UsageError(
                f"port {port} ({what}) is in use on {host}; stop what listens there, or pass {flag} "
                f"(or set {variable}) with another port"
            )


@dataclass(frozen=True, slots=True)
class Cast:
    """The names the sample conversations give their teams, personas and users, by id (as text)."""

    teams: dict[str, str] = field(default_factory=dict)
    personas: dict[str, str] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)

    def name(self, value: Any) -> str:
        """The name of a team, persona or user id; the id itself when no conversation names it."""
        key = str(value)
        return self.users.get(key) or self.personas.get(key) or self.teams.get(key) or key


def cast_of(events: Iterable[Mapping[str, Any]]) -> Cast:
    """Every named team, persona and user in these `conversation.ended` events (the latest name)."""
    cast = Cast()
    for event in events:
        for table, id_field, name_field in (
            (cast.teams, "team_id", "team_name"),
            (cast.personas, "persona_id", "persona_name"),
            (cast.users, "user_id", "user_name"),
        ):
            if event.get(id_field) and event.get(name_field):
                table[str(event[id_field])] = str(event[name_field])
    return cast


def pmem_path(argv0: str, executable: str, which: Callable[[str], str | None] = shutil.which) -> str:
    """A command that runs `pmem` as printed from any directory: the script this process runs,
    else the `pmem` beside this Python, else the one on PATH, else this Python with `-m cli.main`."""
    script = Path(argv0)
    if script.name == "pmem" and script.is_file():
        return os.path.abspath(script)
    beside = Path(executable).parent / "pmem"
    if beside.is_file():
        return str(beside)
    return which("pmem") or f"{shlex.quote(executable)} -m cli.main"


def export_line(variables: Sequence[tuple[str, str]]) -> str:
    """One `export NAME=value …` line that a POSIX shell reads back as given."""
    return "export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in variables)


def parse_export_line(line: str) -> dict[str, str]:
    """The variables of a line `export_line` wrote (what a shell would set)."""
    words = shlex.split(line)
    if not words or words[0] != "export":
        raise ValueError(f"not an export line: {line!r}")
    return dict(word.split("=", 1) for word in words[1:])


@dataclass(frozen=True, slots=True, kw_only=True)
class Reviewer:
    """A person the demo prints a sign-in link for."""

    role: str
    id: uuid.UUID
    name: str
    about: str


def reviewers_of(catalogue: Mapping[str, Any]) -> tuple[Reviewer, ...]:
    """The admin and team admin of `cli/samples/names.json`."""
    return tuple(
        Reviewer(role=r["role"], id=uuid.UUID(r["id"]), name=r["name"], about=r["about"])
        for r in catalogue["reviewers"]
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Integration:
    """Everything `integration_text` prints about a running demo."""

    base_url: str
    nats_url: str
    database_url: str
    embedding: Sequence[tuple[str, str]]  # PMEM_EMBEDDING_* variables the demo's database needs
    jwt_secret: str
    api_key: str
    cast: Cast
    user_id: str
    persona_id: str
    team_id: str
    pmem: str
    python: str
    sign_in: Sequence[tuple[str, str, str]] = ()  # (who, link, about)
    examples: Path | None = None
    with_ui: bool = True


def integration_env(i: Integration) -> list[list[tuple[str, str]]]:
    """The variables to export, in lines: the API, the services, the conversation's context."""
    return [
        [("PMEM_URL", i.base_url), ("PMEM_API_KEY", i.api_key)],
        [
            ("PMEM_NATS_URL", i.nats_url),
            ("PMEM_DATABASE_URL", i.database_url),
            *i.embedding,
            ("PMEM_AUTH_JWT_SECRET", i.jwt_secret),
        ],
        [("PMEM_USER_ID", i.user_id), ("PMEM_PERSONA_ID", i.persona_id), ("PMEM_TEAM_ID", i.team_id)],
    ]


def integration_text(i: Integration) -> list[str]:
    """What a kept-running demo prints: where each service is, how to sign in, the key and secret,
    who is who, the export lines, and commands that work as pasted after them."""
    lines = [
        "",
        "services stay up until Ctrl-C (or SIGTERM):",
        f"  nats-server  {i.nats_url}",
        f"  postgres     {i.database_url}",
        "               (a unix socket in the data directory, no TCP port: the same URL every run)",
        f"  API          {i.base_url}/v1 (OpenAPI {i.base_url}/docs, MCP {i.base_url}/mcp)",
    ]
    if i.with_ui:
        lines.append(f"  web UI       {i.base_url}/ui/ — sign in with a link (each works once, within 12 h):")
        for who, link, about in i.sign_in:
            lines.append(f"    {who:<22} {link}")
            lines.append(f"    {'':<22} ({about})")
    else:
        lines.append("  web UI       off (--no-ui)")
    lines += [
        f"  service key  {i.api_key} (named {SERVICE_KEY_NAME}; `Authorization: Bearer <key>`)",
        f"  JWT secret   {i.jwt_secret} (HS256: mint people's tokens with `pmem token`)",
        "",
        "who is who in the sample conversations:",
    ]
    for kind, table in (("team", i.cast.teams), ("persona", i.cast.personas), ("user", i.cast.users)):
        for item_id, name in table.items():
            lines.append(f"  {kind:<8} {item_id}  {name}")
    user, persona, team = (i.cast.name(x) for x in (i.user_id, i.persona_id, i.team_id))
    lines += [
        "",
        f"paste into another shell (the context: {user}, talking with {persona}, in {team}):",
        *(f"  {export_line(variables)}" for variables in integration_env(i)),
        "then, for example:",
        f'  {i.pmem} recall --user-id "$PMEM_USER_ID" --persona-id "$PMEM_PERSONA_ID" '
        f'--team-id "$PMEM_TEAM_ID" "what should I cook tonight"',
        f"  {i.pmem} review list",
    ]
    if i.examples is not None:
        python, examples = shlex.quote(i.python), i.examples
        lines += [
            f"  {python} {shlex.quote(str(examples / 'publish_event.py'))}",
            f"  {python} {shlex.quote(str(examples / 'http_tools.py'))}",
            f"  sh {shlex.quote(str(examples / 'http_tools.sh'))}",
            f"  {python} {shlex.quote(str(examples / 'mcp_client.py'))} 'what do I like to eat'",
        ]
    return lines


@dataclass(frozen=True, slots=True, kw_only=True)
class Credentials:
    """The demo's JWT secret and service key, kept in its data directory between runs."""

    jwt_secret: str
    api_key: str


def read_credentials(data_dir: Path) -> Credentials | None:
    """The credentials an earlier demo kept in `data_dir`; None when there are none (or unreadable)."""
    try:
        raw = json.loads((data_dir / CREDENTIALS_FILE).read_text(encoding="utf-8"))
        return Credentials(jwt_secret=str(raw["jwt_secret"]), api_key=str(raw["api_key"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_credentials(data_dir: Path, credentials: Credentials) -> None:
    """Keep the credentials in `data_dir`, readable by this user only."""
    path = data_dir / CREDENTIALS_FILE
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump({"jwt_secret": credentials.jwt_secret, "api_key": credentials.api_key}, handle)
    path.chmod(0o600)


async def demo_credentials(keys: ApiKeys, data_dir: Path) -> Credentials:
    """The kept credentials while their key is still active in the store's `keys`; else a new
    secret and a new service key (the old key of that name revoked), kept for the next run."""
    import secrets

    kept = read_credentials(data_dir)
    if kept is not None and await keys.verify_api_key(kept.api_key) is not None:
        return kept
    await keys.revoke_api_key(SERVICE_KEY_NAME)
    _, key = await keys.create_api_key(SERVICE_KEY_NAME)
    fresh = Credentials(jwt_secret=kept.jwt_secret if kept else secrets.token_urlsafe(32), api_key=key)
    write_credentials(data_dir, fresh)
    return fresh


def extracted_line(data: bytes, cast: Cast) -> str:
    """What a kept-running demo prints for one `memory.extracted`: the event, who it was about,
    and each memory it wrote (`scope key action`)."""
    from worker.events import MemoryExtracted

    try:
        done = MemoryExtracted.model_validate_json(data)
    except ValueError:
        return "event processed (an unreadable memory.extracted)"
    about = cast.name(done.user_id) + (f" with {cast.name(done.persona_id)}" if done.persona_id else "")
    written = ", ".join(f"{m.scope} {m.key} ({m.action})" for m in done.memories) or "nothing new"
    return f"event {done.event_id} processed ({about}): {written}"


def dead_letter_line(data: bytes) -> str:
    """What a kept-running demo prints for one dead letter: the event and why (`pmem dlq` shows more)."""
    from worker.dlq import parse_entry

    entry = parse_entry(0, data, None)
    return f"event {entry.event_ref} dead-lettered ({entry.kind}): {' '.join(entry.reason.split())}"
