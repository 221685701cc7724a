"""Postgres: the near-duplicate read of an event's new memories, bounded by k per new memory
whatever the owner's size, the owners' write locks, and the read of the memories an extraction
prompt shows; pure statement builders (psycopg's `%(name)s` parameters), sent by
`store.postgres.backend` and `store.postgres.event_write`.

- `neighbours_statement`: for every new memory of an event, its k nearest stored memories of the
  same owner (active or pending, visible in its team context) plus any stored row under the same
  key, in ONE statement (per memory, an exact ranking of a small owner's rows, or for a large owner
  an HNSW scan of its reviewed rows and an exact ranking of its most recent pending ones; UNION
  ALL; the owner's size, which picks the shape, comes from `OwnerSizes` or is counted).
- `OWNER_LOCKS_SQL`: a transaction-scoped advisory lock per owner, so two concurrent events of one
  owner check and write one after the other.
- `prompt_memories_statement`: the few stored memories most relevant to a conversation (full-text
  rank on its words within each owner's most recent memories: a bounded index scan), for the
  extraction prompt's existing keys.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from store.core.rows import MEMORY_COLUMNS, columns_sql, memory_from_row
from store.model import NIL_UUID, Neighbour, NewMemory, OwnerRef
from store.postgres.dialect import NIL_UUID_SQL, TEXT_SEARCH_CONFIG, hnsw_expression
from store.postgres.params import Float4Array
from store.services.ttl_cache import TtlCache

_COLUMNS = columns_sql(MEMORY_COLUMNS, "m")
# Per owner, the most recent memories the prompt's relevance ranking looks at (bounded work for a
# huge owner: an index scan of this many rows, whatever the owner's size)
PROMPT_WINDOW = 200
# Owners with at most this many memories are ranked exactly instead of through HNSW
EXACT_OWNER_ROWS = 3000
# A larger owner's pending memories (not in the HNSW index, which holds reviewed ones) are ranked
# exactly among its this many most recent pending ones
PENDING_WINDOW = 3000
# How long a review (pending -> active) may have run before committing behind a write's HNSW read
# taken outside the owner lock: the write's locked read ranks the rows made active this recently
REVIEW_MARGIN = "5 minutes"

# The near-duplicate read whole (one statement), or split for a write: "hnsw", large owners'
# reviewed rows through HNSW, read before the owner locks (no worker write changes an active row:
# a write makes pending rows and pending revisions); "locked", the rest, read under the locks,
# plus a large owner's rows made active since the "hnsw" read
ReadShape = Literal["whole", "hnsw", "locked"]
_WINDOW_COLUMNS = columns_sql(MEMORY_COLUMNS, "w") + ", w.embedding"


def owner_lock_key(memory: NewMemory) -> str:
    """The advisory-lock name of a memory's owner (scope, owner, user)."""
    return f"pmem:{memory.scope}:{memory.owner_id}:{memory.user_id or ''}"


# the owners' transaction-scoped advisory locks, named in `%(names)s` (a sorted text[], see
# `owner_lock_names`): taken in the array's order, so two events never deadlock on them
OWNER_LOCKS_SQL = (
    "SELECT count(pg_advisory_xact_lock(hashtextextended(n, 0))) "
    "FROM unnest(CAST(%(names)b AS text[])) AS t(n)"
)


def owner_lock_names(memories: Sequence[NewMemory]) -> list[str]:
    """`OWNER_LOCKS_SQL`'s `names`: the memories' owners' lock names, sorted, as one text[]."""
    return sorted({owner_lock_key(m) for m in memories})


def user_condition(alias: str, user_param: str | None) -> str:
    """An owner's user on the plain column: `= %(user_param)s`, or IS NULL for an owner without one.

    Not `coalesce(user_id, nil) = $1`: Postgres does not count a coalesce as leakproof, so under
    row-level security (the `pmem_app` role) it runs after the policy and is no index condition;
    a `persona_user` owner's read then stepped over every other user's rows of the persona. These
    two forms are leakproof and indexed (migration 0016: `ix_memories_owner_user_recent`,
    `ix_memories_owner_pending`, `_reviewed`), policy or not (bench/README.md, "Row-level
    security")."""
    if user_param is None:
        return f"{alias}.user_id IS NULL"
    return f"{alias}.user_id = %({user_param})s"


