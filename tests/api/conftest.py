"""API fixtures: a migrated Postgres database per session (emptied per test), the app in process
(httpx over ASGI), and tokens for every role; the `each_*` fixtures run a test on Postgres and on
SQLite."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from api.auth import AuthConfig, mint_jwt
from extraction.embeddings import HashingEmbedder
from store.migrate import migrate
from store.postgres.store import PostgresMemoryStore
from store.sqlite.store import SqliteMemoryStore
from tests.database_role import DATABASE_ROLE
from tests.store.conftest import truncate

SECRET = "test-secret-that-is-at-least-32-bytes-long"
AUTH = AuthConfig(jwt_secret=SECRET)
TEAM_A, TEAM_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)
DIM = 384


@dataclass(frozen=True, kw_only=True)
class People:
    """The callers of the API tests and their credentials."""

    user: uuid.UUID
    other_user: uuid.UUID
    team_admin: uuid.UUID
    admin: uuid.UUID
    service_key: str

    def token(self, role: str) -> str | None:
        """The bearer credential of a role (None: anonymous)."""
        if role == "anonymous":
            return None
        if role == "service":
            return self.service_key
        subject = {"user": self.user, "team_admin": self.team_admin, "admin": self.admin}[role]
        teams = (TEAM_A,) if role in ("user", "team_admin") else ()
        return mint_jwt(secret=SECRET, subject=subject, role=role, teams=teams)

    def headers(self, role: str) -> dict[str, str]:
        """Authorization headers of a role."""
        token = self.token(role)
        return {} if token is None else {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="session")
def api_db_url(new_database: Callable[[], str]) -> str:
    """One Postgres database migrated for the API tests."""
    url = new_database()
    migrate(url, DIM)
    return url


@pytest.fixture
async def api_store(api_db_url: str) -> AsyncIterator[PostgresMemoryStore]:
    """An empty Postgres store."""
    truncate(api_db_url)
    store = PostgresMemoryStore(api_db_url, HashingEmbedder(dim=DIM), database_role=DATABASE_ROLE)
    yield store
    await store.close()


@pytest.fixture
async def people(api_store: PostgresMemoryStore) -> People:
    """Fresh people and a service key."""
    _, key = await api_store.api_keys.create_api_key("chat-backend")
    return People(
        user=uuid.uuid4(),
        other_user=uuid.uuid4(),
        team_admin=uuid.uuid4(),
        admin=uuid.uuid4(),
        service_key=key,
    )


@pytest.fixture
async def client(api_store: PostgresMemoryStore) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client talking to the app in process."""
    app = create_app(store=api_store, auth=AUTH, max_body_bytes=64_000)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://pmem.test") as http:
        yield http


@pytest.fixture(params=["postgres", "sqlite"])
async def each_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[PostgresMemoryStore | SqliteMemoryStore]:
    """An empty store of each backend: Postgres (the API tests' database, emptied) and SQLite (a file)."""
    store: PostgresMemoryStore | SqliteMemoryStore
    if request.param == "postgres":
        url = request.getfixturevalue("api_db_url")
        truncate(url)
        store = PostgresMemoryStore(url, HashingEmbedder(dim=DIM), database_role=DATABASE_ROLE)
    else:
        store = SqliteMemoryStore(f"sqlite:///{tmp_path}/api.db", HashingEmbedder(dim=DIM))
    yield store
    await store.close()


@pytest.fixture
async def each_people(each_store: PostgresMemoryStore | SqliteMemoryStore) -> People:
    """Fresh people and a service key, on `each_store`."""
    _, key = await each_store.api_keys.create_api_key("chat-backend")
    return People(
        user=uuid.uuid4(),
        other_user=uuid.uuid4(),
        team_admin=uuid.uuid4(),
        admin=uuid.uuid4(),
        service_key=key,
    )


@pytest.fixture
async def each_client(
    each_store: PostgresMemoryStore | SqliteMemoryStore,
) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client talking to the app in process over `each_store`."""
    app = create_app(store=each_store, auth=AUTH, max_body_bytes=64_000)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://pmem.test") as http:
        yield http
