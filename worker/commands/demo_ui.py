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
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from extraction.redact import screen_candidate
from extraction.types import Candidate, ExtractionRequest, ExtractionResult
from extraction.typing import Extractor
from extraction.validate import merge_candidates, validate_items

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SCRIPT = SAMPLES / "persona_script.json"
FOLLOWUPS = SAMPLES / "followups.jsonl"


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
    worker.deps = replace(worker.deps, extractor=learner)


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