def in_owner_index_order(alias: str) -> str:
    """ORDER BY for an owner's most recent rows, in the order of migration 0016's owner indexes
    once `user_condition` fixed the user. `user_id` is named although fixed: `IS NULL`
    is no equality the planner can take as a constant, and without it the scan was followed by a
    sort of every row of the owner instead of stopping after the LIMIT's."""
    return f"{alias}.user_id, {alias}.updated_at DESC"


# How long an owner's size (capped at EXACT_OWNER_ROWS + 1) is trusted: it only chooses between
# exact ranking and HNSW, and a few rows more or less do not change that choice
OWNER_SIZE_TTL_S = 60.0
OwnerKey = tuple[str, uuid.UUID, uuid.UUID]  # scope, owner, user (nil for none)


def owner_key(memory: NewMemory) -> OwnerKey:
    """An owner as the size cache knows it: (scope, owner_id, user_id or the nil uuid)."""
    return (memory.scope, memory.owner_id, memory.user_id or NIL_UUID)


@dataclass(kw_only=True)
class OwnerSizes:
    """Owners' row counts capped at `cap`, each remembered for `ttl_s`, at most `max_entries`
    (then forgotten all at once: simple and bounded). Counting an owner's rows in every write
    transaction cost as much as ranking them (bench/README.md)."""

    cap: int
    ttl_s: float = OWNER_SIZE_TTL_S
    max_entries: int = 100_000
    clock: Callable[[], float] = time.monotonic
    _cache: TtlCache[OwnerKey, int] = field(init=False)

    def __post_init__(self) -> None:
        self._cache = TtlCache(ttl_s=self.ttl_s, max_entries=self.max_entries, clock=self.clock)

    def get(self, key: OwnerKey) -> int | None:
        """The remembered size, or None when unknown or expired."""
        found = self._cache.get(key)
        return None if found is None else found[0]

    def put(self, key: OwnerKey, size: int) -> None:
        """Remember `size` (capped) for `ttl_s`."""
        self._cache.put(key, min(size, self.cap))

    def lookup(self, owners: Sequence[OwnerKey]) -> tuple[dict[OwnerKey, int], list[OwnerKey]]:
        """The owners' remembered sizes, and the owners it does not know (in order)."""
        known: dict[OwnerKey, int] = {}
        missing: list[OwnerKey] = []
        for key in dict.fromkeys(owners):
            size = self.get(key)
            if size is None:
                missing.append(key)
            else:
                known[key] = size
        return known, missing

    def remember(self, counted: Mapping[OwnerKey, int]) -> None:
        """Remember each owner's counted size."""
        for key, size in counted.items():
            self.put(key, size)


def _owner_size_sql(scope: str, owner: str, user: str) -> str:
    """An owner's row count up to `%(cap)s` (a scan that stops after that many rows, whatever its
    size); `user` a `user_condition` on alias `c`."""
    return (
        f"(SELECT count(*) FROM (SELECT 1 FROM memories c WHERE c.scope = {scope} "
        f"AND c.owner_id = {owner} AND {user} LIMIT %(cap)s) x)"
    )


def owner_count_statement(missing: Sequence[OwnerKey]) -> tuple[str, dict[str, Any]]:
    """Postgres: one statement of `(idx, size)` rows, each owner's size capped at
    EXACT_OWNER_ROWS + 1."""
    parts = []
    params: dict[str, Any] = {"cap": EXACT_OWNER_ROWS + 1}
    for i, (scope, owner, user) in enumerate(missing):
        counted_user = user_condition("c", None if user == NIL_UUID else f"u{i}")
        parts.append(f"SELECT {i} AS idx, {_owner_size_sql(f'%(s{i})s', f'%(o{i})s', counted_user)} AS n")
        params.update({f"s{i}": scope, f"o{i}": owner, f"u{i}": user})
    return " UNION ALL ".join(parts), params


