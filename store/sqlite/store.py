"""`SqliteMemoryStore`: the same MemoryStore contract on SQLite (aiosqlite), for a
single process without Postgres.

Recall ranks exactly as on Postgres: the same query cues, the same score fusion with time and
conversation boosts, the same merging of a key across scopes (`store.rules.recall`, `store.rules.cues`). Full
text is SQLite's FTS5 (`porter unicode61` tokenizer, so "preferences" finds "prefers"; OR over the
query's informative words; `bm25()` scores, the key column weighing `ScoreFusion.key_weight`), in a
table `memories_fts` that triggers keep in step with `memories`. Vectors are scored with numpy off
the event loop: the caller's owners' embeddings are read once into a unit-row matrix, kept until
anything is written (this process's writes, or another connection's, seen through `PRAGMA
data_version`). Owner isolation is in the SQL WHERE clauses that read the rows, never a filter in
Python.

The tables are created on first use (`store.migrate` does the same), so `sqlite:///:memory:` works.
Writers are serialised by one pooled connection and `BEGIN IMMEDIATE`. SQLite's lower() folds ASCII
only.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import String, event, select, text, type_coerce
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool

from store.core.schema import build_schema
from store.core.store import CoreStore
from store.errors import translating_errors
from store.migrate import create_sqlite_schema
from store.model import Memory, MemorySettings, OwnerRef, RecallHit, RecallQuery
from store.protocols import Embedder
from store.rules.cues import informative_query
from store.rules.recall import (
    DEFAULT_WEIGHTS,
    ScoreFusion,
    candidate_count,
    embedding_queries,
    fuse,
    fuse_scores,
    mean_direction,
    normalize_key,
    query_cues,
    resolve_scopes,
    top_order,
)
from store.rules.terms import is_empty_query, query_terms
from store.rules.turn_recall import TURN_WINDOW
from store.rules.urls import to_sqlalchemy_url
from store.sqlite.backend import SqliteBackend
from store.sqlite.ranking import fts5_match, top_cosines, unit_rows
from store.sqlite.schema import SQLITE
from store.sqlite.turn_ranking import TurnWindow, turn_window

# FTS5 mirror of memories.key and memories.value, plus one `owner` token per active row naming its
# owner (`owner_token`), so a recall's MATCH reads only the caller's owners' posting lists. Its
# `memory_id` links back to memories.id (the rowid of a table without an INTEGER PRIMARY KEY may
# change on VACUUM, so it is not the link). The trailing 0 keeps the porter stemmer off the token.
_OWNER_TOKEN_SQL = (
    "CASE WHEN {t}.status = 'active' THEN "
    "(CASE {t}.scope WHEN 'user' THEN 'u' WHEN 'persona' THEN 'p' ELSE 'q' END) "
    "|| replace({t}.owner_id, '-', '') "
    "|| (CASE WHEN {t}.scope = 'persona_user' THEN replace(coalesce({t}.user_id, ''), '-', '') ELSE '' END) "
    "|| '0' ELSE '' END"
)
# the team of a row: `t0` for none, else `t<hex>0`
_TEAM_TOKEN_SQL = "'t' || replace(coalesce({t}.team_id, ''), '-', '') || '0'"
FTS_COLUMNS = ("memory_id", "owner", "team", "key", "value", "evidence")


def _fts_values(t: str) -> str:
    """The `FTS_COLUMNS` values of the memories row `t` (`new` in a trigger, an alias in a SELECT)."""
    return (
        f"{t}.id, {_OWNER_TOKEN_SQL.format(t=t)}, {_TEAM_TOKEN_SQL.format(t=t)}, "
        f"{t}.key, {t}.value, coalesce({t}.evidence, '')"
    )


_FTS_ROW = f"({', '.join(FTS_COLUMNS)}) VALUES ({_fts_values('new')})"
FTS_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5("
    "memory_id UNINDEXED, owner, team, key, value, evidence, tokenize = 'porter unicode61')",
    f"CREATE TRIGGER IF NOT EXISTS memories_fts_insert AFTER INSERT ON memories BEGIN "
    f"INSERT INTO memories_fts {_FTS_ROW}; END",
    "CREATE TRIGGER IF NOT EXISTS memories_fts_delete AFTER DELETE ON memories BEGIN "
    "DELETE FROM memories_fts WHERE memory_id = old.id; END",
    f"CREATE TRIGGER IF NOT EXISTS memories_fts_update AFTER UPDATE ON memories "
    f"BEGIN DELETE FROM memories_fts WHERE memory_id = old.id; INSERT INTO memories_fts {_FTS_ROW}; END",
)
FTS_BACKFILL = (
    f"INSERT INTO memories_fts ({', '.join(FTS_COLUMNS)}) SELECT {_fts_values('m')} FROM memories m "
    "WHERE NOT EXISTS (SELECT 1 FROM memories_fts f WHERE f.memory_id = m.id)"
)


# a query word found in what was said (the evidence) counts this much of one found in the value
# (Postgres: the evidence's lexemes carry weight B in the tsvector)
EVIDENCE_TEXT_WEIGHT = 0.5


def bm25_expression(key_weight: float) -> str:
    """FTS5 `bm25()` with its column weights: memory_id, owner and team carry no relevance, the key
    `key_weight` (`ScoreFusion.key_weight`), the value 1 and the evidence `EVIDENCE_TEXT_WEIGHT`."""
    return f"bm25(memories_fts, 0.0, 0.0, 0.0, {float(key_weight)!r}, 1.0, {EVIDENCE_TEXT_WEIGHT!r})"


def owner_token(owner: OwnerRef) -> str:
    """The `owner` token the triggers write for an active row of this owner (see _OWNER_TOKEN_SQL)."""
    prefix = {"user": "u", "persona": "p", "persona_user": "q"}[owner.scope]
    user = owner.user_id.hex if owner.scope == "persona_user" and owner.user_id is not None else ""
    return f"{prefix}{owner.owner_id.hex}{user}0"


def team_tokens(team_id: uuid.UUID | None) -> list[str]:
    """The `team` tokens visible in a team context: rows of no team, and of `team_id`."""
    return ["t0"] if team_id is None else ["t0", f"t{team_id.hex}0"]


def owner_match(owners: Sequence[OwnerRef], team_id: uuid.UUID | None, words_match: str) -> str:
    """An FTS5 MATCH expression: the owners' active rows (`owner` column) visible in the team context
    (`team` column) matching the words (in `key`, `value` or `evidence`)."""
    tokens = " OR ".join(f'"{owner_token(owner)}"' for owner in owners)
    teams = " OR ".join(f'"{token}"' for token in team_tokens(team_id))
    return f"owner : ({tokens}) AND team : ({teams}) AND {{key value evidence}} : ({words_match})"


@dataclass(frozen=True, kw_only=True, slots=True)
class OwnerIndex:
    """One set of owners' active memories held in memory for recall: the rows, their embeddings as
    unit rows of a matrix, their keys (for merging scopes) and word document frequencies (for the
    informative-words cue). Valid while `stamp` is."""

    stamp: tuple[int, int]
    memories: list[Memory]
    by_id: dict[uuid.UUID, Memory]
    # id -> the other ids of its normalised key (store.rules.keys.normalize_key), for keys shared by several
    same_key: dict[uuid.UUID, tuple[uuid.UUID, ...]]
    document_frequency: dict[str, int]  # lower-cased word -> memories containing it
    matrix: np.ndarray[Any, np.dtype[np.float32]]
    usable: np.ndarray[Any, np.dtype[np.bool_]]

    def word_share(self, words: Sequence[str]) -> dict[str, float]:
        """Fraction of the memories containing each word."""
        documents = len(self.memories)
        if not documents:
            return {}
        return {word: self.document_frequency.get(word, 0) / documents for word in words}

    def with_same_key(self, ids: set[uuid.UUID]) -> set[uuid.UUID]:
        """`ids` plus every memory sharing a key with one of them (the same key in other scopes)."""
        found = set(ids)
        for memory_id in ids:
            found.update(self.same_key.get(memory_id, ()))
        return found


def owner_index(
    stamp: tuple[int, int], memories: Sequence[Memory], embeddings: Sequence[str | None], dim: int
) -> OwnerIndex:
    """`OwnerIndex` of memories and their embeddings (JSON text); a missing or wrong-sized embedding
    is a zero row that is never returned."""
    matrix = np.zeros((len(memories), dim), dtype=np.float32)
    usable = np.zeros(len(memories), dtype=np.bool_)
    for index, raw in enumerate(embeddings):
        if raw is None:
            continue
        vector = json.loads(raw)
        if len(vector) == dim:
            matrix[index] = vector
            usable[index] = True
    by_key: dict[str, list[uuid.UUID]] = {}
    document_frequency: dict[str, int] = {}
    for memory in memories:
        by_key.setdefault(normalize_key(memory.key), []).append(memory.id)
        for word in set(query_terms(f"{memory.key} {memory.value}")):
            document_frequency[word] = document_frequency.get(word, 0) + 1
    return OwnerIndex(
        stamp=stamp,
        memories=list(memories),
        by_id={memory.id: memory for memory in memories},
        same_key={
            memory_id: tuple(other for other in group if other != memory_id)
            for group in by_key.values()
            if len(group) > 1
            for memory_id in group
        },
        document_frequency=document_frequency,
        matrix=unit_rows(matrix),
        usable=usable & (np.linalg.norm(matrix, axis=1) > 0.0),
    )


class SqliteMemoryStore(CoreStore):
    """MemoryStore on SQLite; `database_url` is `sqlite:///path.db` (or `:memory:`)."""

    def __init__(
        self,
        database_url: str,
        embedder: Embedder,
        *,
        weights: Mapping[str, float] = DEFAULT_WEIGHTS,
        fusion: ScoreFusion | None = None,
        busy_timeout_ms: int = 30_000,
        index_cache_owners: int = 64,
        settings_defaults: MemorySettings | None = None,
    ) -> None:
        # one connection: SQLite has one writer anyway, and `:memory:` must stay one database
        engine = create_async_engine(
            to_sqlalchemy_url(database_url),
            poolclass=AsyncAdaptedQueuePool,
            pool_size=1,
            max_overflow=0,
            pool_timeout=busy_timeout_ms / 1000,
            hide_parameters=True,  # errors never carry SQL parameters (memory values)
        )
        self._busy_timeout_ms = busy_timeout_ms
        event.listen(engine.sync_engine, "connect", self._configure_connection)
        event.listen(engine.sync_engine, "begin", self._begin_immediate)
        schema = build_schema(embedder.dim, SQLITE)
        super().__init__(
            engine=engine,
            schema=schema,
            backend=SqliteBackend(schema, reading=self._reading, turn_windows=self._turn_window),
            embedder=embedder,
            settings_defaults=settings_defaults,
        )
        self._weights = dict(weights)
        self._fusion = fusion or ScoreFusion()
        self._schema_ready = False
        self._schema_lock = asyncio.Lock()
        # owners' memories and embeddings (numpy), least recently used dropped beyond the bound; a write
        # through this store bumps `_generation`, another connection's commit `PRAGMA data_version`
        self._indexes: OrderedDict[tuple[tuple[OwnerRef, ...], uuid.UUID | None], OwnerIndex] = OrderedDict()
        # the same for conversation turns, per (user, persona, team) context
        self._turn_windows: OrderedDict[tuple[uuid.UUID, uuid.UUID | None, uuid.UUID | None], TurnWindow] = (
            OrderedDict()
        )
        self._index_cache_owners = index_cache_owners
        self._generation = 0

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
        """Create the tables if missing (SQLite needs no separate migration step); refuse another
        embedding model than the recorded one."""
        await self._ensure_schema()
        await self.check_embedding_identity()

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[AsyncConnection]:
        await self._ensure_schema()
        try:
            async with translating_errors(), self._engine.begin() as conn:
                yield conn
        finally:
            self._generation += 1

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        await self._ensure_schema()
        async with translating_errors(), self._engine.connect() as conn:
            yield conn

    async def _recall_memories(self, asked: RecallQuery) -> builtins.list[RecallHit]:
        """Ranked in numpy over the owners' memories held in memory (`OwnerIndex`) and FTS5."""
        owners = resolve_scopes(asked.user_id, asked.persona_id)
        k = candidate_count(asked.limit)
        branches: dict[str, Awaitable[dict[uuid.UUID, float]]] = {}
        async with self._reading() as conn:
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
        )

    async def _vector_scores(
        self, text: str, query_embedding: Sequence[float] | None, index: OwnerIndex, k: int
    ) -> dict[uuid.UUID, float]:
        """Cosine of the `k` memories nearest the query (its given embedding, else the embedder's)."""
        if query_embedding is not None:
            query_vector = self._check_dim(query_embedding, "query embedding")
        else:
            query_vector = await self._query_vector(text, index)
        found = await asyncio.to_thread(top_cosines, index.matrix, index.usable, query_vector, k)
        return {index.memories[row].id: cosine for row, cosine in found}

    async def _query_vector(self, text: str, index: OwnerIndex) -> builtins.list[float]:
        """The mean direction of the query's embedding texts (`store.rules.recall.embedding_queries`)."""
        texts = embedding_queries(text, index.word_share(query_terms(text)), self._fusion)
        vectors = await self.embed_queries(texts)
        return vectors[0] if len(vectors) == 1 else mean_direction(vectors)

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
        async with self._reading() as conn:
            stamp = await self._stamp(conn)
            cached = self._turn_windows.get(key)
            if cached is not None and cached.stamp == stamp:
                self._turn_windows.move_to_end(key)
                return cached
            window = await self._read_turn_window(conn, user_id, persona_id, team_id, stamp)
        self._turn_windows[key] = window
        while len(self._turn_windows) > self._index_cache_owners:
            self._turn_windows.popitem(last=False)
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
            select(*self._turn_columns(), t.c.search_text, type_coerce(t.c.embedding, String))
            .where(*self._in_turn_context(user_id, persona_id, team_id))
            .order_by(t.c.at.desc())
            .limit(TURN_WINDOW)
        )
        rows = (await conn.execute(stmt)).all()
        turns = [self._turn(row) for row in rows]
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
        cached = self._indexes.get(key)
        if cached is not None and cached.stamp == stamp:
            self._indexes.move_to_end(key)
            return cached
        m = self._schema.memories
        statement = select(*self._memory_columns, type_coerce(m.c.embedding, String)).where(
            m.c.status == "active", self._owner_clause(owners), self._team_clause(team_id)
        )
        rows = (await conn.execute(statement)).all()
        memories = [self._memory(row) for row in rows]
        index = await asyncio.to_thread(
            owner_index, stamp, memories, [row[-1] for row in rows], self._schema.embedding_dim
        )
        self._indexes[key] = index
        self._indexes.move_to_end(key)
        while len(self._indexes) > self._index_cache_owners:
            self._indexes.popitem(last=False)
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
