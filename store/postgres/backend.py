"""`PgBackend`: the shared store code's `store.core.backend.Backend` on Postgres: advisory locks
per owner, the near-duplicate read in one statement (`store.postgres.neighbours_sql`), the prompt's
full-text ranking and turn recall in SQL, the reads sent on the driver (`PgConnections.fetch`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Table, literal_column
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from store.core.rows import memory_from_row, turn_from_row
from store.core.schema import Schema
from store.model import NIL_UUID, Memory, Neighbour, NewMemory, NewTurn, OwnerRef, Turn, TurnHit
from store.postgres.connections import PgConnections
from store.postgres.dialect import NIL_UUID_SQL, websearch_or_query
from store.postgres.neighbours_sql import (
    OWNER_LOCKS_SQL,
    OwnerKey,
    OwnerSizes,
    neighbours_from_rows,
    neighbours_statement,
    owner_count_statement,
    owner_key,
    owner_lock_names,
    prompt_memories_statement,
)
from store.postgres.params import float4_array
from store.postgres.turns_sql import turn_term_stats_sql, turn_window_sql, turns_insert_statement
from store.rules.recall import Bm25, TermStats, term_stats
from store.rules.terms import query_terms
from store.rules.turn_recall import CONTEXT_WORD_WEIGHT, TURN_STATS_SAMPLE, TURN_WINDOW, fuse_turn_scores


class PgBackend:
    """`Backend` on Postgres, over the store's connections and owner-size cache."""

    def __init__(self, connections: PgConnections, schema: Schema, owner_sizes: OwnerSizes) -> None:
        self._connections = connections
        self._schema = schema
        self._owner_sizes = owner_sizes

    def nil(self) -> ColumnElement[Any]:
        """The nil uuid literal."""
        return literal_column(NIL_UUID_SQL)

    def insert(self, table: Table) -> Any:
        """A Postgres INSERT."""
        return postgresql.insert(table)

    async def lock_owners(self, conn: AsyncConnection, memories: Sequence[NewMemory]) -> None:
        """The owners' transaction-scoped advisory locks, in a fixed order."""
        await conn.exec_driver_sql(OWNER_LOCKS_SQL, {"names": owner_lock_names(memories)})

    async def neighbours(
        self,
        conn: AsyncConnection,
        memories: Sequence[NewMemory],
        embeddings: Sequence[Sequence[float]],
        k: int,
    ) -> list[list[Neighbour]]:
        """The near-duplicate read in one statement (`neighbours_statement`), the owners' sizes
        from the cache or counted first."""
        if not memories:
            return []
        sizes = await self._owner_row_counts(conn, [owner_key(m) for m in memories])
        vectors = [float4_array(v) for v in embeddings]
        sql, params = neighbours_statement(memories, vectors, k, sizes, dim=self._schema.embedding_dim)
        rows = (await conn.exec_driver_sql(sql, params)).all()
        return neighbours_from_rows([row._mapping for row in rows], len(memories))

    async def _owner_row_counts(
        self, conn: AsyncConnection, owners: Sequence[OwnerKey]
    ) -> dict[OwnerKey, int]:
        """Each owner's row count (capped), from the cache or, for those it lacks, one statement
        for all of them."""
        known, missing = self._owner_sizes.lookup(owners)
        if missing:
            sql, params = owner_count_statement(missing)
            rows = (await conn.exec_driver_sql(sql, params)).all()
            counted = {missing[row.idx]: int(row.n) for row in rows}
            self._owner_sizes.remember(counted)
            known.update(counted)
        return known

    async def prompt_memories(
        self, owners: Sequence[OwnerRef], *, team_id: uuid.UUID | None, words: Sequence[str], limit: int
    ) -> list[Memory]:
        """The full-text matches first among each owner's most recent memories, then the most
        recent (`prompt_memories_statement`), on the driver: the worker reads these for every event."""
        sql, params = prompt_memories_statement(owners, team_id=team_id, words=words, limit=limit)
        return [memory_from_row(row) for row in await self._connections.fetch(sql, params)]

    async def insert_turns(
        self, conn: AsyncConnection, event_id: uuid.UUID, turns: Sequence[NewTurn]
    ) -> None:
        """One statement of fixed text for all of an event's turns (`turns_insert_statement`)."""
        sql, params = turns_insert_statement(
            self._schema.turns.name, event_id, turns, self._schema.embedding_dim
        )
        await conn.exec_driver_sql(sql, params)

    async def turn_term_stats(
        self, user_id: uuid.UUID, persona_id: uuid.UUID | None, team_id: uuid.UUID | None, text: str
    ) -> TermStats:
        """The query words' document frequencies among the context's window (one round trip)."""
        words = query_terms(text)
        if not words:
            return TermStats(documents=0, mean_length=0.0, idf={}, word_share={})
        params = {
            **_context_params(user_id, persona_id, team_id),
            # a message is stored at most once per participant's event: twice the sample holds it
            "window": 2 * TURN_STATS_SAMPLE,
            "sample": TURN_STATS_SAMPLE,
            "words": words,
        }
        rows = await self._connections.fetch(turn_term_stats_sql(), params)
        return term_stats([tuple(row.values()) for row in rows])

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
        """The context's recent turns ranked by vector distance and full text in one statement
        (`turn_window_sql`), fused in Python."""
        tq = websearch_or_query(text)
        full_text = tq is not None and bool(stats.idf)
        sql = turn_window_sql(dim=self._schema.embedding_dim, vector=True, text=full_text)
        params: dict[str, Any] = {
            **_context_params(user_id, persona_id, team_id),
            "window": TURN_WINDOW,
            "k": k,
            "qv": float4_array(vector),
        }
        if full_text:
            params.update(
                tq=tq,
                lexemes=list(stats.idf),
                idfs=list(stats.idf.values()),
                k1=_BM25.k1,
                b=_BM25.b,
                avglen=max(stats.mean_length, 1.0),
                context_weight=CONTEXT_WORD_WEIGHT,
            )
        turns: dict[uuid.UUID, Turn] = {}
        scores: dict[str, dict[uuid.UUID, float]] = {}
        for row in await self._connections.fetch(sql, params):
            turn = turn_from_row(row)
            turns[turn.id] = turn
            scores.setdefault(row["source"], {})[turn.id] = float(row["score"])
        return fuse_turn_scores(turns, scores, limit, query=query, now=datetime.now(UTC))


_BM25 = Bm25()


def _context_params(
    user_id: uuid.UUID, persona_id: uuid.UUID | None, team_id: uuid.UUID | None
) -> dict[str, Any]:
    """The turn context's statement parameters (`_CONTEXT_SQL`: nil for no persona or team)."""
    return {"user_id": user_id, "persona": persona_id or NIL_UUID, "team": team_id or NIL_UUID}
