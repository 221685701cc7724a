"""Helpers for the worker's end-to-end tests: the session's real nats-server and Postgres, a fake
OpenAI-compatible server per test, unique stream/subject/durable names per test, and helpers to
publish events, read the DLQ and query the tables."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import nats
import psycopg
from nats.js.api import PubAck

from config import Settings, load_settings
from extraction.errors import RetryPolicy
from testkit.fake_openai import FakeOpenAI
from tests.database_role import DATABASE_ROLE
from worker.app import Worker, build_worker
from worker.events import DeadLetter, MemoryExtracted
from worker.streams import ensure_stream

FAST_RETRY = RetryPolicy(max_retries=1, wait_initial_s=0.01, wait_max_s=0.02, retry_after_cap_s=0.5)


def conversation(
    *lines: str,
    user_id: uuid.UUID | None = None,
    persona_id: uuid.UUID | None = None,
    team_id: uuid.UUID | None = None,
    event_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    """A valid conversation.ended event; `lines` alternate user/assistant, starting with the user."""
    return {
        "event_id": str(event_id or uuid.uuid4()),
        "type": "conversation.ended",
        "occurred_at": "2026-11-29T19:00:00Z",
        "team_id": str(team_id) if team_id else None,
        "channel_id": str(uuid.uuid4()),
        "user_id": str(user_id or uuid.uuid4()),
        "persona_id": str(persona_id) if persona_id else None,
        "messages": [
            {"role": "user" if i % 2 == 0 else "assistant", "content": line} for i, line in enumerate(lines)
        ],
    }


@dataclass(frozen=True, kw_only=True)
class DlqEntry:
    """One message read back from the DLQ subject."""

    headers: dict[str, str]
    record: DeadLetter


@dataclass(kw_only=True)
class Harness:
    """Names, settings and connections of one test."""

    base: dict[str, Any]
    database_url: str
    fake: FakeOpenAI
    nc: nats.NATS

    @classmethod
    def on(cls, *, nats_url: str, database_url: str, fake: FakeOpenAI, nc: nats.NATS) -> Harness:
        """A harness for workers on this NATS server, this database and this fake LLM."""
        base = base_settings(nats_url=nats_url, database_url=database_url, llm_url=fake.base_url)
        return cls(base=base, database_url=database_url, fake=fake, nc=nc)

    def settings(self, **overrides: Any) -> Settings:
        """Settings for a worker of this test (overrides win)."""
        return load_settings(**{**self.base, **overrides})

    def env(self, **overrides: Any) -> dict[str, str]:
        """The same settings as PMEM_* environment variables (for a worker subprocess)."""
        values = {**self.base, **overrides}
        return {
            f"PMEM_{k.upper()}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in values.items()
        }

    @contextlib.asynccontextmanager
    async def worker(self, **overrides: Any) -> AsyncIterator[Worker]:
        """A started in-process worker; closed (gracefully) at the end of the block."""
        worker = await build_worker(self.settings(**overrides), retry=FAST_RETRY)
        await worker.start()
        try:
            yield worker
        finally:
            await worker.close()

    async def ensure_streams(self) -> None:
        """Create the test's streams as the worker would (to publish before any worker started)."""
        b = self.base
        await ensure_stream(self.nc.jsm(), b["stream"], [b["subject"]], create=True)
        await ensure_stream(
            self.nc.jsm(), b["output_stream"], [b["dlq_subject"], b["extracted_subject"]], create=True
        )

    async def publish(self, event: dict[str, Any] | bytes, *, msg_id: str | None = "auto") -> PubAck:
        """Publish on the test's subject (JetStream ack); msg_id "auto" = the event id."""
        body = event if isinstance(event, bytes) else json.dumps(event).encode()
        if msg_id == "auto":
            msg_id = event["event_id"] if isinstance(event, dict) else None
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        return await self.nc.jetstream().publish(self.base["subject"], body, headers=headers, timeout=10)

    async def drops_processing(self, event: dict[str, Any], reason: str) -> float | None:
        """Publish `event` and run a worker until it is processed; the candidates the worker
        dropped for `reason` (None: none ever)."""
        async with self.worker() as worker:
            await self.publish(event)

            async def processed() -> bool:
                return await self.processed() >= 1

            await wait_for(processed, what="the event to be processed")
            return worker.metrics.registry.get_sample_value(
                "pmem_candidates_dropped_total", {"reason": reason}
            )

    async def memories_of(self, owner: uuid.UUID) -> dict[str, str]:
        """The owner's stored memories, key → value."""
        return {
            r[0]: r[1] for r in await self.sql("SELECT key, value FROM memories WHERE owner_id = %s", owner)
        }

    async def _stream_messages(self, subject: str) -> list[Any]:
        jsm = self.nc.jsm()
        try:
            info = await jsm.stream_info(self.base["output_stream"])
        except nats.js.errors.NotFoundError:
            return []
        found: list[Any] = []
        if not info.state.messages:
            return found
        for seq in range(max(1, info.state.first_seq), info.state.last_seq + 1):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                msg = await jsm.get_msg(self.base["output_stream"], seq)
                if msg.subject == subject:
                    found.append(msg)
        return found

    async def dlq(self) -> list[DlqEntry]:
        """Everything on the test's DLQ subject, oldest first."""
        return [
            DlqEntry(headers=dict(m.headers or {}), record=DeadLetter.model_validate_json(m.data))
            for m in await self._stream_messages(self.base["dlq_subject"])
        ]

    async def extracted(self) -> list[MemoryExtracted]:
        """Everything on the test's memory.extracted subject."""
        return [
            MemoryExtracted.model_validate_json(m.data)
            for m in await self._stream_messages(self.base["extracted_subject"])
        ]

    async def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Rows of a query on the test database."""
        async with await psycopg.AsyncConnection.connect(self.database_url, autocommit=True) as conn:
            cursor = await conn.execute(query, params)
            return list(await cursor.fetchall())

    async def count(self, query: str, *params: Any) -> int:
        """The single integer a COUNT query returns."""
        rows = await self.sql(query, *params)
        return int(rows[0][0])

    async def processed(self) -> int:
        """Rows in processed_events."""
        return await self.count("SELECT count(*) FROM processed_events")

    async def consumer_state(self) -> tuple[int, int]:
        """(num_pending, num_ack_pending) of the test's durable consumer."""
        info = await self.nc.jsm().consumer_info(self.base["stream"], self.base["durable"])
        return info.num_pending or 0, info.num_ack_pending or 0


