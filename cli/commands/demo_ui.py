"""The serving half of `pmem demo --keep-running`: persona learning offline, a proposed change, and
the API and web UI served until Ctrl-C with sign-in links for an admin, a team admin and a user.

Persona scope offline: the rules extractor reads only the user's first-person statements, so it
never writes `persona` memories. `ScriptedPersonaLearner` is a scripted stand-in for an LLM (stated
as such wherever the demo prints it): for a conversation whose persona has persona learning on, it
adds the persona facts of `cli/samples/persona_script.json` whose phrase occurs in an assistant
message, through the same validation and secret screening as any LLM output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cli.commands.demo_integration import (
    EXAMPLES,
    Cast,
    Integration,
    dead_letter_line,
    demo_credentials,
    extracted_line,
    integration_text,
    pmem_path,
    reviewers_of,
)
from cli.commands.errors import UsageError
from extraction.protocols import Extractor
from extraction.redact import screen_candidate
from extraction.types import Candidate, ExtractionRequest, ExtractionResult
from extraction.validate import merge_candidates, validate_items

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SCRIPT = SAMPLES / "persona_script.json"
FOLLOWUPS = SAMPLES / "followups.jsonl"
# the printed sign-in links (single use) live as long as any sign-in link may (the API's default
# `PMEM_UI_SIGN_IN_MAX_S`); the sessions they open last a demo's afternoon
DEMO_LINK_S = 600
DEMO_SESSION_S = 12 * 3600


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
    from cli.commands.publish import publish_file

    events = [json.loads(line) for line in FOLLOWUPS.read_text().splitlines() if line.strip()]
    await publish_file(FOLLOWUPS, settings)
    waiting = {uuid.UUID(e["event_id"]) for e in events}
    started = time.monotonic()
    while waiting and time.monotonic() - started < timeout_s:
        waiting = {event_id for event_id in waiting if not await store.writes.is_processed(event_id)}
        if waiting:
            await asyncio.sleep(0.25)
    return len(events) - len(waiting)


def sign_in_links(
    base: str, secret: str, catalogue: dict[str, Any], cast: Cast, *, ttl_s: int
) -> list[tuple[str, str, str]]:
    """(who, link, about) for the sample reviewers (an admin, a team admin of the sample team) and
    the sample user."""
    from api.auth import mint_jwt

    team, user = uuid.UUID(catalogue["team"]), uuid.UUID(catalogue["user"])
    people = [
        (r.role.replace("_", " "), r.id, r.role, () if r.role == "admin" else (team,), f"{r.name}: {r.about}")
        for r in reviewers_of(catalogue)
    ]
    people.append(("user", user, "user", (team,), f"{cast.name(user)}: their own memories"))
    links = []
    for who, subject, role, teams, about in people:
        token = mint_jwt(secret=secret, subject=subject, role=role, teams=teams, ttl_s=ttl_s, sign_in=True)
        links.append((who, f"{base}/ui/login?token={token}", about))
    return links


async def serve(
    store: Any,
    settings: Any,
    *,
    data_dir: Path,
    catalogue: dict[str, Any],
    cast: Cast,
    api_port: int,
    with_ui: bool,
    nats: Any,
    host: str = "127.0.0.1",
) -> int:
    """Serve the control plane (the API, and the web UI unless `with_ui` is off) over the demo's
    store until Ctrl-C or SIGTERM, printing what an integrator pastes (`integration_text`), then a
    line per event the worker processes or dead-letters (`follow_events`, on the `nats`
    connection); 0 when stopped that way. `ready` is printed once the lines to paste are out."""
    import uvicorn

    from api.app import create_app
    from api.auth import AuthConfig
    from cli.commands.serve import _Server
    from store.model import DirectoryEntry

    credentials = await demo_credentials(store.api_keys, data_dir)
    # the reviewers sign in with the links below: the web UI greets them by name
    await store.directory.set_names(
        [DirectoryEntry(kind="user", id=r.id, name=r.name) for r in reviewers_of(catalogue)]
    )
    app = create_app(
        store=store,
        auth=AuthConfig(jwt_secret=credentials.jwt_secret),
        max_input_tokens=settings.llm_max_input_tokens,
        ui_session_s=DEMO_SESSION_S,
        sign_in_max_s=DEMO_LINK_S,
        with_ui=with_ui,
    )

    # `pmem serve`'s server: Ctrl-C ends it gracefully and the demo then cleans up and exits 0
    server = _Server(uvicorn.Config(app, host=host, port=api_port, log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn exposes a flag, not an event)
        await asyncio.sleep(0.05)
    if task.done():  # uvicorn could not start (it logged why)
        await task
        raise UsageError(
            f"the API could not start on {host}:{api_port}; pass --port (or set PMEM_API_PORT) with "
            "another port"
        )
    base = f"http://{host}:{api_port}"
    embedding = [("PMEM_EMBEDDING_PROVIDER", settings.embedding_provider)]
    if settings.embedding_model:
        embedding.append(("PMEM_EMBEDDING_MODEL", settings.embedding_model))
    text = integration_text(
        Integration(
            base_url=base,
            nats_url=settings.nats_url,
            database_url=settings.database_url,
            embedding=embedding,
            jwt_secret=credentials.jwt_secret,
            api_key=credentials.api_key,
            cast=cast,
            user_id=catalogue["user"],
            persona_id=catalogue["persona"],
            team_id=catalogue["team"],
            pmem=pmem_path(sys.argv[0], sys.executable),
            python=sys.executable,
            sign_in=sign_in_links(base, credentials.jwt_secret, catalogue, cast, ttl_s=DEMO_LINK_S)
            if with_ui
            else (),
            examples=EXAMPLES if EXAMPLES.is_dir() else None,
            with_ui=with_ui,
        )
    )
    print("\n".join(text))
    following = await follow_events(nats, settings, cast)
    print("ready", flush=True)
    try:
        await task
    finally:
        for subscription in following:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
    print("\nstopped")
    return 0


async def follow_events(nats: Any, settings: Any, cast: Cast) -> list[Any]:
    """Print a line for each event the worker processes (`memory.extracted`) or dead-letters, while
    the demo serves: what a publisher sent shows up where the demo runs."""

    async def extracted(msg: Any) -> None:
        print(extracted_line(msg.data, cast), flush=True)

    async def dead(msg: Any) -> None:
        print(dead_letter_line(msg.data), flush=True)

    return [
        await nats.subscribe(settings.extracted_subject, cb=extracted),
        await nats.subscribe(settings.dlq_subject, cb=dead),
    ]
