"""The server side of the UI tests: a seeded Postgres, `pmem serve` as a real process, JWTs, and
SQL to check what the database holds after each action."""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import sys
import time
import uuid
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import jwt
import psycopg

from cli.embedded import free_port, stop_process
from store.team_scope import platform_scope
from tests.database_role import DATABASE_ROLE, clean_environment

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")
SECRET = "ui-test-secret-" + "x" * 32

TEAM_A = uuid.UUID("6d43c50b-3849-56d1-93dd-b57a6f867071")  # acme
TEAM_B = uuid.UUID("7e54d61c-4950-57e2-a4ee-c68b7f978182")
ALICE = uuid.UUID("f8be0f1e-b4cc-5d4a-8ee4-67d5bfa90dc8")
BOB = uuid.UUID("f62d7bcf-ae18-58e9-b4f4-df90d4af36d5")
CARLA = uuid.UUID("9f917bb1-dad5-5c74-8b90-7456ce88c940")
ADMIN = uuid.UUID("a0000000-0000-4000-8000-000000000001")
TEAM_ADMIN = uuid.UUID("a0000000-0000-4000-8000-000000000002")
CHEF = uuid.UUID("356511b6-2380-55cb-8587-4de33f3a7e61")
CHANNEL = uuid.UUID("13066c66-a322-5abd-bf9c-407bb5565fe3")
TRIP_CHANNEL = uuid.UUID("24177d77-b433-4bce-8cad-518cc6676af4")
SAID_AT = datetime(2026, 11, 28, 19, 5, tzinfo=UTC)
DIET_EVIDENCE = "user: I stopped eating meat two years ago"


def token(
    subject: uuid.UUID,
    role: str = "user",
    teams: tuple[uuid.UUID, ...] = (),
    *,
    ttl_s: float = 300,
    sign_in: bool = True,
) -> str:
    """A person's single-use sign-in token as the chat platform would mint it (HS256 with the
    server's secret); with `sign_in=False` their API token instead."""
    claims: dict[str, Any] = {
        "sub": str(subject),
        "exp": int(time.time() + ttl_s),
        "pmem_role": role,
        "pmem_teams": [str(t) for t in teams],
    }
    if sign_in:
        claims.update(pmem_use="sign_in", jti=uuid.uuid4().hex)
    return jwt.encode(claims, SECRET, algorithm="HS256")


def admin_token() -> str:
    return token(ADMIN, "admin")


def team_admin_token() -> str:
    return token(TEAM_ADMIN, "team_admin", (TEAM_A,))


def alice_token() -> str:
    return token(ALICE, "user", (TEAM_A,))


@dataclass(frozen=True, slots=True)
class Seeded:
    """Ids of the seeded memories, by a short name."""

    ids: dict[str, uuid.UUID]

    def __getitem__(self, name: str) -> uuid.UUID:
        return self.ids[name]


async def as_the_operator(work: Coroutine[Any, Any, T]) -> T:
    """`work` in the platform scope (a thread of its own starts in none): the tests' data is
    written as an operator would, across teams, through the product's role."""
    with platform_scope("test: seed the UI's data"):
        return await work


async def _seed(database_url: str) -> Seeded:
    from extraction.embeddings import HashingEmbedder
    from store.factory import StoreOptions, open_store
    from store.migrate import migrate_async
    from store.model import NewMemory
    from tests.factories import exchange

    await migrate_async(database_url, 384)
    store = await open_store(
        database_url, HashingEmbedder(dim=384), StoreOptions(database_role=DATABASE_ROLE)
    )
    ids: dict[str, uuid.UUID] = {}

    async def add(name: str, **fields: Any) -> None:
        fields.setdefault("source_channel_id", CHANNEL)
        fields.setdefault("team_id", TEAM_A)
        result = await store.writes.upsert(NewMemory(**fields), actor="worker")
        ids[name] = result.memory_id

    try:
        await add("colour", scope="user", owner_id=ALICE, user_id=None, key="favourite colour",
                  value="Likes blue", confidence=0.9, status="active")  # fmt: skip
        await add("language", scope="user", owner_id=ALICE, user_id=None, key="spoken language",
                  value="Speaks Portuguese", confidence=0.8, status="active")  # fmt: skip
        await add("city", scope="user", owner_id=ALICE, user_id=None, key="home city",
                  value="Lives in Lisbon", confidence=0.85)  # fmt: skip
        await add("job", scope="user", owner_id=ALICE, user_id=None, key="job title",
                  value="Works as a data engineer", confidence=0.6)  # fmt: skip
        await add("dish", scope="persona", owner_id=CHEF, user_id=None, key="signature dish",
                  value="Often suggests a quick Thai green curry", confidence=0.7)  # fmt: skip
        await add("diet", scope="persona_user", owner_id=CHEF, user_id=ALICE, key="diet",
                  value="Is vegetarian", confidence=0.95, evidence=DIET_EVIDENCE,
                  observed_at=SAID_AT)  # fmt: skip
        await add("pets", scope="user", owner_id=BOB, user_id=None, key="pets at home",
                  value="Has two cats", confidence=0.75)  # fmt: skip
        await add("hobby", scope="user", owner_id=CARLA, user_id=None, key="chess hobby",
                  value="Plays chess on Sundays", confidence=0.8, team_id=TEAM_B)  # fmt: skip
        # a proposed change to a reviewed memory: the worker saw a different value
        await add("colour", scope="user", owner_id=ALICE, user_id=None, key="favourite colour",
                  value="Likes green now", confidence=0.8)  # fmt: skip
        # remembered conversations: two of Alice's (one with the chef persona), one of Bob's
        for channel, user, persona, lines, at in (
            (CHANNEL, ALICE, CHEF, ["I stopped eating meat two years ago", "Noted: vegetarian recipes."],
             SAID_AT),
            (TRIP_CHANNEL, ALICE, None, ["Planning a trip to Porto in March", "Lovely in spring."],
             SAID_AT + timedelta(days=1)),
            (CHANNEL, BOB, None, ["My two cats hate the vet"], SAID_AT),
        ):  # fmt: skip
            turns = exchange(lines, channel=channel, user=user, persona=persona, team=TEAM_A, at=at)
            await store.writes.write_event(event_id=uuid.uuid4(), memories=[], turns=turns)
    finally:
        await store.close()
    return Seeded(ids)