async def wait_for(
    predicate: Callable[[], Awaitable[bool]], *, within: float = 20.0, what: str = "condition"
) -> None:
    """Poll `predicate` until true; fail the test naming `what` after `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {within:.0f}s waiting for {what}")


def unique_names() -> dict[str, str]:
    """Stream, subjects and durable unique to one test on the shared nats-server."""
    tag = uuid.uuid4().hex[:10]
    return {
        "subject": f"t{tag}.conversation.ended",
        "stream": f"T{tag}_CHAT",
        "output_stream": f"T{tag}_PMEM",
        "dlq_subject": f"t{tag}.pmem.dlq.conversation.ended",
        "extracted_subject": f"t{tag}.memory.extracted",
        "durable": f"w{tag}",
    }


def base_settings(*, nats_url: str, database_url: str, llm_url: str) -> dict[str, Any]:
    """Small delays and limits so failures and retries play out in seconds."""
    return {
        **unique_names(),
        "nats_url": nats_url,
        "database_url": database_url,
        "database_role": DATABASE_ROLE,
        "concurrency": 4,
        "max_deliver": 3,
        "ack_wait_s": 5.0,
        "retry_delay_s": 0.05,
        "max_retry_delay_s": 2.0,
        "db_outage_timeout_s": 30.0,
        "shutdown_timeout_s": 10.0,
        "extractor": "llm",
        "llm_base_url": llm_url,
        "llm_api_key": "test-key",
        "llm_model": "fake-model",
        "llm_timeout_s": 5.0,
        "llm_max_retries": 1,
        "embedding_provider": "openai",
        "embedding_model": "fake-embedding",
        "embedding_dim": 384,
        "http_port": 0,
    }


async def http_get(port: int, path: str) -> tuple[int, str]:
    """The status and body of a plain GET of `path` on a loopback port (the worker's health server)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def memory_values(rows: Sequence[tuple[Any, ...]]) -> list[str]:
    """Flatten query rows to strings (for secret checks)."""
    return [str(value) for row in rows for value in row if value is not None]
