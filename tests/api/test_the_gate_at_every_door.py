"""One gate for text, through every door, on both stores: hostile text (API keys, an AWS key, a JWT,
a GitHub token, a card number; bidi controls, zero-width and tag characters, NUL) comes in through
the worker (turns, evidence, memories, names), the tools over HTTP, people's and reviewers' edits
(API and web UI), display names and prompt overrides — and no secret and no invisible character
is ever stored, shown (API JSON, UI HTML) or hinted (`/v1/hint`)."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from api.app import create_app
from api.auth import mint_jwt
from extraction.types import ExtractionRequest, ExtractionResult
from extraction.validate import merged_and_screened, validate_items
from store.postgres.store import PostgresMemoryStore
from store.sqlite.store import SqliteMemoryStore
from tests.api.conftest import AUTH, SECRET
from tests.factories import HOSTILE_TEXT, leaks
from worker.events import ConversationEnded
from worker.metrics import Metrics
from worker.pipeline import PipelineDeps, process_event

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
# the words of the hostile corpus's plain text: what brings its turns into recall and the hint
QUERY = "where does Ana live Lisbon vegan spring key thanks"


class EchoExtractor:
    """What an extractor does with the conversation (validate, merge, screen), over two items: a
    fact citing every message, and the last message itself as a value."""

    async def extract(self, request: ExtractionRequest) -> ExtractionResult:
        count = len(request.messages)
        items = [
            {"key": "home city", "value": "Lives in Lisbon", "confidence": 0.9, "scope": "user",
             "evidence": list(range(1, count + 1))},
            {"key": "last words", "value": request.messages[-1].content, "confidence": 0.9,
             "scope": "user", "evidence": [count]},
        ]  # fmt: skip
        valid, rejected = validate_items(items, request.allowed_scopes)
        candidates, unsafe = merged_and_screened(valid)
        return ExtractionResult(candidates=tuple(candidates), rejected=(*rejected, *unsafe))

    async def close(self) -> None:
        """Nothing to release."""


@dataclass(kw_only=True)
class Gated:
    """The app in process over one store, with the callers of every door. `fresh` starts a new
    context (user, persona, team): Hypothesis's examples share the store, not what they see."""

    store: PostgresMemoryStore | SqliteMemoryStore
    api: httpx.AsyncClient
    admin_ui: httpx.AsyncClient
    user_ui: httpx.AsyncClient
    service: dict[str, str]
    admin: dict[str, str]
    user: uuid.UUID = field(default_factory=uuid.uuid4)
    persona: uuid.UUID = field(default_factory=uuid.uuid4)
    team: uuid.UUID = field(default_factory=uuid.uuid4)
    person: dict[str, str] = field(default_factory=dict)

    async def fresh(self) -> None:
        self.user, self.persona, self.team = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        token = mint_jwt(secret=SECRET, subject=self.user, teams=(self.team,))
        self.person = {"Authorization": f"Bearer {token}"}
        self.user_ui.cookies.clear()
        sign_in = mint_jwt(secret=SECRET, subject=self.user, teams=(self.team,), ttl_s=300, sign_in=True)
        assert (await self.user_ui.get("/ui/login", params={"token": sign_in})).status_code == 200

    def context(self) -> dict[str, str]:
        return {"user_id": str(self.user), "persona_id": str(self.persona), "team_id": str(self.team)}


@pytest.fixture
async def gated(each_store: PostgresMemoryStore | SqliteMemoryStore) -> AsyncIterator[Gated]:
    store = each_store
    app = create_app(store=store, auth=AUTH, max_body_bytes=64_000)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    api, admin_ui, user_ui = (
        httpx.AsyncClient(transport=transport, base_url="http://pmem.test") for _ in range(3)
    )
    admin = uuid.uuid4()
    _, key = await store.api_keys.create_api_key("chat-backend")
    sign_in = mint_jwt(secret=SECRET, subject=admin, role="admin", ttl_s=300, sign_in=True)
    assert (await admin_ui.get("/ui/login", params={"token": sign_in})).status_code == 200
    gated = Gated(
        store=store,
        api=api,
        admin_ui=admin_ui,
        user_ui=user_ui,
        service={"Authorization": f"Bearer {key}"},
        admin={"Authorization": f"Bearer {mint_jwt(secret=SECRET, subject=admin, role='admin')}"},
    )
    await gated.fresh()
    yield gated
    for client in (api, admin_ui, user_ui):
        await client.aclose()


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def shown(response: httpx.Response) -> str:
    """What a response shows a reader: a JSON body's strings, or an HTML page's text."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return "\n".join(strings(response.json()))
    return html.unescape(response.text)


def assert_clean(response: httpx.Response, door: str) -> None:
    assert response.status_code < 500, (door, response.status_code, response.text[:300])
    assert leaks(shown(response)) == [], (door, leaks(shown(response)))


async def csrf(client: httpx.AsyncClient, page: str) -> str:
    found = CSRF_RE.search((await client.get(page)).text)
    assert found is not None, page
    return found.group(1)


async def through_the_worker(g: Gated, said: list[str], name: str) -> None:
    """A conversation with the hostile texts (NUL is no valid event text: it is dropped there),
    the hostile name as the user's and the persona's, through the worker's pipeline."""
    lines = ["I live in Lisbon", *(text.replace("\x00", "") for text in said)]
    event = ConversationEnded.model_validate(
        {
            "event_id": str(uuid.uuid4()),
            "type": "conversation.ended",
            "channel_id": str(uuid.uuid4()),
            "team_id": str(g.team),
            "user_id": str(g.user),
            "persona_id": str(g.persona),
            "user_name": name.replace("\x00", ""),
            "persona_name": name.replace("\x00", ""),
            "messages": [
                {"role": "user" if i % 2 == 0 else "assistant", "content": line, "name": name}
                for i, line in enumerate(lines)
            ],
        }
    )
    deps = PipelineDeps(
        store=g.store, extractor=EchoExtractor(), embedder=g.store.embedder, metrics=Metrics()
    )
    outcome = await process_event(event, deps)
    assert outcome.status == "processed"


