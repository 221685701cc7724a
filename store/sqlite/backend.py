"""`SqliteBackend`: the shared store code's `store.core.backend.Backend` on SQLite (aiosqlite), for
a single process without Postgres.

Recall ranks exactly as on Postgres: the same query cues, the same score fusion with time and
conversation boosts, the same merging of a key across scopes (`store.rules.recall`,
`store.rules.cues`). Full text is SQLite's FTS5 (`store.sqlite.fts`: `porter unicode61` tokenizer,
so "preferences" finds "prefers"; OR over the query's informative words; `bm25()` scores, the key
column weighing `ScoreFusion.key_weight`). Vectors are scored with numpy off the event loop
(`store.sqlite.ranking`, `store.sqlite.turn_ranking`): the caller's owners' embeddings (and a
context's recent turns) are read once into a unit-row matrix, kept until anything is written (this
process's writes, or another connection's, seen through `PRAGMA data_version`). Owner isolation is
in the SQL WHERE clauses that read the rows, never a filter in Python. There is no advisory lock:
`BEGIN IMMEDIATE` already serialises every writer.

The tables are created on first use (`store.migrate` does the same), so `sqlite:///:memory:` works.
Writers are serialised by one pooled connection and `BEGIN IMMEDIATE`. SQLite's lower() folds ASCII
only.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from sqlalchemy import ColumnElement, String, Table, event, literal_column, select, text, type_coerce
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool

from store.core.backend import TurnRecall
from store.core.base import checked_vector, owner_clause, query_vector, team_clause
from store.core.rows import memory_columns, memory_from_row, turn_columns, turn_from_row
from store.core.schema import Schema, build_schema
from store.core.turns import turn_context
from store.errors import translating_errors
from store.migrate import create_sqlite_schema
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
from store.protocols import Embedder
from store.rules.cues import informative_query
from store.rules.recall import (
    DEFAULT_WEIGHTS,
    ScoreFusion,
    candidate_count,
    fuse,
    fuse_scores,
    query_cues,
    resolve_scopes,
    top_order,
)
from store.rules.terms import is_empty_query, query_terms
from store.rules.turn_recall import TURN_WINDOW, fuse_turn_scores
from store.rules.urls import to_sqlalchemy_url
from store.sqlite.fts import FTS_BACKFILL, FTS_COLUMNS, FTS_DDL, bm25_expression, owner_match
from store.sqlite.ranking import OwnerIndex, StampedCache, cosines, fts5_match, owner_index, top_cosines
from store.sqlite.schema import SQLITE
from store.sqlite.turn_ranking import TurnWindow, turn_window, window_scores, window_term_stats

if TYPE_CHECKING:
    from store.core.backend import EventBatch

T = TypeVar("T")


class SqliteOptions(TypedDict, total=False):
    """How a SQLite store ranks and waits (`SqliteBackend`'s keyword arguments)."""

    weights: Mapping[str, float]
    fusion: ScoreFusion | None
    busy_timeout_ms: int
    index_cache_owners: int


class SqliteBackend:
    """`Backend` on SQLite: one engine of one pooled connection, the tables created on first use,
    and the owners' memories and contexts' turns held for ranking (module docstring)."""

    def __init__(
        self,
        database_url: str,
        embedder: Embedder,
        *,
        weights: Mapping[str, float] = DEFAULT_WEIGHTS,
        fusion: ScoreFusion | None = None,
        busy_timeout_ms: int = 30_000,
        index_cache_owners: int = 64,
    ) -> None:
        """`busy_timeout_ms`: how long a writer waits for another process's write lock;
        `index_cache_owners`: how many owners' (and contexts') rows are held for ranking."""
        # one connection: SQLite has one writer anyway, and `:memory:` must stay one database
        self._engine = create_async_engine(
            to_sqlalchemy_url(database_url),
            poolclass=AsyncAdaptedQueuePool,
            pool_size=1,
            max_overflow=0,
            pool_timeout=busy_timeout_ms / 1000,
            hide_parameters=True,  # errors never carry SQL parameters (memory values)
        )
        self._busy_timeout_ms = busy_timeout_ms
        event.listen(self._engine.sync_engine, "connect", self._configure_connection)
        event.listen(self._engine.sync_engine, "begin", self._begin_immediate)
        self._schema = build_schema(embedder.dim, SQLITE)
        self._embedder = embedder
        self._weights = dict(weights)
        self._fusion = fusion or ScoreFusion()
        self._schema_ready = False
        self._schema_lock = asyncio.Lock()
        # owners' memories and embeddings (numpy), least recently used dropped beyond the bound; a write
        # through this store bumps `_generation`, another connection's commit `PRAGMA data_version`
        self._indexes: StampedCache[tuple[tuple[OwnerRef, ...], uuid.UUID | None], OwnerIndex] = StampedCache(
            index_cache_owners
        )
        # the same for conversation turns, per (user, persona, team) context
        self._turn_windows: StampedCache[tuple[uuid.UUID, uuid.UUID | None, uuid.UUID | None], TurnWindow] = (
            StampedCache(index_cache_owners)
        )
        self._generation = 0

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy async engine."""
        return self._engine

    @property
    def schema(self) -> Schema:
        """The tables on SQLite for the embedder's dimension."""
        return self._schema

    def now(self) -> Any:
        """This process's clock (SQLite has one writer process at a time)."""
        return datetime.now(UTC)

    async def routed_read(self, read: Callable[[], Awaitable[T]]) -> T:
        """`read()` as it is: SQLite has no read replicas."""
        return await read()

    async def write_event(self, batch: EventBatch) -> EventWrite | None:
        """None: the shared write, one statement at a time, writes every event."""
        return None

    async def close(self) -> None:
        """Close the pooled connection."""
        await self._engine.dispose()

    def _configure_connection(self, dbapi_connection: Any, _record: Any) -> None:
        # let SQLAlchemy emit BEGIN itself (see _begin_immediate) instead of pysqlite's implicit one
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()

    @staticmethod
    def _begin_immediate(conn: Any) -> None:
        # take the write lock up front: a deferred transaction that later writes can fail with
        # SQLITE_BUSY when another process wrote in between
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    async def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        async with self._schema_lock:
            if not self._schema_ready:
                async with self._engine.begin() as conn:
                    await conn.run_sync(create_sqlite_schema, self._schema)
                    info = (await conn.exec_driver_sql("PRAGMA table_info(memories_fts)")).all()
                    columns = [str(row._mapping["name"]) for row in info]
                    if columns and columns != list(FTS_COLUMNS):
                        # a full-text table of another layout: rebuild it from memories
                        await conn.exec_driver_sql("DROP TABLE memories_fts")
                        for trigger in ("insert", "delete", "update"):
                            await conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS memories_fts_{trigger}")
                    for statement in FTS_DDL:
                        await conn.exec_driver_sql(statement)
                    # rows written before the full-text table existed (a database from an older version)
                    await conn.exec_driver_sql(FTS_BACKFILL)
                self._schema_ready = True

    async def check_schema(self) -> None:
        """Create the tables if missing: SQLite needs no separate migration step."""
        await self._ensure_schema()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        await self._ensure_schema()
        try:
            async with translating_errors(), self._engine.begin() as conn:
                yield conn
        finally:
            self._generation += 1

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[AsyncConnection]:
        await self._ensure_schema()
        async with translating_errors(), self._engine.connect() as conn:
            yield conn

    async def context_facts(
        self, asked: RecallQuery, *, standing: int, pinned: int, standing_budget: int | None
    ) -> ContextFacts | None:
        """None: the shared store reads a hint's facts apart (SQLite has no round trips to save)."""
        return None

    async def pinned_memories(
        self, user_id: uuid.UUID, persona_id: uuid.UUID | None, *, team_id: uuid.UUID | None, limit: int
    ) -> list[Memory] | None:
        """None: the shared store's read."""
        return None

    async def pending_changes(self, memory_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Revision] | None:
        """None: the shared store's read."""
        return None

    async def recall_memories(self, asked: RecallQuery) -> list[RecallHit]:
        """Ranked in numpy over the owners' memories held in memory (`OwnerIndex`) and FTS5."""
        owners = resolve_scopes(asked.user_id, asked.persona_id)
        k = candidate_count(asked.limit)
        branches: dict[str, Awaitable[dict[uuid.UUID, float]]] = {}
        async with self.reading() as conn:
            index = await self._owner_index(conn, owners, asked.team_id)
            if is_empty_query(asked.text):
                top = [m.id for m in top_order(index.memories)[:k]]
                rows = [index.by_id[mid] for mid in index.with_same_key(set(top))]
                return fuse(rows, {"top": top}, limit=asked.limit, weights=self._weights)
            cues = query_cues(asked.text, now=datetime.now(UTC))
            # FTS5 clamps the idf of a word in more than half of the rows to ~0: beside rarer words
            # it only adds noise that score normalisation would blow up, so it is not matched
            words = query_terms(cues.text)
            match = fts5_match(informative_query(" ".join(words), index.word_share(words), max_share=0.5))
            if asked.retriever in ("hybrid", "keyword") and match is not None:
                branches["text"] = self._text_scores(conn, owners, asked.team_id, match, k)
            if asked.retriever in ("hybrid", "vector"):
                branches["vector"] = self._vector_scores(cues.text, asked.query_embedding, index, k)
            # both branches wait on threads (SQLite's, numpy's) or the embedder: run them side by side,
            # and let both finish before the connection is returned, even when one fails
            results = await asyncio.gather(*branches.values(), return_exceptions=True)
        failed = [result for result in results if isinstance(result, BaseException)]
        if failed:
            raise failed[0]
        scores = {
            name: branch
            for name, branch in zip(branches, results, strict=True)
            if isinstance(branch, dict) and branch
        }
        wanted = {mid for branch in scores.values() for mid in branch if mid in index.by_id}
        rows = [index.by_id[mid] for mid in index.with_same_key(wanted)]
        return fuse_scores(
            rows,
            scores,
            limit=asked.limit,
            fusion=self._fusion,
            time_window=cues.time_window,
            when=cues.when,
            personal=cues.personal,
        )

    async def _vector_scores(
        self, text: str, query_embedding: Sequence[float] | None, index: OwnerIndex, k: int
    ) -> dict[uuid.UUID, float]:
        """Cosine of the `k` memories nearest the query (its given embedding, else the embedder's)."""
        if query_embedding is not None:
            vector = checked_vector(query_embedding, self._schema.embedding_dim, "query embedding")
        else:
            vector = await query_vector(
                self._embedder,
                text,
                index.word_share(query_terms(text)),
                self._fusion,
                self._schema.embedding_dim,
            )
        found = await asyncio.to_thread(top_cosines, index.matrix, index.usable, vector, k)
        return {index.memories[row].id: cosine for row, cosine in found}

    async def _stamp(self, conn: AsyncConnection) -> tuple[int, int]:
        """Changes since the owners' rows were read: this store's writes and other connections'."""
        version = (await conn.exec_driver_sql("PRAGMA data_version")).scalar_one()
        return self._generation, int(version)

    async def _turn_window(
        self, user_id: uuid.UUID, persona_id: uuid.UUID | None, team_id: uuid.UUID | None
    ) -> TurnWindow:
        """A context's recent turns prepared for ranking, read once and kept until anything is
        written (as the owners' memories are)."""
        key = (user_id, persona_id, team_id)
        async with self.reading() as conn:
            stamp = await self._stamp(conn)
            cached = self._turn_windows.get(key, stamp)
            if cached is not None:
                return cached
            window = await self._read_turn_window(conn, user_id, persona_id, team_id, stamp)
        self._turn_windows.put(key, window)
        return window

    async def _read_turn_window(
        self,
        conn: AsyncConnection,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        team_id: uuid.UUID | None,
        stamp: tuple[int, int],
    ) -> TurnWindow:
        """The context's `TURN_WINDOW` most recent turns, with their surrounding words and
        embeddings, prepared for ranking off the event loop."""
        t = self._schema.turns
        stmt = (
            select(*turn_columns(t), t.c.search_text, type_coerce(t.c.embedding, String))
            .where(*turn_context(t, self.nil(), user_id, persona_id, team_id))
            .order_by(t.c.at.desc())
            .limit(TURN_WINDOW)
        )
        rows = (await conn.execute(stmt)).all()
        turns = [turn_from_row(row) for row in rows]
        return await asyncio.to_thread(
            turn_window,
            turns,
            [row[-1] for row in rows],
            self._schema.embedding_dim,
            stamp,
            [row[-2] for row in rows],
        )

    async def _owner_index(
        self, conn: AsyncConnection, owners: Sequence[OwnerRef], team_id: uuid.UUID | None
    ) -> OwnerIndex:
        """The owners' active memories visible in the team context, and their embeddings, read once
        and kept until anything is written."""
        key = (tuple(owners), team_id)
        stamp = await self._stamp(conn)
        cached = self._indexes.get(key, stamp)
        if cached is not None:
            return cached
        m = self._schema.memories
        statement = select(*memory_columns(m), type_coerce(m.c.embedding, String)).where(
            m.c.status == "active", owner_clause(m, owners), team_clause(m, team_id)
        )
        rows = (await conn.execute(statement)).all()
        memories = [memory_from_row(row) for row in rows]
        index = await asyncio.to_thread(
            owner_index, stamp, memories, [row[-1] for row in rows], self._schema.embedding_dim
        )
        self._indexes.put(key, index)
        return index

    async def _text_scores(
        self,
        conn: AsyncConnection,
        owners: Sequence[OwnerRef],
        team_id: uuid.UUID | None,
        match: str,
        k: int,
    ) -> dict[uuid.UUID, float]:
        """FTS5 BM25 (higher is better) of the owners' active memories visible in the team context
        matching any query word."""
        bm25 = bm25_expression(self._fusion.key_weight)
        statement = text(
            f"SELECT memory_id, -{bm25} FROM memories_fts WHERE memories_fts MATCH :match "
            # ties by rowid: reading each match's memory_id for the tie-break cost a third of the query
            f"ORDER BY {bm25}, rowid LIMIT :k"
        )
        rows = (await conn.execute(statement, {"match": owner_match(owners, team_id, match), "k": k})).all()
        return {uuid.UUID(str(row[0])): float(row[1]) for row in rows}

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
        async with self.reading() as conn:
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

    async def recall_turns(self, asked: TurnRecall) -> list[TurnHit]:
        """The context's recent turns (the store's cached window) ranked with numpy and BM25, by
        the query vector the words' shares of the window make (`TurnRecall.focus`)."""
        window = await self._turn_window(asked.user_id, asked.persona_id, asked.team_id)
        vector = asked.vector
        if asked.focus is not None:
            focused = await asked.focus(window_term_stats(window, asked.text).word_share)
            vector = vector if focused is None else focused
        scores = await asyncio.to_thread(window_scores, window, asked.text, vector, asked.k)
        return fuse_turn_scores(window.turns, scores, asked.limit, query=asked.query, now=datetime.now(UTC))