def neighbours_statement(  # noqa: PLR0915 - one SQL statement built clause by clause, in the order it reads
    memories: Sequence[NewMemory],
    vectors: Sequence[Float4Array],
    k: int,
    sizes: Mapping[OwnerKey, int],
    shape: ReadShape = "whole",
    *,
    dim: int,
) -> tuple[str, dict[str, Any]]:
    """Postgres: the one statement (`%(name)s` parameters) behind `PgBackend.neighbours`, given the
    memories' embeddings as `float4_array`s and the owners' capped sizes where known
    (`OwnerSizes.lookup`, `_owner_row_counts`). `shape` (see `ReadShape`) splits it in two for a
    write that reads large owners' reviewed rows before taking the owner locks; "hnsw" gives
    an empty statement when no known owner is large."""
    if len(vectors) != len(memories):
        raise ValueError(f"{len(memories)} memories but {len(vectors)} embeddings")
    hnsw = hnsw_expression(dim)
    halfvec = hnsw is not None and hnsw[0] != "embedding"

    def distance(i: int, *, cast_once: bool = False) -> str:
        query_vector = f"CAST(CAST(%(v{i})s AS real[]) AS vector({dim}))"
        if cast_once:
            # a sub-select (an InitPlan): in a generic plan, a cast of the parameter would run
            # again for every row ranked
            query_vector = f"(SELECT {query_vector})"
        if halfvec:
            return f"CAST(m.embedding AS halfvec({dim})) <=> CAST({query_vector} AS halfvec({dim}))"
        return f"m.embedding <=> {query_vector}"

    def owner_filter(i: int, memory: NewMemory) -> str:
        owner = f"m.scope = %(s{i})s AND m.owner_id = %(o{i})s"
        owner += f" AND m.user_id = %(u{i})s" if memory.user_id is not None else " AND m.user_id IS NULL"
        return f"{owner} AND {team_filter(i, memory)}"

    def team_filter(i: int, memory: NewMemory) -> str:
        if memory.team_id is None:
            return "m.team_id IS NULL"
        return f"(m.team_id IS NULL OR m.team_id = %(t{i})s)"

    def select(i: int, similarity: str) -> str:
        return f"SELECT {i} AS idx, {_COLUMNS}, {similarity} AS similarity"

    def user_param(i: int, memory: NewMemory) -> str | None:
        return None if memory.user_id is None else f"u{i}"

    def window_rows(i: int, memory: NewMemory, condition: str, columns: str) -> str:
        # the owner's PENDING_WINDOW most recent rows meeting `condition`, in index order
        # (ix_memories_owner_reviewed / _pending)
        return (
            f"SELECT {columns} FROM memories w WHERE w.scope = %(s{i})s "
            f"AND w.owner_id = %(o{i})s AND {user_condition('w', user_param(i, memory))} "
            f"AND {condition} AND {team_filter(i, memory).replace('m.', 'w.')} "
            f"ORDER BY {in_owner_index_order('w')} LIMIT %(pending_window)s"
        )

    def recent_window(members: Sequence[int], condition: str) -> None:
        # a large owner's window ranked exactly for each of its new memories (`members`, one
        # owner and team context): one memory reads it as it ranks it; several share one read of
        # the window's ids and distances (a MATERIALIZED CTE), then each takes its k nearest
        first = members[0]
        if len(members) == 1:
            window = window_rows(first, memories[first], condition, _WINDOW_COLUMNS)
            ranked = distance(first, cast_once=True)
            parts.append(
                f"({select(first, f'1 - ({ranked})')} FROM ({window}) m "
                f"WHERE m.embedding IS NOT NULL ORDER BY ({ranked}) + 0 LIMIT %(k)s)"
            )
            return
        group = f"g{len(ctes)}"
        window = window_rows(first, memories[first], condition, "w.id, w.embedding")
        distances = ", ".join(f"{distance(i, cast_once=True)} AS d{i}" for i in members)
        ctes.append(
            f"{group} AS MATERIALIZED (SELECT m.id, {distances} FROM ({window}) m "
            "WHERE m.embedding IS NOT NULL)"
        )
        for i in members:
            parts.append(
                f"({select(i, f'1 - n.d{i}')} FROM (SELECT g.id, g.d{i} FROM {group} g "
                f"ORDER BY g.d{i} LIMIT %(k)s) n JOIN memories m ON m.id = n.id)"
            )

    parts: list[str] = []
    ctes: list[str] = []
    params: dict[str, Any] = {"k": k}
    # owners whose size the statement counts: their row in `owner_size`, and a memory of theirs
    unknown: dict[OwnerKey, tuple[int, int]] = {}
    # A small owner is ranked exactly (its rows through the owner index: a few ms); the HNSW
    # index with such a selective filter would walk far more of the graph than the owner has
    # rows (measured: ~75 ms for a 2,000-memory user among 140,000); `+ 0` keeps the planner
    # off it. Several new memories of one small owner (and team context) share one read of
    # its rows: each row's distances to all of them, kept in a CTE, then each one's k nearest
    # (the owner's rows are read once instead of once per memory; bench/README.md).
    # A large owner's reviewed rows go through HNSW (iterative scan), which holds active rows
    # only; its pending rows are ranked exactly within its PENDING_WINDOW most recent ones
    # (ix_memories_owner_pending: bounded work).
    # An owner the size cache does not know is read in the small owners' shape behind a
    # one-time filter on its size (counted once, before any scan): no rows when it is large,
    # and the caller, which counted it beside this read, reads it again.
    small_groups: dict[tuple[OwnerKey, uuid.UUID | None], list[int]] = {}
    # a large owner's new memories by owner and team context, for its windows (shape "hnsw": none)
    large_groups: dict[tuple[OwnerKey, uuid.UUID | None], list[int]] = {}
    for i, memory in enumerate(memories):
        size = sizes.get(owner_key(memory))
        if size is None or size <= EXACT_OWNER_ROWS:
            small_groups.setdefault((owner_key(memory), memory.team_id), []).append(i)
    for (key, _team), members in small_groups.items() if shape != "hnsw" else ():
        first = members[0]
        small = ""
        if sizes.get(key) is None:
            j = unknown.setdefault(key, (len(unknown), first))[0]
            small = f"AND (SELECT n FROM owner_size WHERE idx = {j}) <= %(exact_rows)s "
        where = (
            f"WHERE {owner_filter(first, memories[first])} AND m.status IN ('active', 'pending_review') "
            f"AND m.embedding IS NOT NULL {small}"
        )
        if len(members) == 1:
            parts.append(
                f"({select(first, f'1 - ({distance(first)})')} FROM memories m "
                f"{where}ORDER BY ({distance(first)}) + 0 LIMIT %(k)s)"
            )
            continue
        group = f"g{len(ctes)}"
        distances = ", ".join(f"{distance(i)} AS d{i}" for i in members)
        ctes.append(f"{group} AS MATERIALIZED (SELECT m.id, {distances} FROM memories m {where})")
        for i in members:
            parts.append(
                f"({select(i, f'1 - n.d{i}')} FROM (SELECT g.id, g.d{i} FROM {group} g "
                f"ORDER BY g.d{i} LIMIT %(k)s) n JOIN memories m ON m.id = n.id)"
            )
    for i, memory in enumerate(memories):
        size = sizes.get(owner_key(memory))
        large = size is not None and size > EXACT_OWNER_ROWS
        if large and shape != "locked":
            parts.append(
                f"({select(i, f'1 - ({distance(i)})')} FROM memories m "
                f"WHERE {owner_filter(i, memory)} AND m.status = 'active' "
                f"AND m.embedding IS NOT NULL ORDER BY ({distance(i)}) LIMIT %(k)s)"
            )
        params.update(
            {
                f"v{i}": vectors[i],
                f"s{i}": memory.scope,
                f"o{i}": memory.owner_id,
                f"u{i}": memory.user_id,
                f"t{i}": memory.team_id,
                f"un{i}": memory.user_id or NIL_UUID,
                f"tn{i}": memory.team_id or NIL_UUID,
                f"k{i}": memory.key,
            }
        )
        if shape == "hnsw":
            continue
        if large:
            large_groups.setdefault((owner_key(memory), memory.team_id), []).append(i)
        # the same key, through the unique index: coalesce(user_id), coalesce(team_id), key
        nil = NIL_UUID_SQL
        parts.append(
            f"({select(i, f'1 - ({distance(i)})')} FROM memories m "
            f"WHERE m.scope = %(s{i})s AND m.owner_id = %(o{i})s "
            f"AND coalesce(m.user_id, {nil}) = %(un{i})s "
            f"AND coalesce(m.team_id, {nil}) IN ({nil}, %(tn{i})s) "
            f"AND m.key = %(k{i})s AND m.status IN ('active', 'pending_review'))"
        )
    for members in large_groups.values():
        if shape == "locked":
            # rows made active since the HNSW read's snapshot (a review: approve sets
            # updated_at); that read ran in this transaction, after its start, so a review
            # committed later began at most REVIEW_MARGIN before now() (ix_memories_owner_reviewed)
            recent_window(
                members,
                "w.status = 'active' AND w.updated_at >= now() - CAST(%(review_margin)s AS interval)",
            )
            params["review_margin"] = REVIEW_MARGIN
        recent_window(members, "w.status = 'pending_review'")
        params["pending_window"] = PENDING_WINDOW
    sql = " UNION ALL ".join(parts)
    if unknown:
        counts = " UNION ALL ".join(
            f"SELECT {j} AS idx, "
            f"{_owner_size_sql(f'%(s{i})s', f'%(o{i})s', user_condition('c', user_param(i, memories[i])))}"
            " AS n"
            for j, i in unknown.values()
        )
        ctes.insert(0, f"owner_size AS MATERIALIZED ({counts})")
        params.update(cap=EXACT_OWNER_ROWS + 1, exact_rows=EXACT_OWNER_ROWS)
    if ctes:
        sql = f"WITH {', '.join(ctes)} {sql}"
    return sql, params


