"""Reads on a real streaming replica (`PMEM_DATABASE_READ_URL`): a second embedded Postgres started
from `pg_basebackup -R` of the first, a hot standby on 127.0.0.1.

Which server ran a recall is read from `pg_stat_statements` on each (the memory recall's statement
is the only one with a `vec` CTE over `memories m`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from api.app import create_app
from api.auth import AuthConfig, mint_jwt
from api.read_routing import COOKIE
from cli.embedded import EmbeddedPostgres
from extraction.embeddings import HashingEmbedder
from store.migrate import migrate
from store.postgres.store import PostgresMemoryStore
from testkit.pg_replica import StreamingReplica
from tests.database_role import DATABASE_ROLE
from tests.factories import user_fact
from tests.server_directory import server_directory

SECRET = "test-secret-that-is-at-least-32-bytes-long"
AUTH = AuthConfig(jwt_secret=SECRET)
DIM = 384
DB = "replicated"
RECALL_SQL = "%vec AS MATERIALIZED (SELECT m.id%"


class Cluster:
    """A primary with `pg_stat_statements` and its streaming replica."""

    def __init__(self, root: Path) -> None:
        self.primary = EmbeddedPostgres(data_dir=root / "primary").start()
        self.primary.configure({"shared_preload_libraries": ["pg_stat_statements"]})
        self.url = self.primary.create_database(DB)
        migrate(self.url, DIM)
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.replica = StreamingReplica(self.primary, root / "replica").start()
        self.read_url = self.replica.url_for(DB)

    def recall_calls(self) -> tuple[int, int]:
        """Executions of the memory recall statement so far: (primary, replica)."""
        counts = []
        for url in (self.url, self.read_url):
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                row = conn.execute(
                    "SELECT coalesce(sum(calls), 0)::int FROM pg_stat_statements WHERE query LIKE %s",
                    (RECALL_SQL,),
                ).fetchone()
            assert row is not None
            counts.append(int(row[0]))
        return counts[0], counts[1]

    def replay(self, *, paused: bool) -> None:
        with psycopg.connect(self.read_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT pg_wal_replay_pause()" if paused else "SELECT pg_wal_replay_resume()")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # the servers run as their own OS user: not under pytest's base directory
    with server_directory("pmem-test-replicated-") as root:
        made = Cluster(root)
        try:
            yield made
        finally:
            made.replica.stop()
            made.primary.stop()


async def open_store(cluster: Cluster, *, max_lag_s: float = 5.0) -> PostgresMemoryStore:
    return PostgresMemoryStore(
        cluster.url,
        HashingEmbedder(dim=DIM),
        read_urls=[cluster.read_url],
        read_max_lag_s=max_lag_s,
        database_role=DATABASE_ROLE,
    )


@pytest.fixture
async def store(cluster: Cluster) -> AsyncIterator[PostgresMemoryStore]:
    opened = await open_store(cluster)
    yield opened
    await opened.close()


def client(store: PostgresMemoryStore) -> httpx.AsyncClient:
    app = create_app(store=store, auth=AUTH)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://pmem.test", timeout=10)


def person(user: uuid.UUID) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_jwt(secret=SECRET, subject=user, role='user')}"}


async def remembered(store: PostgresMemoryStore, user: uuid.UUID, value: str) -> uuid.UUID:
    result = await store.writes.upsert(user_fact(user, "favourite drink", value, status="active"))
    return result.memory_id


async def test_recall_is_served_by_the_replica(cluster: Cluster, store: PostgresMemoryStore) -> None:
    user = uuid.uuid4()
    await remembered(store, user, "green tea with mint")
    _, key = await store.api_keys.create_api_key(f"chat-{uuid.uuid4().hex[:8]}")
    cluster.replica.wait_caught_up(DB)
    before = cluster.recall_calls()
    async with client(store) as http:
        for _ in range(10):
            response = await http.post(
                "/v1/recall",
                json={"user_id": str(user), "query": "what does the user drink", "limit": 5},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert response.status_code == 200, response.text
            assert [item["value"] for item in response.json()["items"]] == ["green tea with mint"]
    after = cluster.recall_calls()
    assert after[1] - before[1] >= 10  # the replica ran every memory recall
    assert after[0] == before[0]  # the primary none


async def test_a_person_sees_their_edit_while_the_replica_is_behind(cluster: Cluster) -> None:
    # a replica that stops replaying but stays within the (generous) lag bound: still used
    store = await open_store(cluster, max_lag_s=600)
    user = uuid.uuid4()
    memory_id = await remembered(store, user, "black coffee")
    _, key = await store.api_keys.create_api_key(f"chat-{uuid.uuid4().hex[:8]}")
    cluster.replica.wait_caught_up(DB)
    cluster.replay(paused=True)
    try:
        async with client(store) as http:
            edited = await http.patch(
                f"/v1/me/memories/{memory_id}", json={"value": "oat flat white"}, headers=person(user)
            )
            assert edited.status_code == 200, edited.text
            assert COOKIE in edited.cookies
            http.cookies.clear()  # first the rule in this process alone; the cookie below
            # the person's own page right after: the primary, the edit shows
            page = await http.get("/v1/me/memories", headers=person(user))
            assert [m["value"] for m in page.json()["items"]] == ["oat flat white"]
            # someone else's read meanwhile: the replica, still the old value (so the above is the rule
            # at work, not a replica that happened to be current)
            recalled = await http.post(
                "/v1/recall",
                json={"user_id": str(user), "query": "coffee", "limit": 5},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert [i["value"] for i in recalled.json()["items"]] == ["black coffee"]
        # another API process (nothing remembered in it): the browser's cookie sends the page to the primary
        async with client(store) as other_process:
            with_cookie = await other_process.get(
                "/v1/me/memories", headers={**person(user), "Cookie": f"{COOKIE}=1"}
            )
            without = await other_process.get("/v1/me/memories", headers=person(user))
        assert [m["value"] for m in with_cookie.json()["items"]] == ["oat flat white"]
        assert [m["value"] for m in without.json()["items"]] == ["black coffee"]
    finally:
        cluster.replay(paused=False)
        await store.close()


async def test_a_stopped_replica_falls_back_to_the_primary(
    cluster: Cluster, store: PostgresMemoryStore
) -> None:
    user = uuid.uuid4()
    await remembered(store, user, "rooibos")
    _, key = await store.api_keys.create_api_key(f"chat-{uuid.uuid4().hex[:8]}")
    cluster.replica.wait_caught_up(DB)
    body = {"user_id": str(user), "query": "what does the user drink", "limit": 5}
    headers = {"Authorization": f"Bearer {key}"}
    async with client(store) as http:
        for _ in range(3):  # the replica's connections are open and kept
            assert (await http.post("/v1/recall", json=body, headers=headers)).status_code == 200
        await asyncio.to_thread(cluster.replica.stop)
        try:
            statuses = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 3.0  # across a few lag checks (one a second at most)
            while loop.time() < deadline:
                response = await http.post("/v1/recall", json=body, headers=headers)
                statuses.append(response.status_code)
                assert [i["value"] for i in response.json()["items"]] == ["rooibos"]
                await asyncio.sleep(0.05)
            metrics = (await http.get("/metrics")).text
        finally:
            await asyncio.to_thread(cluster.replica.start)
    assert set(statuses) == {200} and len(statuses) >= 10
    fallbacks = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("pmem_read_fallbacks_total{")
    }
    assert fallbacks["error"] + fallbacks["down"] >= len(statuses) - 1
    assert 'pmem_read_replica_lag_seconds{replica="postgresql://postgres@127.0.0.1' in metrics


def test_read_replicas_are_refused_with_sqlite() -> None:
    from pydantic import ValidationError

    from config import Settings

    with pytest.raises(ValidationError, match="SQLite"):
        Settings(database_url="sqlite:///x.db", database_read_url="postgresql://r@replica/db")
    with pytest.raises(ValidationError, match="postgresql"):
        Settings(database_read_url="sqlite:///other.db")
    two = Settings(database_read_url="postgresql://a@r1/db, postgresql://a@r2/db")
    assert two.database_read_urls == ("postgresql://a@r1/db", "postgresql://a@r2/db")


async def test_open_store_refuses_replicas_for_sqlite(tmp_path: Path) -> None:
    from store.factory import StoreOptions
    from store.factory import open_store as open_any

    with pytest.raises(ValueError, match="SQLite has none"):
        await open_any(
            f"sqlite:///{tmp_path / 'x.db'}",
            HashingEmbedder(dim=DIM),
            StoreOptions(read_urls=["postgresql://a@r1/db"]),
            check_schema=False,
        )
