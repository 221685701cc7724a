"""The web-UI half of `pmem demo`: persona learning offline, a proposed change, and the UI served
until Ctrl-C with sign-in links for an admin, a team admin and a user.

Persona scope offline: the rules extractor reads only the user's first-person statements, so it
never writes `persona` memories. `ScriptedPersonaLearner` is a scripted stand-in for an LLM (stated
as such wherever the demo prints it): for a conversation whose persona has persona learning on, it
adds the persona facts of `worker/samples/persona_script.json` whose phrase occurs in an assistant
message, through the same validation and secret screening as any LLM output.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shlex
import socket
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from extraction.redact import screen_candidate
from extraction.types import Candidate, ExtractionRequest, ExtractionResult
from extraction.typing import Extractor
from extraction.validate import merge_candidates, validate_items
from worker.commands.errors import UsageError

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SCRIPT = SAMPLES / "persona_script.json"
FOLLOWUPS = SAMPLES / "followups.jsonl"
# how long the printed sign-in links (single use) and the sessions they open last
DEMO_LINK_S = 12 * 3600


@dataclass(frozen=True, slots=True)
class UiPort:
    """Where the demo serves the UI: `chosen` (--port) is used or refused; the default (PMEM_API_PORT
    or 8080) gives way to a free port when another process has it."""

    port: int
    chosen: bool = False


@dataclass(frozen=True, slots=True)
class ScriptedFact:
    when: str
    key: str
    value: str
    confidence: float


def load_script(path: Path = SCRIPT) -> tuple[ScriptedFact, ...]:
    facts = json.loads(path.read_text(encoding="utf-8"))["facts"]
    return tuple(ScriptedFact(f["when"], f["key"], f["value"], float(f["confidence"])) for f in facts)


def persona_items(request: ExtractionRequest, script: tuple[ScriptedFact, ...]) -> list[dict[str, object]]:
    """The scripted persona-scope items for a conversation (none unless persona learning allows them)."""
    if "persona" not in request.allowed_scopes:
        return []
    said = " ".join(m.content.lower() for m in request.messages if m.role == "assistant")
    return [
        {"key": f.key, "value": f.value, "confidence": f.confidence, "scope": "persona"}
        for f in script
        if f.when.lower() in said
    ]


class ScriptedPersonaLearner:
    """An `Extractor`: the wrapped extractor's candidates plus the scripted persona facts."""

    def __init__(self, inner: Extractor, script: tuple[ScriptedFact, ...] | None = None) -> None:
        self.inner = inner
        self.script = load_script() if script is None else script

    async def extract(self, request: ExtractionRequest) -> ExtractionResult:
        result = await self.inner.extract(request)
        valid, rejected = validate_items(persona_items(request, self.script), request.allowed_scopes)
        added: list[Candidate] = []
        for candidate in merge_candidates(valid):
            screened = screen_candidate(candidate)
            if isinstance(screened, Candidate):
                added.append(screened)
        return replace(
            result,
            candidates=(*result.candidates, *added),
            rejected=(*result.rejected, *rejected),
        )

    async def close(self) -> None:
        await self.inner.close()


def learn_persona_offline(worker: Any) -> None:
    """Give an offline (rules) demo worker the scripted persona learner."""
    learner = ScriptedPersonaLearner(worker.extractor)
    worker.extractor = learner
    worker.handler.deps = replace(worker.handler.deps, extractor=learner)