def seed(database_url: str) -> Seeded:
    """Migrate and (re)seed the database: pending memories in every scope, two teams, a proposed
    change, two active memories; whatever an earlier test left is truncated first."""
    with psycopg.connect(database_url) as conn:
        tables = conn.execute("SELECT to_regclass('memories') IS NOT NULL").fetchone()
        if tables and tables[0]:
            conn.execute(
                "TRUNCATE memories, memory_revisions, memory_audit, memory_settings, processed_events,"
                " conversation_turns CASCADE"
            )
    # in a thread of its own: Playwright's sync API keeps an event loop running in this one
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(as_the_operator(_seed(database_url)))).result()


async def _add_pending(database_url: str, owner: uuid.UUID, count: int) -> None:
    from extraction.embeddings import HashingEmbedder
    from store.factory import StoreOptions, open_store
    from store.model import NewMemory

    store = await open_store(
        database_url, HashingEmbedder(dim=384), StoreOptions(database_role=DATABASE_ROLE)
    )
    try:
        for n in range(count):
            memory = NewMemory(scope="user", owner_id=owner, user_id=None, key=f"fact number {n}",
                               value=f"Fact {n}", confidence=0.5, team_id=TEAM_A)  # fmt: skip
            await store.writes.upsert(memory, actor="worker")
    finally:
        await store.close()


def add_pending(database_url: str, owner: uuid.UUID, count: int) -> None:
    """`count` more pending memories of `owner` (team A)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(lambda: asyncio.run(as_the_operator(_add_pending(database_url, owner, count)))).result()


@contextmanager
def serving(database_url: str) -> Iterator[str]:
    """`pmem serve` as a real process on a loopback port; yields its base URL."""
    port = free_port()
    env = clean_environment()
    env.update(
        PMEM_DATABASE_URL=database_url,
        PMEM_AUTH_JWT_SECRET=SECRET,
        PMEM_API_PORT=str(port),
        PMEM_EMBEDDING_PROVIDER="hashing",
        PMEM_LOG_LEVEL="WARNING",
    )
    logs = REPO / ".pytest_cache"
    logs.mkdir(exist_ok=True)
    log = logs / f"ui-serve-{port}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"pmem serve exited {process.returncode}: {log.read_text()[-2000:]}")
                try:
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pmem serve did not start: {log.read_text()[-2000:]}")
                time.sleep(0.1)
            yield base
        finally:
            stop_process(process, timeout_s=10)


def end_sessions_by_time(database_url: str) -> None:
    """Let every open web-UI session expire now (as the clock would after PMEM_UI_SESSION_S)."""
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE ui_sessions SET expires_at = now() - interval '1 second'")


def status_of(database_url: str, memory_id: uuid.UUID) -> str | None:
    """The memory's status in the database (None: the row is gone)."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT status FROM memories WHERE id = %s", (memory_id,)).fetchone()
    return None if row is None else str(row[0])


def value_of(database_url: str, memory_id: uuid.UUID) -> str | None:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT value FROM memories WHERE id = %s", (memory_id,)).fetchone()
    return None if row is None else str(row[0])


def pending_revisions(database_url: str, memory_id: uuid.UUID) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM memory_revisions WHERE memory_id = %s AND status = 'pending'", (memory_id,)
        ).fetchone()
    return int(row[0]) if row else 0


def audit_actors(database_url: str, memory_id: uuid.UUID) -> list[tuple[str, str]]:
    """(action, actor) of the memory's audit rows, oldest first."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT action, actor FROM memory_audit WHERE memory_id = %s ORDER BY id", (memory_id,)
        ).fetchall()
    return [(str(a), str(b)) for a, b in rows]


def turn_texts(database_url: str, user: uuid.UUID) -> list[str]:
    """The remembered turns of a user in the database, oldest first."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT text FROM conversation_turns WHERE user_id = %s ORDER BY at, position", (user,)
        ).fetchall()
    return [str(r[0]) for r in rows]
