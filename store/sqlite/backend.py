"""`SqliteBackend`: the shared store code's `store.core.backend.Backend` on SQLite. There is no
vector index and no advisory lock: near duplicates and turns are ranked with numpy off the event
loop, and `BEGIN IMMEDIATE` already serialises every writer."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, Table, literal_column, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from store.core.base import checked_vector, owner_clause, team_clause
from store.core.rows import memory_columns, memory_from_row
from store.core.schema import Schema
from store.model import NIL_UUID, Memory, Neighbour, NewMemory, NewTurn, OwnerRef, TurnHit
from store.rules.recall import TermStats
from store.rules.turn_recall import fuse_turn_scores
from store.sqlite.turn_ranking import TurnWindow, window_scores, window_term_stats

# the recent turns of a (user, persona, team) context, prepared for ranking
TurnWindows = Callable[[uuid.UUID, uuid.UUID | None, uuid.UUID | None], Awaitable[TurnWindow]]


class SqliteBackend:
    """`Backend` on SQLite, given the store's reading connections and its turn windows."""

    def __init__(
        self,
        schema: Schema,
        *,
        reading: Callable[[], AbstractAsyncContextManager[AsyncConnection]],
        turn_windows: TurnWindows,
    ) -> None:
        self._schema = schema
        self._reading = reading
        self._turn_windows = turn_windows

    def nil(self) -> ColumnElement[Any]:
        """The nil uuid literal (uuids are text on SQLite)."""
        return literal_column(f"'{NIL_UUID}'")

    def insert(self, table: Table) -> Any:
        """A SQLite INSERT."""
        return sqlite.insert(table)

    async def lock_owners(self, conn: AsyncConnection, memories: Sequence[NewMemory]) -> None:
        """Nothing: the transaction's BEGIN IMMEDIATE already serialises every writer."""

    async def neighbours(
        self,
        conn: AsyncConnection,
        memories: Sequence[NewMemory],
        embeddings: Sequence[Sequence[float]],
        k: int,
    ) -> list[list[Neighbour]]:
        """Each owner's rows (in the memory's team context) read once, ranked with numpy."""
        m = self._schema.memories
        result: list[list[Neighbour]] = []
        cache: dict[tuple[Any, ...], tuple[list[Memory], Any]] = {}
        for memory, vector in zip(memories, embeddings, strict=True):
            owner = OwnerRef(scope=memory.scope, owner_id=memory.owner_id, user_id=memory.user_id)
            slot = (owner, memory.team_id)
            if slot not in cache:
                stmt = select(*memory_columns(m), m.c.embedding).where(
                    owner_clause(m, [owner]),
                    team_clause(m, memory.team_id),
                    m.c.status.in_(("active", "pending_review")),
                )
                rows = (await conn.execute(stmt)).all()
                cache[slot] = (
                    [memory_from_row(row) for row in rows],
                    [row._mapping["embedding"] for row in rows],
                )
            stored, matrix = cache[slot]
            scores = await asyncio.to_thread(cosines, matrix, vector)
            order = sorted(range(len(stored)), key=lambda j: -scores[j])[:k]
            near = {stored[j].id: Neighbour(memory=stored[j], similarity=scores[j]) for j in order}
            for j, other in enumerate(stored):
                if other.key == memory.key:
                    near[other.id] = Neighbour(memory=other, similarity=scores[j])
            result.append(sorted(near.values(), key=lambda n: -n.similarity))
        return result

    async def prompt_memories(
        self, owners: Sequence[OwnerRef], *, team_id: uuid.UUID | None, words: Sequence[str], limit: int
    ) -> list[Memory]:
        """The most recent memories (FTS5 ranks recall, not this bounded read)."""
        m = self._schema.memories
        stmt = (
            select(*memory_columns(m))
            .where(
                owner_clause(m, owners), team_clause(m, team_id), m.c.status.in_(("active", "pending_review"))
            )
            .order_by(m.c.updated_at.desc())
            .limit(limit)
        )
        async with self._reading() as conn:
            return [memory_from_row(row) for row in (await conn.execute(stmt)).all()]

    async def insert_turns(
        self, conn: AsyncConnection, event_id: uuid.UUID, turns: Sequence[NewTurn]
    ) -> None:
        """The turns in one multi-row INSERT."""
        t = self._schema.turns
        dim = self._schema.embedding_dim
        now = datetime.now(UTC)
        values = [
            {
                "id": uuid.uuid4(),
                "channel_id": turn.channel_id,
                "event_id": event_id,
                "user_id": turn.user_id,
                "persona_id": turn.persona_id,
                "team_id": turn.team_id,
                "role": turn.role,
                "text": turn.text,
                "at": turn.at,
                "position": turn.position,
                "speaker": turn.speaker,
                "search_text": turn.search_text,
                "embedding": None
                if turn.embedding is None
                else checked_vector(turn.embedding, dim, f"embedding of turn {turn.position}"),
                "created_at": now,
            }
            for turn in turns
        ]
        insert = (
            sqlite.insert(t)
            .values(values)
            .on_conflict_do_nothing(index_elements=[t.c.event_id, t.c.position])
        )
        await conn.execute(insert)

    async def turn_term_stats(
        self, user_id: uuid.UUID, persona_id: uuid.UUID | None, team_id: uuid.UUID | None, text: str
    ) -> TermStats:
        """The query words' shares of the context's cached window."""
        return window_term_stats(await self._turn_windows(user_id, persona_id, team_id), text)

    async def recall_turns(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        team_id: uuid.UUID | None,
        query: str,
        vector: Sequence[float],
        k: int,
        limit: int,
        *,
        text: str,
        stats: TermStats,
    ) -> list[TurnHit]:
        """The context's recent turns (the store's cached window) ranked with numpy and BM25."""
        window = await self._turn_windows(user_id, persona_id, team_id)
        scores = await asyncio.to_thread(window_scores, window, text, vector, k)
        return fuse_turn_scores(window.turns, scores, limit, query=query, now=datetime.now(UTC))


def cosines(matrix: Sequence[Any], vector: Sequence[float]) -> list[float]:
    """Cosine similarity of `vector` to each row (rows without an embedding: -inf)."""
    if not matrix:
        return []
    q = np.asarray(vector, dtype=np.float32)
    q_norm = float(np.linalg.norm(q)) or 1.0
    present = [i for i, row in enumerate(matrix) if row is not None]
    out = [float("-inf")] * len(matrix)
    if present:
        rows = np.asarray([matrix[i] for i in present], dtype=np.float32)
        norms = np.linalg.norm(rows, axis=1)
        norms[norms == 0] = 1.0
        sims = rows @ q / (norms * q_norm)
        for i, s in zip(present, sims.tolist(), strict=True):
            out[i] = float(s)
    return out
