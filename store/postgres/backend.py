"""`PgBackend`: the shared store code's `store.core.backend.Backend` on Postgres, composed of parts
that each own one job:

- `PgConnections` (`store.postgres.connections`): the engines and the reused driver connections;
  the server's clock for timestamps; a committed transaction makes the caller's next reads need
  the primary (`store.read_scope`);
- `ReadReplicas` (`store.postgres.replicas`): where a read a replica may serve runs (`routed_read`);
- `PgEventWriter` (`store.postgres.event_write`): the worker's pipelined write of an event;
- `PgRecall` (`store.postgres.recall`): memory recall in one SQL statement;
- here: advisory locks per owner, the near-duplicate read in one statement
  (`store.postgres.neighbours_sql`), the prompt's full-text ranking and turn recall in SQL
  (`store.postgres.turns_sql`), the reads sent on the driver (`PgConnections.fetch`).

Reads on replicas: the store's reads marked `store.core.base.replica_read` (recall of memories and
turns, listing a person's memories and conversations, the export and the review queue) run on a
healthy replica, unless the caller's `store.read_scope.ReadScope` asks for the primary (it needs its
own write) or no replica is fit (then the primary; `ReadReplicas` counts why). A read that fails on
a replica for want of a connection (or a recovery conflict) runs again on the primary. Everything
else, every write and the schema and embedding-model checks, runs on the primary.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Table, func, literal_column
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from store.core.backend import EventBatch, TurnRecall
from store.core.rows import memory_from_row, revision_from_row
from store.core.schema import Schema
from store.errors import StoreConflict, StoreUnavailable, translating_errors
from store.migrate import (
    EmbeddingDimensionMismatch,
    SchemaError,
    current_revision,
    existing_embedding_dim,
    head_revision,
)
from store.model import (
    NIL_UUID,
    ContextFacts,
    EventWrite,
    Memory,
    Neighbour,
    NewMemory,
    NewTurn,
    OwnerRef,
    RecallHit,
    RecallQuery,
    Revision,
    TurnHit,
)
from store.postgres.connections import PgConnections, reads_on, reads_routed
from store.postgres.dialect import NIL_UUID_SQL, websearch_or_query
from store.postgres.event_write import PgEventWriter
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
from store.postgres.recall import PgRecall
from store.postgres.recall_sql import PENDING_CHANGES_SQL, pinned_sql
from store.postgres.replicas import ReadReplicas
from store.postgres.turns_sql import turn_recall_sql, turn_vector_sql, turns_insert_statement, window_rows
from store.read_scope import note_write, reads_need_primary
from store.rules.recall import Bm25, resolve_scopes
from store.rules.terms import query_terms
from store.rules.turn_recall import CONTEXT_WORD_WEIGHT, TURN_STATS_SAMPLE, TURN_WINDOW, fuse_turn_scores

T = TypeVar("T")


class PgBackend:
    """`Backend` on Postgres, over the store's connections, read replicas, event writer, recall and
    owner-size cache (module docstring)."""

    def __init__(
        self,
        connections: PgConnections,
        schema: Schema,
        *,
        owner_sizes: OwnerSizes,
        recall: PgRecall,
        replicas: ReadReplicas | None = None,
    ) -> None:
        self._connections = connections
        self._schema = schema
        self._owner_sizes = owner_sizes
        self._recall = recall
        self._replicas = replicas
        # the owners' sizes choose the near-duplicate read's shape, for this writer and the shared one alike
        self._event_writer = PgEventWriter(connections, schema, owner_sizes)

    @property
    def connections(self) -> PgConnections:
        """The primary's connections."""
        return self._connections

    @property
    def replicas(self) -> ReadReplicas | None:
        """The read replicas (None: every read on the primary)."""
        return self._replicas

    @property
    def recall(self) -> PgRecall:
        """Memory recall in SQL (its statement's EXPLAIN and session settings too)."""
        return self._recall

    def now(self) -> Any:
        """The server's clock, so timestamps agree across worker hosts."""
        return func.now()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """A transaction on the primary in the running task's team scope (`store.team_scope`);
        once committed, the caller's next reads need the primary
        (`store.read_scope`)."""
        async with translating_errors(), self._connections.engine.begin() as conn:
            await self._connections.begin_scoped(conn)
            yield conn
        note_write()

    def reading(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A reading connection (`PgConnections.reading`: a replica's inside `routed_read`)."""
        return self._connections.reading()

    async def routed_read(self, read: Callable[[], Awaitable[T]]) -> T:
        """`read()` on a replica when one is fit and the caller's scope allows it, else on the
        primary; once more on the primary when the replica fails it (module docstring)."""
        replicas = self._replicas
        if replicas is None or reads_routed() or reads_need_primary():
            return await read()
        replica = await replicas.pick()
        if replica is None:
            return await read()
        try:
            with reads_on(replica.connections):
                return await read()
        except (StoreUnavailable, StoreConflict) as exc:
            replicas.failed(replica, exc, down=isinstance(exc, StoreUnavailable))
        return await read()

    async def recall_memories(self, asked: RecallQuery) -> list[RecallHit]:
        """Ranked in one SQL statement (`PgRecall.recall`)."""
        return await self._recall.recall(asked)

    async def write_event(self, batch: EventBatch) -> EventWrite | None:
        """The pipelined write (`PgEventWriter`) for the events it takes (the worker's, deduplicated
        pending memories); None for the rest."""
        dedup = batch.dedup
        if dedup is not None and self._event_writer.takes(batch.memories, dedup):
            return await self._event_writer.write(batch, dedup)
        return None

    async def check_schema(self) -> None:
        """Raise `SchemaError` unless the database is migrated to this version and dimension."""

        def inspect(sync_conn: Connection) -> tuple[str | None, int | None]:
            """(alembic revision, embedding dimension) of the database."""
            return current_revision(sync_conn), existing_embedding_dim(sync_conn)

        async with translating_errors(), self._connections.engine.connect() as conn:
            revision, dim = await conn.run_sync(inspect)
        if revision is None or dim is None:
            raise SchemaError(
                "the database has no persona-memory schema yet: run `pmem migrate` "
                "(it reads PMEM_DATABASE_URL and PMEM_EMBEDDING_DIM)"
            )
        if dim != self._schema.embedding_dim:
            raise EmbeddingDimensionMismatch(existing=dim, configured=self._schema.embedding_dim)
        head = head_revision()
        if revision != head:
            raise SchemaError(
                f"the database schema is at revision {revision} but this version of persona-memory "
                f"needs {head}: run `pmem migrate`"
            )

    async def close(self) -> None:
        """Close the kept connections, then the pool (the replicas' too)."""
        if self._replicas is not None:
            await self._replicas.close()
        await self._connections.close()

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
        rows = await self._connections.fetch(sql, params, one_plan=True)
        return [memory_from_row(row) for row in rows]

    async def context_facts(
        self, asked: RecallQuery, *, standing: int, pinned: int, standing_budget: int | None
    ) -> ContextFacts:
        """A hint's facts of the context in the recall's own statement (`PgRecall.context_facts`):
        the standing and pinned facts and the open proposals cost no read of their own."""
        return await self.recall.context_facts(
            asked, standing=standing, pinned=pinned, standing_budget=standing_budget
        )

    async def pinned_memories(
        self, user_id: uuid.UUID, persona_id: uuid.UUID | None, *, team_id: uuid.UUID | None, limit: int
    ) -> list[Memory]:
        """The active pinned memories a recall of this user (and persona) in this team context
        reads (`pinned_sql`), on the driver: every hint reads them."""
        sql = pinned_sql(resolve_scopes(user_id, persona_id))
        params = {"user_id": user_id, "persona_id": persona_id, "team_id": team_id, "limit": limit}
        return [memory_from_row(row) for row in await self._connections.fetch(sql, params)]

    async def pending_changes(self, memory_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Revision]:
        """The open proposal of each of these memories that has one (`PENDING_CHANGES_SQL`), on the
        driver: every recall and hint reads them."""
        rows = await self._connections.fetch(PENDING_CHANGES_SQL, {"ids": list(memory_ids)})
        return {revision.memory_id: revision for revision in map(revision_from_row, rows)}

    async def insert_turns(
        self, conn: AsyncConnection, event_id: uuid.UUID, turns: Sequence[NewTurn]
    ) -> None:
        """One statement of fixed text for all of an event's turns (`turns_insert_statement`)."""
        sql, params = turns_insert_statement(
            self._schema.turns.name, event_id, turns, self._schema.embedding_dim
        )
        await conn.exec_driver_sql(sql, params)

    async def recall_turns(self, asked: TurnRecall) -> list[TurnHit]:
        """The context's recent turns ranked by vector distance and full text, with the query words'
        shares of them, in one statement (`turn_recall_sql`); the vector ranking once more
        (`turn_vector_sql`) when those shares change the query vector (`TurnRecall.focus`); fused
        in Python."""
        tq = websearch_or_query(asked.text)
        dim = self._schema.embedding_dim
        params: dict[str, Any] = {
            **_context_params(asked.user_id, asked.persona_id, asked.team_id),
            "window": TURN_WINDOW,
            "sample": TURN_STATS_SAMPLE,
            "words": query_terms(asked.text),
            "k": asked.k,
            "qv": float4_array(asked.vector),
        }
        if tq is not None:
            params.update(tq=tq, k1=_BM25.k1, b=_BM25.b, context_weight=CONTEXT_WORD_WEIGHT)
        sql = turn_recall_sql(dim=dim, text=tq is not None)
        found = window_rows(await self._connections.fetch(sql, params, one_plan=True))
        focused = None if asked.focus is None else await asked.focus(found.word_share)
        if focused is not None:
            context = {name: params[name] for name in ("user_id", "persona", "team", "window", "k")}
            again = await self._connections.fetch(
                turn_vector_sql(dim=dim),
                {**context, "qv": float4_array(focused)},
                one_plan=True,
            )
            found = found.with_vector_ranking(window_rows(again))
        return fuse_turn_scores(
            found.turns, found.scores, asked.limit, query=asked.query, now=datetime.now(UTC)
        )


_BM25 = Bm25()


def _context_params(
    user_id: uuid.UUID, persona_id: uuid.UUID | None, team_id: uuid.UUID | None
) -> dict[str, Any]:
    """The turn context's statement parameters (`_CONTEXT_SQL`: nil for no persona or team)."""
    return {"user_id": user_id, "persona": persona_id or NIL_UUID, "team": team_id or NIL_UUID}
