"""The memory tools through the real `pmem serve` process on Postgres: over HTTP (`/v1/tools/call`)
and over MCP (the SDK's own client, streamable HTTP), compared with the Python handlers on the same
inputs, one table driving all three. Plus the team boundary, `review_tool_saves` and MCP's refusals."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from api.auth import mint_jwt
from extraction.embeddings import HashingEmbedder
from store.model import MemoryFilter, NewMemory, NewTurn
from store.postgres.store import PostgresMemoryStore
from store.services.tools import TOOL_NAMES, MemoryTools, ToolCallError, ToolContext
from tests.api.conftest import SECRET, TEAM_A, TEAM_B
from tests.api.serve_harness import DIM, Served, served_process
from tests.database_role import DATABASE_ROLE
from tests.factories import user_fact

PERSONA = uuid.UUID(int=0x9)
OTHER_TEAM_SECRET = "office-in-berlin-6a1f"
API_KEY = "sk-proj1234567890abcdefABCDEF"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


@pytest.fixture(scope="module")
def served(new_database: Callable[[], str]) -> Iterator[Served]:
    """One server for the module: every test uses users of its own."""
    yield from served_process(new_database)


@pytest.fixture
def own_served(new_database: Callable[[], str]) -> Iterator[Served]:
    """A server of the test's own (it changes settings that apply to everyone)."""
    yield from served_process(new_database)


@pytest.fixture
async def store(served: Served) -> AsyncIterator[PostgresMemoryStore]:
    opened = PostgresMemoryStore(served.database_url, HashingEmbedder(dim=DIM), database_role=DATABASE_ROLE)
    yield opened
    await opened.close()


async def seed(store: PostgresMemoryStore, user: uuid.UUID) -> None:
    """What every channel's user starts with: a team-less fact, a persona fact in team A, and a
    fact from team B that no call in team A may see or touch."""
    for new in (
        user_fact(user, "diet", "Is vegetarian", status="active"),
        NewMemory(
            scope="persona_user",
            owner_id=PERSONA,
            user_id=user,
            key="Alice / birthday",
            value="3 March",
            status="active",
            team_id=TEAM_A,
        ),
        user_fact(
            user,
            "office",
            OTHER_TEAM_SECRET,
            status="active",
            team_id=TEAM_B,
        ),
    ):
        await store.writes.upsert(new)
    # one earlier conversation in team A with the persona, one in team B that search never reaches
    for team, text in ((TEAM_A, "I am flying to Lisbon on Friday"), (TEAM_B, OTHER_TEAM_SECRET)):
        turn = NewTurn(
            channel_id=uuid.uuid5(user, str(team)),
            user_id=user,
            persona_id=PERSONA,
            team_id=team,
            role="user",
            text=text,
            at=datetime(2026, 11, 20, 9, 0, tzinfo=UTC),
            position=1,
        )
        await store.writes.write_event(event_id=uuid.uuid4(), memories=[], turns=[turn])


# -- the three channels ---------------------------------------------------------------------------

Answer = dict[str, Any]  # {"result": …} or {"error": message}


async def call_python(store: PostgresMemoryStore, user: uuid.UUID, name: str, arguments: Any) -> Answer:
    tools = MemoryTools(ToolContext(user_id=user, persona_id=PERSONA, team_id=TEAM_A, store=store))
    try:
        return {"result": await tools.handle_tool_call(name, arguments)}
    except ToolCallError as exc:
        return {"error": str(exc)}


async def call_http(served: Served, user: uuid.UUID, name: str, arguments: Any) -> Answer:
    async with httpx.AsyncClient(base_url=served.base, timeout=10) as http:
        response = await http.post(
            "/v1/tools/call",
            json={
                "name": name,
                "arguments": arguments,
                "user_id": str(user),
                "persona_id": str(PERSONA),
                "team_id": str(TEAM_A),
            },
            headers={"Authorization": f"Bearer {served.service_key}"},
        )
    assert response.status_code in (200, 422), response.text
    return dict(response.json())


def mcp_url(served: Served, **context: uuid.UUID | None) -> str:
    query = "&".join(f"{k}={v}" for k, v in context.items() if v is not None)
    return f"{served.base}/mcp?{query}"


