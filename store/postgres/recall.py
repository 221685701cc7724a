"""`PgRecall`: memory recall on Postgres, two round trips through the store's `PgConnections`.

The first reads the query words' document frequencies among the owners' active memories
(`term_stats_sql`); the second is one statement with a vector branch (cosine nearest neighbours)
and a full-text branch (BM25 over the query's lexemes, OR semantics, idf from the first trip, a
lexeme found only in the key weighing `ScoreFusion.key_weight`), each limited to the caller's
owners and `active` rows in its WHERE clause, plus the same-key rows of other scopes so overrides
can be merged (`store.postgres.recall_sql`). The shared pure code then fuses the scores with the
query's cues (`store.rules.recall.fuse_scores`, `store.rules.cues`), exactly as the SQLite store does.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from store.core.base import checked_vector, query_vector
from store.core.rows import REVISION_COLUMNS, memory_from_row, revision_from_row
from store.model import ContextFacts, Memory, OwnerRef, RecallHit, RecallQuery, Revision
from store.postgres.connections import PgConnections
from store.postgres.dialect import websearch_or_query
from store.postgres.params import float4_array
from store.postgres.recall_sql import PENDING_CHANGES_SQL, owned_first_fits, recall_sql, term_stats_sql
from store.protocols import Embedder
from store.rules.cues import TimeWindow
from store.rules.keys import normalize_key
from store.rules.recall import (
    Bm25,
    ScoreFusion,
    TermStats,
    candidate_count,
    fuse,
    fuse_scores,
    query_cues,
    resolve_scopes,
    term_stats,
)
from store.rules.terms import is_empty_query, query_terms

# the settings `session_settings` reports (`store.postgres.recall_sql.RecallTuning`)
_SESSION_SETTINGS = (
    "hnsw.iterative_scan",
    "hnsw.ef_search",
    "hnsw.max_scan_tuples",
    "plan_cache_mode",
    "random_page_cost",
    "TimeZone",
)


# the branches that rank by the query (the rest, `top` and `pinned`, ride along for the hint)
RELEVANCE = ("vector", "text")


@dataclass(slots=True)
class RecallRows:
    """One recall statement's rows: each memory once (in the order read), per branch its
    (rank, id) pairs and scores, and the open proposals read with them (`with_pending`)."""

    memories: dict[uuid.UUID, Memory]
    ranks: dict[str, list[tuple[int, uuid.UUID]]]
    scores: dict[str, dict[uuid.UUID, float]]
    pending: dict[uuid.UUID, Revision] = field(default_factory=dict)

    def ranking(self, source: str) -> list[uuid.UUID]:
        """The ids `source` ranked, best first."""
        return [mid for _, mid in sorted(self.ranks.get(source, ()))]

    def rows_for(self, sources: Sequence[str], *, overrides: bool) -> list[Memory]:
        """The rows a statement of only these branches would have read: the memories they ranked,
        and with `overrides` (more than one owner) every row read that shares a normalised key
        with one of those (the statement reads all such rows for any branch's ranked ones)."""
        ranked = {mid for source in sources for _, mid in self.ranks.get(source, ())}
        if not overrides:
            return [m for mid, m in self.memories.items() if mid in ranked]
        keys = {normalize_key(self.memories[mid].key) for mid in ranked}
        return [m for m in self.memories.values() if normalize_key(m.key) in keys]


def recall_rows(rows: Sequence[Mapping[str, Any]]) -> RecallRows:
    """Group a recall statement's rows (`recall_sql`) by memory and by branch."""
    found = RecallRows(memories={}, ranks={}, scores={})
    memories = found.memories
    for row in rows:
        # a memory several branches found comes once per branch, the same row each time: decoded once
        memory = memories.get(row["id"])
        if memory is None:
            memory = memories[row["id"]] = memory_from_row(row)
        source = row["source"]
        if source is not None:
            found.ranks.setdefault(source, []).append((row["rank"], memory.id))
            found.scores.setdefault(source, {})[memory.id] = float(row["score"])
        if row.get("pending_id") is not None:
            found.pending[memory.id] = revision_from_row(
                {name: row[f"pending_{name}"] for name in REVISION_COLUMNS}
            )
    return found


@dataclass(frozen=True, kw_only=True, slots=True)
class RecallPlan:
    """One recall statement with its parameters and the query's time window (if it named one)."""

    sql: str
    params: dict[str, Any]
    time_window: TimeWindow | None
    one_plan: bool = False  # its text is planned once per connection (`owned_first` in `recall_sql`)
    when: bool = False  # the query asks "When …?"
    personal: bool = False  # the query speaks for the person (`store.rules.cues.speaks_for_self`)


class PgRecall:
    """Hybrid recall of memories on Postgres (see the module docstring)."""

    def __init__(
        self,
        connections: PgConnections,
        embedder: Embedder,
        *,
        embedding_dim: int,
        weights: Mapping[str, float],
        fusion: ScoreFusion,
        bm25: Bm25,
    ) -> None:
        self._connections = connections
        self._embedder = embedder
        self._dim = embedding_dim
        self._weights = dict(weights)
        self._fusion = fusion
        self._bm25 = bm25

    async def recall(self, asked: RecallQuery) -> list[RecallHit]:
        """The recall's memories (`limit` above 0) ranked in one statement; empty query → top by
        confidence."""
        plan = await self._plan(asked)
        if plan is None:
            return []
        found = recall_rows(await self._connections.fetch(plan.sql, plan.params, one_plan=plan.one_plan))
        if "top" in found.ranks:
            rankings = {source: found.ranking(source) for source in found.ranks}
            return fuse(found.memories.values(), rankings, limit=asked.limit, weights=self._weights)
        return self._relevant(found, found.memories.values(), asked.limit, plan)

    async def context_facts(
        self, asked: RecallQuery, *, standing: int, pinned: int, standing_budget: int | None = None
    ) -> ContextFacts:
        """The hint's facts (`ContextFacts`) in the statement of the recall: its relevant ones
        (`asked.limit`), all of them by standing when they are fewer than `standing` and may fit
        `standing_budget` (`store.rules.hint.may_list_standing`; else, and for 0, None; when the
        statement's count or weight shows they do not, none are sent) and the
        `pinned` pinned ones most recently changed first (0: none), each exactly as its own
        statement would rank it. An empty query reads its relevant ones apart."""
        owners = resolve_scopes(asked.user_id, persona_id=asked.persona_id)
        limits = {"standing": standing, "pinned": pinned}
        context_only = partial(self._context_only, asked, owners, **limits, standing_budget=standing_budget)
        if asked.limit <= 0:
            return await context_only()
        if is_empty_query(asked.text):
            relevant, facts = await asyncio.gather(self.recall(asked), context_only())
            ids = [hit.memory.id for hit in relevant]
            rows = await self._connections.fetch(PENDING_CHANGES_SQL, {"ids": ids}) if ids else []
            pending = {**facts.pending, **{r.memory_id: r for r in map(revision_from_row, rows)}}
            return replace(facts, relevant=relevant, pending=pending)
        plan = await self._plan(asked, **limits, standing_budget=standing_budget, with_pending=True)
        if plan is None:
            return await context_only()
        found = recall_rows(await self._connections.fetch(plan.sql, plan.params, one_plan=plan.one_plan))
        overrides = len(owners) > 1
        relevant = self._relevant(found, found.rows_for(RELEVANCE, overrides=overrides), asked.limit, plan)
        return self._context_of(found, relevant, standing=standing, overrides=overrides)

    async def _context_only(
        self,
        asked: RecallQuery,
        owners: Sequence[OwnerRef],
        *,
        standing: int,
        pinned: int,
        standing_budget: int | None,
    ) -> ContextFacts:
        """`context_facts` without relevant ones: the standing and pinned branches alone."""
        branches = [name for name, n in (("standing", standing), ("pinned", pinned)) if n > 0]
        if not branches:
            return ContextFacts(relevant=[], standing=None, pinned=[], pending={})
        params = {**_owner_params(asked), **_context_limits(standing, pinned, standing_budget)}
        sql = recall_sql(
            owners=owners,
            branches=branches,
            embedding_dim=self._dim,
            with_pending=True,
            standing_weighed="standing_budget" in params,
        )
        found = recall_rows(await self._connections.fetch(sql, params))
        return self._context_of(found, [], standing=standing, overrides=len(owners) > 1)

    def _context_of(
        self, found: RecallRows, relevant: list[RecallHit], *, standing: int, overrides: bool
    ) -> ContextFacts:
        """The standing and pinned facts of `found` beside the `relevant` ones."""
        first: list[RecallHit] | None = None
        # `more`: the context holds at least `standing` facts (`recall_sql`'s `standing` branch)
        if standing > 0 and "more" not in found.ranks:
            rows = found.rows_for(["top"], overrides=overrides)
            hits = fuse(rows, {"top": found.ranking("top")}, limit=standing, weights=self._weights)
            first = hits if len(hits) < standing else None
        pinned = [found.memories[mid] for mid in found.ranking("pinned")]
        ids = {hit.memory.id for hit in [*relevant, *(first or ())]} | {m.id for m in pinned}
        pending = {mid: found.pending[mid] for mid in ids if mid in found.pending}
        return ContextFacts(relevant=relevant, standing=first, pinned=pinned, pending=pending)

    def _relevant(
        self, found: RecallRows, rows: Iterable[Memory], limit: int, plan: RecallPlan
    ) -> list[RecallHit]:
        """The query branches' scores fused (`fuse_scores`) over `rows`."""
        scores = {source: found.scores[source] for source in RELEVANCE if source in found.scores}
        return fuse_scores(
            rows,
            scores,
            limit=limit,
            fusion=self._fusion,
            time_window=plan.time_window,
            when=plan.when,
            personal=plan.personal,
        )

    async def explain(self, asked: RecallQuery) -> str:
        """EXPLAIN (ANALYZE, BUFFERS) of the recall statement (for tuning and the benchmark)."""
        plan = await self._plan(asked)
        if plan is None:
            return "(no statement: the query has no searchable terms for this retriever)"
        rows = await self._connections.fetch("EXPLAIN (ANALYZE, BUFFERS) " + plan.sql, plan.params)
        return "\n".join(str(row["QUERY PLAN"]) for row in rows)

    async def session_settings(self) -> dict[str, str]:
        """The recall settings a pooled connection actually runs with (see `RecallTuning`)."""
        # loading the extension library validates placeholder values set before it was loaded
        await self._connections.fetch("SELECT '[1]'::vector")
        settings = {}
        for name in _SESSION_SETTINGS:
            (row,) = await self._connections.fetch(f"SHOW {name}")
            settings[name] = str(next(iter(row.values())))
        return settings

    async def _plan(
        self,
        asked: RecallQuery,
        *,
        standing: int = 0,
        pinned: int = 0,
        standing_budget: int | None = None,
        with_pending: bool = False,
    ) -> RecallPlan | None:
        """The recall SQL, its parameters and the query's time window; None when no branch can run.
        `standing`, `pinned`: the statement also ranks that many first by standing and pinned ones,
        the first weighed against `standing_budget` (`context_facts`; not for an empty query)."""
        owners = resolve_scopes(asked.user_id, asked.persona_id)
        params: dict[str, Any] = {"k": candidate_count(asked.limit), **_owner_params(asked)}
        if is_empty_query(asked.text):
            params["k_top"] = params["k"]
            sql = recall_sql(owners=owners, branches=["top"], embedding_dim=self._dim)
            return RecallPlan(sql=sql, params=params, time_window=None)
        cues = query_cues(asked.text, now=datetime.now(UTC))
        text = cues.text
        branches: list[str] = []
        retriever, query_embedding = asked.retriever, asked.query_embedding
        needs_stats = retriever != "vector" or query_embedding is None
        stats = await self._term_stats(owners, params, text) if needs_stats else None
        if retriever in ("hybrid", "vector"):
            if query_embedding is not None:
                vector = checked_vector(query_embedding, self._dim, "query embedding")
            else:
                assert stats is not None
                vector = await query_vector(self._embedder, text, stats.word_share, self._fusion, self._dim)
            params["qv"] = float4_array(vector)
            branches.append("vector")
        tsquery = websearch_or_query(text)
        if retriever in ("hybrid", "keyword") and tsquery is not None and stats is not None and stats.idf:
            params.update(
                tq=tsquery,
                lexemes=list(stats.idf),
                idfs=list(stats.idf.values()),
                k1=self._bm25.k1,
                b=self._bm25.b,
                avglen=max(stats.mean_length, 1.0),
            )
            branches.append("text")
        if not branches:
            return None
        value_weighted = "text" in branches and self._fusion.key_weight != 1.0
        if value_weighted:
            params["key_weight"] = float(self._fusion.key_weight)
        branches += [name for name, n in (("standing", standing), ("pinned", pinned)) if n > 0]
        params.update(_context_limits(standing, pinned, standing_budget))
        # owners the term statistics counted in full, and few: their rows read first, one plan
        owned_first = stats is not None and owned_first_fits(stats.documents, sample=self._bm25.stats_sample)
        sql = recall_sql(
            owners=owners,
            branches=branches,
            embedding_dim=self._dim,
            value_weighted=value_weighted,
            with_pending=with_pending,
            owned_first=owned_first,
            standing_weighed="standing_budget" in params,
        )
        return RecallPlan(
            sql=sql,
            params=params,
            time_window=cues.time_window,
            when=cues.when,
            personal=cues.personal,
            one_plan=owned_first,
        )

    async def _term_stats(
        self, owners: Sequence[OwnerRef], params: Mapping[str, Any], text: str
    ) -> TermStats:
        """Document frequencies of the query's words among the owners' active memories."""
        words = query_terms(text)
        if not words:
            return TermStats(documents=0, mean_length=0.0, idf={}, word_share={})
        # one plan for every owner: the owner index up to `sample` rows, whatever the owner's size
        rows = await self._connections.fetch(
            term_stats_sql(owners),
            {**params, "words": words, "sample": self._bm25.stats_sample},
            one_plan=True,
        )
        return term_stats([tuple(row.values()) for row in rows])


def _owner_params(asked: RecallQuery) -> dict[str, Any]:
    """`owner_sql`'s parameters for the recall's context."""
    return {"user_id": asked.user_id, "persona_id": asked.persona_id, "team_id": asked.team_id}


def _context_limits(standing: int, pinned: int, standing_budget: int | None) -> dict[str, int]:
    """The `standing` and `pinned` branches' parameters (`recall_sql`) for the facts asked for:
    their row limits, and the standing facts' budget (`standing_weighed`) when there is one."""
    limits: dict[str, int] = {}
    if standing > 0:
        limits.update(k_top=candidate_count(standing), standing=standing)
        if standing_budget is not None:
            limits["standing_budget"] = standing_budget
    if pinned > 0:
        limits["k_pinned"] = pinned
    return limits