async def through_the_tools(g: Gated, key: str, value: str, subject: str) -> None:
    for name, arguments in (
        ("memory_save", {"key": key, "value": value}),
        ("memory_save", {"key": "note", "value": value}),
        ("remember", {"subject": subject, "key": "pet", "value": value}),
        ("recall", {"subject": subject, "key": "pet"}),
        ("memory_recall", {"query": QUERY}),
        ("conversation_search", {"query": QUERY}),
    ):
        answer = await g.api.post(
            "/v1/tools/call", json={"name": name, "arguments": arguments, **g.context()}, headers=g.service
        )
        assert answer.status_code in (200, 422), answer.text
        assert_clean(answer, f"tool {name}")


async def through_edits(g: Gated, value: str) -> None:
    """A person's edit (API, then UI) of their own memories, a reviewer's edit-and-approve (API,
    then UI) of what waits for review; each refused edit (422) names why and stores nothing."""
    mine = (await g.api.get("/v1/me/memories", headers=g.person)).json()["items"]
    for item in mine[:1]:
        edited = await g.api.patch(f"/v1/me/memories/{item['id']}", json={"value": value}, headers=g.person)
        assert edited.status_code in (200, 422)
        assert_clean(edited, "PATCH /v1/me/memories")
        form = {"csrf_token": await csrf(g.user_ui, "/ui/me"), "value": value}
        page = await g.user_ui.post(f"/ui/me/memories/{item['id']}/edit", data=form)
        assert_clean(page, "UI edit of my memory")
    waiting = (await g.api.get("/v1/review", params={"team_id": str(g.team)}, headers=g.admin)).json()[
        "items"
    ]
    for item, door in zip(waiting[:2], ("api", "ui"), strict=False):
        if door == "api":
            decided = await g.api.post(
                f"/v1/review/{item['id']}/edit", json={"value": value}, headers=g.admin
            )
        else:
            form = {"csrf_token": await csrf(g.admin_ui, "/ui/review"), "value": value}
            decided = await g.admin_ui.post(f"/ui/review/{item['id']}/edit", data=form)
        assert_clean(decided, f"review edit ({door})")
        if decided.status_code == 422:
            approved = await g.api.post(f"/v1/review/{item['id']}/approve", headers=g.admin)
            assert approved.status_code in (200, 409)


async def through_names_and_settings(g: Gated, name: str, prompt: str) -> None:
    named = await g.api.put(f"/v1/directory/users/{g.user}", json={"name": name}, headers=g.service)
    assert named.status_code in (200, 422), named.text
    assert_clean(named, "PUT /v1/directory")
    put = await g.api.put(
        f"/v1/settings/personas/{g.persona}", json={"extraction_prompt": prompt}, headers=g.admin
    )
    assert_clean(put, "PUT /v1/settings")
    form = {
        "csrf_token": await csrf(g.admin_ui, f"/ui/settings/personas/{g.persona}"),
        "extraction_prompt": prompt,
    }
    saved = await g.admin_ui.post(f"/ui/settings/personas/{g.persona}", data=form)
    assert_clean(saved, "UI settings form")