@asynccontextmanager
async def mcp_client(url: str, credential: str | None) -> AsyncIterator[Client]:
    headers = {} if credential is None else {"Authorization": f"Bearer {credential}"}
    http = httpx2.AsyncClient(headers=headers, timeout=10)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


async def call_mcp(served: Served, user: uuid.UUID, name: str, arguments: Any) -> Answer:
    url = mcp_url(served, user_id=user, persona_id=PERSONA, team_id=TEAM_A)
    if isinstance(arguments, str):
        arguments = json.loads(arguments)  # MCP carries arguments as an object
    async with mcp_client(url, served.service_key) as client:
        result = await client.call_tool(name, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    if result.is_error:
        return {"error": text}
    assert result.structured_content == json.loads(text)
    return {"result": result.structured_content}


def comparable(value: Any) -> Any:
    """A result with what differs between users by construction (row ids, write times) masked."""
    if isinstance(value, dict):
        masked = ("id", "updated_at", "conversation_id")
        return {k: "<masked>" if k in masked else comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [comparable(item) for item in value]
    return value


# -- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One tool call and what its answer must show (every channel must give the same answer)."""

    name: str
    arguments: Any
    contains: tuple[str, ...] = ()  # texts the answer holds
    error: bool = False
    # MCP carries arguments as a JSON object: a malformed JSON string cannot be sent over it
    channels: tuple[str, ...] = ("python", "http", "mcp")


ROWS: tuple[Row, ...] = (
    Row("memory_save", {"key": "favourite colour", "value": "green"}, ("persona_user", "active")),
    Row("memory_save", '{"key": "diet", "value": "Is vegan"}', ('"created"', "persona_user")),
    Row("memory_recall", {"query": "what does the user eat"}, ("Is vegetarian",)),
    Row("memory_recall", {}, ("Is vegetarian", "3 March")),
    Row("remember", {"subject": "Alice", "key": "birthday", "value": "4 March"}, ("Alice / birthday",)),
    Row("recall", {"subject": "Alice", "key": "birthday"}, ("3 March",)),
    Row("recall", {"subject": "Alice"}, ("3 March",)),
    Row("recall", {"subject": "me", "key": "office"}, ('"found": false',)),
    Row("recall", {"subject": "Bob", "key": "age"}, ('"related"',)),
    Row("forget", {"subject": "me", "key": "diet"}, ('"forgotten": 1',)),
    Row("forget", {"subject": "me", "key": "office"}, ('"forgotten": 0',)),
    Row("memory_save", {"key": ""}, ("bad arguments for memory_save",), error=True),
    Row("memory_recall", {"max_results": 0}, ("max_results",), error=True),
    Row("remember", "{not json", ("not valid JSON",), error=True, channels=("python", "http")),
    Row("conversation_search", {"query": "when is the trip to Lisbon"}, ("flying to Lisbon", '"count": 1')),
    Row("conversation_search", {"query": "office in berlin"}, ('"count": 0',)),
    Row("conversation_search", {"query": ""}, ("bad arguments for conversation_search",), error=True),
    Row("no_such_tool", {}, ("unknown tool",), error=True),
    # the one gate for text: a secret is redacted, a value that is only a secret is refused
    Row(
        "memory_save",
        {"key": "work\u202e", "value": f"Uses {API_KEY}\u200b daily"},
        ('"key": "work"', '"redacted": ["api_key"]'),
    ),
    Row(
        "memory_save",
        {"key": "work api key", "value": f" {API_KEY} "},
        ("value: holds only a secret (api key); secrets are not stored", "save the fact without it"),
        error=True,
    ),
    Row(
        "remember",
        {"subject": "me", "key": "aws", "value": AWS_KEY},
        ("holds only a secret (aws key)",),
        error=True,
    ),
)


def test_the_table_covers_every_tool() -> None:
    assert set(TOOL_NAMES) <= {row.name for row in ROWS}


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.name} {json.dumps(r.arguments)}" for r in ROWS])
async def test_python_http_and_mcp_give_the_same_answer(
    row: Row, served: Served, store: PostgresMemoryStore
) -> None:
    answers = {}
    for channel, call in (
        ("python", lambda user: call_python(store, user, row.name, row.arguments)),
        ("http", lambda user: call_http(served, user, row.name, row.arguments)),
        ("mcp", lambda user: call_mcp(served, user, row.name, row.arguments)),
    ):
        if channel not in row.channels:
            continue
        user = uuid.uuid4()
        await seed(store, user)
        answer = await call(user)
        answers[channel] = comparable(answer)
        text = json.dumps(answer)
        assert ("error" in answer) == row.error, (channel, answer)
        assert all(needle in text for needle in row.contains), (channel, answer)
        assert OTHER_TEAM_SECRET not in text, (channel, answer)
        # the team-B fact is never touched from team A
        left = await store.listing.list_memories(MemoryFilter(owner_id=user, key="office"))
        assert [m.value for m in left] == [OTHER_TEAM_SECRET]
    assert all(answer == answers["python"] for answer in answers.values()), answers


async def test_a_save_that_is_only_a_secret_stores_nothing_through_any_channel(
    served: Served, store: PostgresMemoryStore
) -> None:
    arguments = {"key": "work api key", "value": API_KEY}
    channels: dict[str, Callable[[uuid.UUID], Awaitable[Answer]]] = {
        "python": lambda user: call_python(store, user, "memory_save", arguments),
        "http": lambda user: call_http(served, user, "memory_save", arguments),
        "mcp": lambda user: call_mcp(served, user, "memory_save", arguments),
    }
    for channel, call in channels.items():
        user = uuid.uuid4()
        answer = await call(user)
        assert "holds only a secret" in answer["error"], (channel, answer)
        assert await store.listing.list_memories(MemoryFilter(owner_id=PERSONA, user_id=user)) == [], channel
        assert await store.listing.list_memories(MemoryFilter(owner_id=user)) == [], channel


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"key": "my password", "value": "hunter2-Xy9"}, "names a secret"),
        ({"key": "ｐａｓｓｗｏｒｄ", "value": "hunter2-Xy9"}, "names a secret"),
        ({"key": "card", "value": "4111  1111  1111  1111"}, "holds only a secret"),
    ],
)
async def test_a_secret_split_or_spaced_is_refused_not_stored_through_any_channel(
    served: Served, store: PostgresMemoryStore, arguments: dict[str, str], said: str
) -> None:
    channels: dict[str, Callable[[uuid.UUID], Awaitable[Answer]]] = {
        "python": lambda user: call_python(store, user, "memory_save", arguments),
        "http": lambda user: call_http(served, user, "memory_save", arguments),
        "mcp": lambda user: call_mcp(served, user, "memory_save", arguments),
    }
    for channel, call in channels.items():
        user = uuid.uuid4()
        answer = await call(user)
        assert said in answer.get("error", ""), (channel, answer)
        assert "hunter2" not in answer["error"] and "1111" not in answer["error"]
        assert await store.listing.list_memories(MemoryFilter(owner_id=user)) == [], channel


