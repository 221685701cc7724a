"""Client fixtures: the real app over a real Postgres store (the API tests' fixtures), reached by the
async client through a transport that keeps every answer, and `pmem serve` as a process for the sync
client; `conforms` checks an answer against the OpenAPI document's schema of its operation."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import jsonschema
import pytest
from fastapi import FastAPI

from api.app import create_app
from pmem_client import AsyncMemoryClient, RetryPolicy
from store.postgres.store import PostgresMemoryStore
from tests.api.conftest import AUTH, People, api_db_url, api_store, people  # noqa: F401
from tests.api.serve_harness import Served, served_process

BASE = "http://pmem.test"
MAX_BODY = 64_000


@dataclass
class Recording(httpx.AsyncBaseTransport):
    """The app over ASGI; every exchange kept (request method and path, status, body)."""

    app: FastAPI
    seen: list[tuple[str, str, int, bytes]] = field(default_factory=list)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
        response = await transport.handle_async_request(request)
        body = await response.aread()
        self.seen.append((request.method, request.url.path, response.status_code, body))
        return httpx.Response(response.status_code, headers=response.headers, content=body)


@pytest.fixture
def app(api_store: PostgresMemoryStore) -> FastAPI:  # noqa: F811
    """The control-plane app over the empty Postgres store."""
    return create_app(store=api_store, auth=AUTH, max_body_bytes=MAX_BODY)


@pytest.fixture
def recording(app: FastAPI) -> Recording:
    """A transport to the app that keeps every exchange."""
    return Recording(app)


Connect = Callable[[str], AsyncMemoryClient]


@pytest.fixture
async def connect(recording: Recording, people: People) -> AsyncIterator[Connect]:  # noqa: F811
    """An async client per role ("service", "admin", "team_admin", "user", or a raw credential),
    closed at the end."""
    opened: list[AsyncMemoryClient] = []

    def make(role: str) -> AsyncMemoryClient:
        known = role in ("service", "admin", "team_admin", "user")
        credential = people.token(role) if known else role
        assert credential is not None
        client = AsyncMemoryClient(BASE, credential, transport=recording, retry=RetryPolicy(max_attempts=1))
        opened.append(client)
        return client

    yield make
    for client in opened:
        await client.close()


@pytest.fixture(scope="module")
def served(new_database: Callable[[], str]) -> Iterator[Served]:
    """`pmem serve` on a fresh database with a service key."""
    yield from served_process(new_database)


def _matches(template: str, path: str) -> bool:
    pattern = (
        "^" + "/".join("[^/]+" if p.startswith("{") else re.escape(p) for p in template.split("/")) + "$"
    )
    return re.match(pattern, path) is not None


def answer_schema(document: dict[str, Any], method: str, path: str, status: int) -> dict[str, Any] | None:
    """The schema the document gives the answer of `status` to `method path` (None: no body)."""
    for template, operations in document["paths"].items():
        if _matches(template, path) and method.lower() in operations:
            response = operations[method.lower()]["responses"][str(status)]
            content = response.get("content", {}).get("application/json")
            return None if content is None else {"components": document["components"], **content["schema"]}
    raise AssertionError(f"{method} {path} is not in the document")


def conforms(document: dict[str, Any], seen: list[tuple[str, str, int, bytes]]) -> set[tuple[str, str]]:
    """Check every recorded answer against the document (its status documented, its JSON valid
    against the status's schema); the operations answered, as (method, path template)."""
    import json

    answered: set[tuple[str, str]] = set()
    for method, path, status, body in seen:
        schema = answer_schema(document, method, path, status)
        if schema is not None:
            jsonschema.Draft202012Validator(schema).validate(json.loads(body))
        else:
            assert body == b"", (method, path, status)
        for template in document["paths"]:
            if _matches(template, path):
                answered.add((method, template))
    return answered