async def publish_followups(store: Any, settings: Any, *, timeout_s: float) -> int:
    """Publish the follow-up conversations (Alice moved: a proposed change to a reviewed memory)
    and wait until they are processed; how many were processed."""
    from worker.commands.publish import publish_file

    events = [json.loads(line) for line in FOLLOWUPS.read_text().splitlines() if line.strip()]
    await publish_file(FOLLOWUPS, settings)
    waiting = {uuid.UUID(e["event_id"]) for e in events}
    started = time.monotonic()
    while waiting and time.monotonic() - started < timeout_s:
        waiting = {event_id for event_id in waiting if not await store.is_processed(event_id)}
        if waiting:
            await asyncio.sleep(0.25)
    return len(events) - len(waiting)


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _any_free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def sign_in_links(
    base: str, secret: str, catalogue: dict[str, Any], *, ttl_s: int
) -> list[tuple[str, str, str]]:
    """(who, link, about) for an admin, a team admin of the sample team and the sample user alice."""
    from api.auth import mint_jwt

    by_name = {name: uuid.UUID(key) for key, name in catalogue["names"].items()}
    team, alice = by_name["acme (team)"], by_name["alice"]
    admin = uuid.uuid5(uuid.NAMESPACE_URL, "pmem-demo/admin")
    team_admin = uuid.uuid5(uuid.NAMESPACE_URL, "pmem-demo/team-admin")
    people = (
        ("admin", admin, "admin", (), "every team"),
        ("team admin", team_admin, "team_admin", (team,), "team acme"),
        ("user", alice, "user", (team,), "alice: her own memories"),
    )
    links = []
    for who, subject, role, teams, about in people:
        token = mint_jwt(secret=secret, subject=subject, role=role, teams=teams, ttl_s=ttl_s, sign_in=True)
        links.append((who, f"{base}/ui/login?token={token}", about))
    return links


async def serve(
    store: Any,
    settings: Any,
    catalogue: dict[str, Any],
    ui: UiPort,
    *,
    host: str = "127.0.0.1",
) -> int:
    """Serve the control plane (API and web UI) over the demo's store until Ctrl-C; 0 when stopped
    that way. The JWT secret is made up for this run, so the printed links are the only way in and
    stop working with the demo. The last line printed is `ready`."""
    import uvicorn

    from api.app import create_app
    from api.auth import AuthConfig
    from worker.commands.serve import _Server

    port = ui.port
    if not _port_free(host, port):
        if ui.chosen:
            raise UsageError(f"port {port} is in use; pass --port with another port")
        port = _any_free_port(host)
        print(f"\nport {ui.port} is in use (PMEM_API_PORT); serving on {port} instead")
    secret = secrets.token_urlsafe(32)
    # the demo's links are printed once, so they may live as long as a demo session
    app = create_app(
        store=store,
        auth=AuthConfig(jwt_secret=secret),
        max_input_tokens=settings.llm_max_input_tokens,
        ui_session_s=DEMO_LINK_S,
        sign_in_max_s=DEMO_LINK_S,
    )

    # `pmem serve`'s server: Ctrl-C ends it gracefully and the demo then cleans up and exits 0
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn exposes a flag, not an event)
        await asyncio.sleep(0.05)
    if task.done():  # uvicorn could not start (it logged why)
        await task
        raise UsageError(f"the web UI could not start on {host}:{port}")
    base = f"http://{host}:{port}"
    print(
        f"\nweb UI on {base}/ui/ — open a link to sign in (each works once, within 12 hours; "
        "more with `pmem token --role … --login-url BASE` and the export line below); Ctrl-C stops the demo"
    )
    for who, link, about in sign_in_links(base, secret, catalogue, ttl_s=DEMO_LINK_S):
        print(f"  {who:<11} {link}")
        print(f"  {'':<11} ({about})")
    by_name = {name: key for key, name in catalogue["names"].items()}
    database, key = shlex.quote(settings.database_url), shlex.quote(secret)
    print(f"API at {base}/v1 (docs: /docs); to call it from another shell (README, Integrating a platform):")
    print(f"  export PMEM_DATABASE_URL={database} PMEM_AUTH_JWT_SECRET={key}")
    print(
        f"  a user with memories: alice {by_name['alice']}, team_id {by_name['acme (team)']}, "
        f"chef persona {by_name['chef (persona)']}"
    )
    print("ready", flush=True)
    await task
    print("\nstopped")
    return 0