def neighbours_from_rows(rows: Sequence[Mapping[Any, Any]], count: int) -> list[list[Neighbour]]:
    """The rows of `neighbours_statement` as each of the `count` new memories' neighbours,
    best first."""
    found: list[dict[uuid.UUID, Neighbour]] = [{} for _ in range(count)]
    for data in rows:
        similarity = float(data["similarity"]) if data["similarity"] is not None else float("-inf")
        found[data["idx"]][data["id"]] = Neighbour(memory=memory_from_row(data), similarity=similarity)
    return [sorted(f.values(), key=lambda n: -n.similarity) for f in found]


def prompt_memories_statement(
    owners: Sequence[OwnerRef], *, team_id: uuid.UUID | None, words: Sequence[str], limit: int
) -> tuple[str, dict[str, Any]]:
    """The full-text matches of `words` first (by rank) among each owner's `PROMPT_WINDOW` most
    recent active or pending memories in the team context, then the most recent: at most `limit`.
    One plan whatever the owner (each window an owner-index scan): fit for a generic plan."""
    parts: list[str] = []
    params: dict[str, Any] = {"window": PROMPT_WINDOW, "limit": limit, "tq": " or ".join(words)}
    for i, owner in enumerate(owners):
        team = "m.team_id IS NULL" if team_id is None else "(m.team_id IS NULL OR m.team_id = %(team)s)"
        # the owner's most recent memories, read in index order (ix_memories_owner_user_recent)
        parts.append(
            f"(SELECT {_COLUMNS}, m.search_tsv FROM memories m WHERE m.scope = %(s{i})s "
            f"AND m.owner_id = %(o{i})s "
            f"AND {user_condition('m', None if owner.user_id is None else f'u{i}')} "
            f"AND {team} AND m.status IN ('active', 'pending_review') "
            f"ORDER BY {in_owner_index_order('m')} LIMIT %(window)s)"
        )
        params.update({f"s{i}": owner.scope, f"o{i}": owner.owner_id, f"u{i}": owner.user_id})
    params["team"] = team_id
    sql = (
        "WITH recent AS MATERIALIZED (" + " UNION ALL ".join(parts) + "), "
        # parsed once: a generic plan would otherwise parse the query again for every row
        f"q AS MATERIALIZED (SELECT websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', %(tq)s) AS query) "
        f"SELECT {columns_sql(MEMORY_COLUMNS, 'r')} FROM recent r, q "
        "ORDER BY (r.search_tsv @@ q.query) DESC, ts_rank(r.search_tsv, q.query) DESC, "
        "r.updated_at DESC LIMIT %(limit)s"
    )
    return sql, params