async def nothing_shown_or_hinted(g: Gated) -> None:
    reads = [
        ("GET /v1/me/memories", g.api.get("/v1/me/memories", headers=g.person)),
        ("GET /v1/me/export", g.api.get("/v1/me/export", headers=g.person)),
        ("GET /v1/me/conversations", g.api.get("/v1/me/conversations", headers=g.person)),
        ("GET /v1/review", g.api.get("/v1/review", params={"team_id": str(g.team)}, headers=g.admin)),
        ("GET /v1/settings", g.api.get(f"/v1/settings/personas/{g.persona}", headers=g.admin)),
        (
            "POST /v1/recall",
            g.api.post("/v1/recall", json={**g.context(), "query": QUERY}, headers=g.service),
        ),
        ("POST /v1/hint", g.api.post("/v1/hint", json={**g.context(), "query": QUERY}, headers=g.service)),
        ("POST /v1/hint (no query)", g.api.post("/v1/hint", json=g.context(), headers=g.service)),
        ("/ui/me", g.user_ui.get("/ui/me")),
        ("/ui/review", g.admin_ui.get("/ui/review", params={"team_id": str(g.team)})),
        ("/ui/settings", g.admin_ui.get(f"/ui/settings/personas/{g.persona}")),
    ]
    for door, read in reads:
        assert_clean(await read, door)
    mine = (await g.api.get("/v1/me/memories", headers=g.person)).json()["items"]
    for item in mine:
        assert_clean(await g.api.get(f"/v1/memories/{item['id']}", headers=g.admin), "GET /v1/memories/{id}")
        assert_clean(await g.admin_ui.get(f"/ui/memories/{item['id']}"), "/ui/memories/{id}")


# no shrinking: a failure names its door and what leaked, and shrinking examples of a few dozen
# requests each would take minutes
@settings(
    max_examples=20,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(said=st.lists(HOSTILE_TEXT, min_size=1, max_size=3), other=HOSTILE_TEXT, name=HOSTILE_TEXT)
async def test_no_secret_and_no_invisible_character_is_stored_shown_or_hinted(
    gated: Gated, said: list[str], other: str, name: str
) -> None:
    await gated.fresh()
    await through_the_worker(gated, said, name)
    await through_the_tools(gated, name, other, name)
    await through_edits(gated, other)
    await through_names_and_settings(gated, name, other)
    await nothing_shown_or_hinted(gated)


ALL_SECRET = "sk-proj1234567890abcdefABCDEF"


async def test_a_tool_save_that_is_only_a_secret_is_a_422_naming_the_fix_and_stores_nothing(
    gated: Gated,
) -> None:
    for name, arguments in (
        ("memory_save", {"key": "work api key", "value": f" {ALL_SECRET}\u200b "}),
        ("remember", {"subject": "me", "key": "aws", "value": "AKIAIOSFODNN7EXAMPLE"}),
    ):
        answer = await gated.api.post(
            "/v1/tools/call",
            json={"name": name, "arguments": arguments, **gated.context()},
            headers=gated.service,
        )
        assert answer.status_code == 422
        assert "holds only a secret" in answer.json()["error"], answer.json()
        assert "secrets are not stored — save the fact without it" in answer.json()["error"]
    assert (await gated.api.get("/v1/me/memories", headers=gated.person)).json()["items"] == []
    saved = await gated.api.post(
        "/v1/tools/call",
        json={"name": "memory_save", "arguments": {"key": "work", "value": f"Uses {ALL_SECRET} daily"},
              **gated.context()},
        headers=gated.service,
    )  # fmt: skip
    assert saved.status_code == 200 and saved.json()["result"]["redacted"] == ["api_key"]
    [stored] = (await gated.api.get("/v1/me/memories", headers=gated.person)).json()["items"]
    assert stored["value"] == "Uses [REDACTED:api_key] daily" and stored["status"] == "active"


async def test_a_message_with_nothing_but_a_secret_or_punctuation_is_not_kept_as_a_turn(
    gated: Gated, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("INFO", logger="pmem.pipeline"):
        await through_the_worker(gated, [ALL_SECRET, "...", "ok", "thanks 👍", " \u200b "], "Ana")
    exported = await gated.api.get("/v1/me/export", headers=gated.person)
    kept = [turn["text"] for turn in sorted(exported.json()["turns"], key=lambda t: t["position"])]
    assert kept == ["I live in Lisbon", "ok", "thanks 👍"]
    reasons = [
        r.getMessage() for r in caplog.records if getattr(r, "rejection", "") == "turn_without_content"
    ]
    assert len(reasons) == 3 and sum("only a redacted secret" in r for r in reasons) == 1, reasons
    # not recalled either: the hint's earlier turns are the kept ones only (and no filler)
    hint = await gated.api.post(
        "/v1/hint", json={**gated.context(), "query": "ok thanks"}, headers=gated.service
    )
    earlier = hint.json()["hint"].partition("From earlier conversations:")[2]
    assert "I live in Lisbon" in earlier and "REDACTED" not in earlier and ": ..." not in earlier
    assert "thanks 👍" not in earlier  # kept as a turn, but filler: never hinted