async def test_tool_lists_agree(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.base, timeout=10) as http:
        listed = await http.get("/v1/tools", headers={"Authorization": f"Bearer {served.service_key}"})
    schemas = listed.json()["tools"]
    async with mcp_client(mcp_url(served, user_id=uuid.uuid4()), served.service_key) as client:
        tools = (await client.list_tools()).tools
    assert [s["function"]["name"] for s in schemas] == [t.name for t in tools] == list(TOOL_NAMES)
    for schema, tool in zip(schemas, tools, strict=True):
        assert tool.input_schema == schema["function"]["parameters"]
        assert tool.description == schema["function"]["description"]


async def test_a_save_carries_the_team(served: Served, store: PostgresMemoryStore) -> None:
    user = uuid.uuid4()
    answer = await call_http(served, user, "memory_save", {"key": "hometown", "value": "Ghent"})
    saved = await store.listing.get_by_id(uuid.UUID(answer["result"]["id"]))
    assert saved is not None and saved.team_id == TEAM_A and saved.status == "active"


async def test_review_tool_saves_makes_saves_wait_for_review(own_served: Served) -> None:
    served = own_served
    admin = {"Authorization": f"Bearer {mint_jwt(secret=SECRET, subject=uuid.uuid4(), role='admin')}"}
    async with httpx.AsyncClient(base_url=served.base, timeout=10) as http:
        for level in ("global", "team", "persona"):
            path = {"global": "global", "team": f"teams/{TEAM_A}", "persona": f"personas/{PERSONA}"}[level]
            put = await http.put(f"/v1/settings/{path}", json={"review_tool_saves": True}, headers=admin)
            assert put.status_code == 200 and put.json()["effective"]["review_tool_saves"] is True
            user = uuid.uuid4()
            for channel in (call_http, call_mcp):
                saved = await channel(
                    served, user, "remember", {"subject": "me", "key": "pet", "value": "a cat"}
                )
                assert saved["result"]["status"] == "pending_review", (level, channel)
                recalled = await channel(served, user, "recall", {"subject": "me", "key": "pet"})
                assert recalled["result"]["found"] is False  # pending memories are not recalled
            queue = await http.get("/v1/review", params={"user_id": str(user)}, headers=admin)
            assert [item["key"] for item in queue.json()["items"]] == ["pet"], level
            off = await http.put(f"/v1/settings/{path}", json={}, headers=admin)
            assert off.status_code == 200 and off.json()["effective"]["review_tool_saves"] is False
            answer = await call_http(
                served, user, "remember", {"subject": "me", "key": "pet", "value": "a dog"}
            )
            assert answer["result"]["status"] == "active", level


async def test_a_person_acts_for_themselves_only(served: Served, store: PostgresMemoryStore) -> None:
    person, other = uuid.uuid4(), uuid.uuid4()
    await seed(store, other)
    credential = mint_jwt(secret=SECRET, subject=person, teams=(TEAM_A,))
    async with httpx.AsyncClient(base_url=served.base, timeout=10) as http:
        auth = {"Authorization": f"Bearer {credential}"}
        own = await http.post(
            "/v1/tools/call",
            json={
                "name": "memory_save",
                "arguments": {"key": "city", "value": "Porto"},
                "team_id": str(TEAM_A),
            },
            headers=auth,
        )
        assert own.status_code == 200, own.text
        saved = await store.listing.get_by_id(uuid.UUID(own.json()["result"]["id"]))
        assert saved is not None and saved.owner_id == person and saved.team_id == TEAM_A
        for body in (
            {"name": "memory_recall", "user_id": str(other)},
            {"name": "memory_recall", "team_id": str(TEAM_B)},
        ):
            refused = await http.post("/v1/tools/call", json=body, headers=auth)
            assert refused.status_code == 403, refused.text
            assert "Is vegetarian" not in refused.text
    async with mcp_client(mcp_url(served, team_id=TEAM_A), credential) as client:
        mine = await client.call_tool("memory_recall", {})
    assert mine.structured_content is not None
    assert [m["value"] for m in mine.structured_content["memories"]] == ["Porto"]


# what the server says to each refused caller (the same words over HTTP and MCP)
REASONS = {
    ("none", ()): "no credential: send `Authorization: Bearer <JWT or API key>`",
    ("forged", ()): "the token is not valid: Signature verification failed",
    ("unknown_key", ("user_id",)): "the API key is unknown or revoked",
    ("person", ("team_id",)): "your token does not list this team (claim pmem_teams)",
    ("person", ("user_id",)): "a person's tools act for themselves only; leave user_id out or use your own",
    ("service", ()): "user_id: a service names the user the tool acts for",
    ("service", ("user_id",)): "query parameter user_id: expected a UUID string",
}


@pytest.mark.parametrize(
    ("credential", "context", "status"),
    [
        ("none", {}, 401),
        ("forged", {}, 401),
        ("unknown_key", {"user_id": "u"}, 401),
        ("person", {"team_id": str(TEAM_B)}, 403),
        ("person", {"user_id": "other"}, 403),
        ("service", {}, 422),
        ("service", {"user_id": "not-a-uuid"}, 422),
    ],
)
async def test_mcp_refuses_before_any_tool_runs(
    credential: str, context: dict[str, str], status: int, served: Served, store: PostgresMemoryStore
) -> None:
    person, other = uuid.uuid4(), uuid.uuid4()
    await seed(store, other)
    tokens = {
        "none": None,
        "forged": mint_jwt(secret="another-secret-of-at-least-32-bytes!!", subject=person),
        "unknown_key": "pmem_sk_" + "0" * 40,
        "person": mint_jwt(secret=SECRET, subject=person, teams=(TEAM_A,)),
        "service": served.service_key,
    }
    query = {k: {"u": str(person), "other": str(other)}.get(v, v) for k, v in context.items()}
    url = f"{served.base}/mcp?" + "&".join(f"{k}={v}" for k, v in query.items())
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if tokens[credential]:
        headers["Authorization"] = f"Bearer {tokens[credential]}"
    before = await store.listing.list_memories(MemoryFilter(owner_id=other))
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "forget", "arguments": {"subject": "me", "key": "diet"}},
    }
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(url, json=call, headers=headers)
    assert response.status_code == status, response.text
    assert "Is vegetarian" not in response.text
    # a JSON-RPC error answering the request's id, with the server's reason as its message
    refusal = response.json()
    assert refusal["jsonrpc"] == "2.0" and refusal["id"] == 1, refusal
    reason = refusal["error"]["message"]
    assert reason == REASONS[credential, tuple(context)], reason
    assert await store.listing.list_memories(MemoryFilter(owner_id=other)) == before
    # the SDK's client raises that message, without reaching a tool
    # (the SDK may wrap its MCPError in exception groups: `mcp_errors` finds it)
    with pytest.raises(Exception) as caught:
        async with mcp_client(url, tokens[credential]) as client:
            await client.call_tool("forget", {"subject": "me", "key": "diet"})
    raised = mcp_errors(caught.value)
    assert [error.message for error in raised] == [reason], caught.value
    assert await store.listing.list_memories(MemoryFilter(owner_id=other)) == before


def mcp_errors(raised: BaseException) -> list[MCPError]:
    """The SDK's MCPErrors in what it raised (it may wrap them in exception groups)."""
    if isinstance(raised, MCPError):
        return [raised]
    if isinstance(raised, BaseExceptionGroup):
        return [error for inner in raised.exceptions for error in mcp_errors(inner)]
    return []


ROLES = ("anonymous", "user", "team_admin", "admin", "service")
RESOURCES = ("own", "other_user", "other_team")
# a person acts for themselves only, in the teams their token lists; a service for anyone
MCP_EXPECT = {
    "anonymous": {"own": 401, "other_user": 401, "other_team": 401},
    "user": {"own": 200, "other_user": 403, "other_team": 403},
    "team_admin": {"own": 403, "other_user": 403, "other_team": 403},
    "admin": {"own": 403, "other_user": 403, "other_team": 403},
    "service": {"own": 200, "other_user": 200, "other_team": 200},
}


async def test_mcp_authorization_matrix(served: Served, store: PostgresMemoryStore) -> None:
    """Roles × own / another user's / another team's context over MCP: the status, and a recall
    that shows only the context's own memory."""
    user, other, team_admin, admin = (uuid.uuid4() for _ in range(4))
    secrets = {
        "own": f"own-{user.hex[:6]}",
        "other_user": f"other-{other.hex[:6]}",
        "other_team": f"b-{other.hex[:6]}",
    }
    contexts = {"own": (user, TEAM_A), "other_user": (other, TEAM_A), "other_team": (other, TEAM_B)}
    for resource, (subject, team) in contexts.items():
        await store.writes.upsert(
            user_fact(
                subject,
                f"fact {resource}",
                secrets[resource],
                status="active",
                team_id=team,
            )
        )
    credentials = {
        "anonymous": None,
        "user": mint_jwt(secret=SECRET, subject=user, teams=(TEAM_A,)),
        "team_admin": mint_jwt(secret=SECRET, subject=team_admin, role="team_admin", teams=(TEAM_A,)),
        "admin": mint_jwt(secret=SECRET, subject=admin, role="admin"),
        "service": served.service_key,
    }
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "memory_recall", "arguments": {}},
    }
    async with httpx.AsyncClient(timeout=10) as http:
        for role in ROLES:
            for resource, (subject, team) in contexts.items():
                headers = {"Accept": "application/json, text/event-stream"}
                if credentials[role]:
                    headers["Authorization"] = f"Bearer {credentials[role]}"
                response = await http.post(
                    mcp_url(served, user_id=subject, team_id=team), json=call, headers=headers
                )
                assert response.status_code == MCP_EXPECT[role][resource], (role, resource, response.text)
                shown = {r for r, secret in secrets.items() if secret in response.text}
                assert shown == ({resource} if response.status_code == 200 else set()), (role, resource)
