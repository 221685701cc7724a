"""The Postgres recall statements (psycopg's `%(name)s` parameters) and the session settings they
run under: pure strings, no I/O (`store.postgres.recall` sends them).

Every pooled connection runs with `hnsw.iterative_scan = relaxed_order`: when the planner walks the
HNSW index for a big owner, pgvector keeps scanning until enough rows pass the owner filter instead
of silently returning fewer. Relaxed order is restored by ranking the CTE's rows by exact distance.
The query vector `qv` is a `store.postgres.params.Float4Array`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from store.core.rows import MEMORY_COLUMNS, REVISION_COLUMNS, columns_sql
from store.model import OwnerRef
from store.postgres.dialect import TEXT_SEARCH_CONFIG, hnsw_expression
from store.rules.hint import LISTED_FACT_EXTRA, WHITESPACE

_MEMORY_COLUMNS = columns_sql(MEMORY_COLUMNS, "m")
# the same normalisation as store.rules.recall.normalize_key: lower case, whitespace runs collapsed
_NORMALIZED_KEY = r"btrim(regexp_replace(lower({t}.key), '\s+', ' ', 'g'))"
# a key coarser than `store.rules.keys.normalize_key` (two keys it makes equal are equal here):
# an ASCII key's letters and digits, lower case; every other key one shared value. Counting its
# distinct values bounds from below how many facts (one per normalised key) some rows hold.
_COARSE_KEY = (
    "CASE WHEN m.key ~ '[^\\x01-\\x7f]' THEN '' ELSE regexp_replace(lower(m.key), '[^a-z0-9]+', '', 'g') END"
)

# `WHITESPACE` as a regular expression's bracket expression of `\uXXXX` escapes (ASCII text)
_WHITESPACE_CLASS = "[" + "".join(f"\\u{ord(c):04x}" for c in WHITESPACE) + "]"
# `store.rules.hint.listing_weight` of a row without its constant part: its key's and value's
# characters that are not whitespace. One pass of the regular expression's character class over
# each text: `translate` with the 29 characters compares each character with every one of them
# (three times the CPU over a user's hundred facts)
STANDING_WEIGHT_SQL = (
    f"length(regexp_replace(m.key, '{_WHITESPACE_CLASS}', '', 'g')) "
    f"+ length(regexp_replace(m.value, '{_WHITESPACE_CLASS}', '', 'g'))"
)
# per coarse key (at least one fact each, `_COARSE_KEY`) the least listing weight of its rows: their
# sum bounds the facts' from below. It binds only when `std` holds every row of the context (fewer
# than `%(k_top)s`): then a persona's override of one of its keys is among them too
_STANDING_GROUPS = (
    f"(SELECT count(*) AS n, sum(c.rows) AS rows, sum(c.least) AS weight FROM (SELECT count(*) AS rows, "
    f"min(weight) + {LISTED_FACT_EXTRA} AS least FROM std GROUP BY coarse) c) g"
)
_STANDING_LISTED = "(g.n < %(standing)s AND (g.rows >= %(k_top)s OR g.weight <= %(standing_budget)s))"


# the most active rows owners may hold for `recall_sql(owned_first=True)`: its execution grows with
# the rows faster than the planner's statement's (+0.7 ms at 300 rows, +4.5 ms at 1,000 against
# ~1 ms of planning saved), so only small owners take it
OWNED_FIRST_ROWS = 300


@dataclass(frozen=True, kw_only=True, slots=True)
class RecallTuning:
    """Knobs of the vector branch; the defaults hold for the benchmark in bench/README.md."""

    ef_search: int = 100  # HNSW candidate list; at least the per-branch candidate count
    max_scan_tuples: int = 20_000  # iterative scan budget before pgvector gives up
    scan_mem_multiplier: float = 2.0  # work_mem multiple the iterative scan may use
    # A generic plan (psycopg prepares a statement after 5 uses) cannot see the owner or the
    # terms and may AND the owner index with a GIN scan of a common term: 3x slower at p50, 4x at
    # p99 in the benchmark. Custom plans cost ~0.3 ms of planning. None keeps the server default.
    plan_cache_mode: str | None = "force_custom_plan"
    # SSD/cached storage: with the default 4.0 the planner over-prices the owner's few heap pages
    random_page_cost: float | None = 1.1


def session_settings_sql(tuning: RecallTuning) -> list[str]:
    """The SET statements every pooled connection runs once."""
    if tuning.plan_cache_mode not in (None, "auto", "force_custom_plan", "force_generic_plan"):
        raise ValueError(
            "plan_cache_mode must be auto, force_custom_plan or force_generic_plan, "
            f"got {tuning.plan_cache_mode!r}"
        )
    statements = [
        "SET TIME ZONE 'UTC'",
        "SET hnsw.iterative_scan = relaxed_order",
        f"SET hnsw.ef_search = {int(tuning.ef_search)}",
        f"SET hnsw.max_scan_tuples = {int(tuning.max_scan_tuples)}",
        f"SET hnsw.scan_mem_multiplier = {float(tuning.scan_mem_multiplier)}",
    ]
    if tuning.plan_cache_mode is not None:
        statements.append(f"SET plan_cache_mode = {tuning.plan_cache_mode}")
    if tuning.random_page_cost is not None:
        statements.append(f"SET random_page_cost = {float(tuning.random_page_cost)}")
    return statements


def owner_sql(owners: Sequence[OwnerRef], alias: str) -> str:
    """SQL predicate (psycopg parameters `%(user_id)s`, `%(persona_id)s`, `%(team_id)s`) for the
    resolved owners, inside the team context: rows of no team, or of `%(team_id)s` (NULL: no team)."""
    parts = []
    for owner in owners:
        if owner.scope == "user":
            parts.append(f"({alias}.scope = 'user' AND {alias}.owner_id = %(user_id)s)")
        elif owner.scope == "persona":
            parts.append(f"({alias}.scope = 'persona' AND {alias}.owner_id = %(persona_id)s)")
        else:
            parts.append(
                f"({alias}.scope = 'persona_user' AND {alias}.owner_id = %(persona_id)s "
                f"AND {alias}.user_id = %(user_id)s)"
            )
    teams = f"({alias}.team_id IS NULL OR {alias}.team_id = %(team_id)s)"
    return "((" + " OR ".join(parts) + f") AND {teams})"


def recall_sql(
    *,
    owners: Sequence[OwnerRef],
    branches: Sequence[str],
    embedding_dim: int,
    value_weighted: bool = False,
    with_pending: bool = False,
    owned_first: bool = False,
    standing_weighed: bool = False,
) -> str:
    """The single recall statement for the given branches (`vector` and `text`: the query's
    `%(k)s` best each; `top`: the `%(k_top)s` first by standing; `standing`: the same for a hint
    that wants them only as fewer than `%(standing)s` facts; `pinned`: the `%(k_pinned)s` pinned
    ones most recently changed first, as `pinned_sql`).

    `value_weighted`: in the full-text branch a query lexeme found in the memory's value weighs its
    idf, one found only in its key `%(key_weight)s` × its idf (the value's lexemes are parsed at
    query time, for the rows that match). Returns rows of memory columns plus `source` and `rank`
    (NULL for override-only rows): one row per branch that ranked the memory. `with_pending`: and
    the memory's open proposal (a memory has at most one), its columns named `pending_…`.
    `standing_weighed`: the `standing` branch also returns only the first, as `more`, when the
    rows it read are all of the context's (fewer than `%(k_top)s`) and their listing weight
    exceeds `%(standing_budget)s` (`STANDING_WEIGHT_SQL`).

    `owned_first`: the owners' active rows are read once, by the owner index, into a materialised
    CTE the branches rank (`owned_first_sql`): no plan of this text can use the HNSW or GIN index,
    so one generic plan serves every owner; for owners known to be small (`owned_first_fits`)."""
    where = f"m.status = 'active' AND {owner_sql(owners, 'm')}"
    source = "memories m"
    ctes: list[str] = []
    ranked: list[str] = []
    distance = _distance_sql(embedding_dim)
    if owned_first:
        ctes.append(owned_first_sql(branches, where=where, distance=distance, value_weighted=value_weighted))
        source, where = "owned m", "true"
    if "vector" in branches:
        if owned_first:
            # rows at the same distance (texts of no shared feature) past the k-th: the first ids
            vec = "SELECT m.id, m.distance FROM owned m WHERE m.distance IS NOT NULL ORDER BY distance, id"
        else:
            vec = (
                f"SELECT m.id, {distance} AS distance FROM memories m "
                f"WHERE {where} AND m.embedding IS NOT NULL ORDER BY distance"
            )
        ctes.append(f"vec AS MATERIALIZED ({vec} LIMIT %(k)s)")
        ranked.append(
            "SELECT id, 'vector' AS source, row_number() OVER (ORDER BY distance, id) AS rank, "
            "1 - distance AS score FROM vec"
        )
    if "text" in branches:
        # BM25 with binary term frequency: idf per query lexeme comes from the owner's own memories
        # (computed by `term_stats_sql`), so a word most of them contain weighs almost nothing
        weight, value_lexemes = "t.idf", ""
        if value_weighted:
            weight = (
                "t.idf * CASE WHEN v.tsv @@ plainto_tsquery('simple', t.lex) THEN 1 ELSE %(key_weight)s END"
            )
            value_lexemes = f", LATERAL (SELECT to_tsvector('{TEXT_SEARCH_CONFIG}', m.value)) AS v(tsv)"
        ctes.append(
            "txt AS MATERIALIZED (SELECT m.id, "
            f"coalesce((SELECT sum({weight}) FROM "
            "unnest(CAST(%(lexemes)b AS text[]), CAST(%(idfs)b AS float8[])) AS t(lex, idf) "
            "WHERE m.search_tsv @@ plainto_tsquery('simple', t.lex)), 0) "
            "* (%(k1)s + 1) / (1 + %(k1)s * (1 - %(b)s + %(b)s * length(m.search_tsv) / %(avglen)s)) "
            f"AS relevance FROM {source}, websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', %(tq)s) AS q(query)"
            f"{value_lexemes} "
            f"WHERE {where} AND m.search_tsv @@ q.query ORDER BY relevance DESC, m.id LIMIT %(k)s)"
        )
        ranked.append(
            "SELECT id, 'text' AS source, row_number() OVER (ORDER BY relevance DESC, id) AS rank, "
            "relevance AS score FROM txt"
        )
    if "top" in branches:
        ctes.append(
            f"top AS MATERIALIZED (SELECT m.id, m.confidence, m.updated_at FROM {source} "
            f"WHERE {where} ORDER BY m.confidence DESC, m.updated_at DESC, m.id LIMIT %(k_top)s)"
        )
        ranked.append(
            "SELECT id, 'top' AS source, row_number() OVER "
            "(ORDER BY confidence DESC, updated_at DESC, id) AS rank, confidence AS score FROM top"
        )
    if "standing" in branches:
        # `top`'s rows for a hint, which lists them only when they are fewer than `%(standing)s`
        # facts (and, weighed, fit its budget): when they certainly are not, only the first is
        # returned, as `more`
        weight, listed = "", "g.n < %(standing)s"
        if standing_weighed:
            weight, listed = f", {STANDING_WEIGHT_SQL} AS weight", _STANDING_LISTED
        ctes.append(
            f"std AS MATERIALIZED (SELECT m.id, m.confidence, m.updated_at, {_COARSE_KEY} AS coarse{weight} "
            f"FROM {source} WHERE {where} "
            "ORDER BY m.confidence DESC, m.updated_at DESC, m.id LIMIT %(k_top)s)"
        )
        groups = _STANDING_GROUPS if standing_weighed else "(SELECT count(DISTINCT coarse) AS n FROM std) g"
        ranked.append(
            f"SELECT s.id, CASE WHEN {listed} THEN 'top' ELSE 'more' END AS source, s.rank, "
            "s.confidence AS score FROM (SELECT id, confidence, row_number() OVER "
            "(ORDER BY confidence DESC, updated_at DESC, id) AS rank FROM std) s, "
            f"{groups} WHERE {listed} OR s.rank = 1"
        )
    if "pinned" in branches:
        ctes.append(
            f"pin AS MATERIALIZED (SELECT m.id, m.updated_at FROM {source} WHERE m.pinned = true "
            f"AND {where} ORDER BY m.updated_at DESC, m.id LIMIT %(k_pinned)s)"
        )
        ranked.append(
            "SELECT id, 'pinned' AS source, row_number() OVER (ORDER BY updated_at DESC, id) AS rank, "
            "1.0 AS score FROM pin"
        )
    if not ranked:
        raise ValueError("recall_sql needs at least one branch")
    ctes.append("ranked AS (" + " UNION ALL ".join(ranked) + ")")
    if len(owners) > 1:
        # rows of other scopes with a ranked row's key: a persona_user override must win the merge
        # even when only the user-scope row it overrides matched the query
        ctes.append(
            "hits AS (SELECT id FROM ranked UNION SELECT w.id FROM memories w "
            f"WHERE w.status = 'active' AND {owner_sql(owners, 'w')} AND {_NORMALIZED_KEY.format(t='w')} IN "
            f"(SELECT {_NORMALIZED_KEY.format(t='x')} FROM memories x WHERE x.id IN (SELECT id FROM ranked)))"
        )
    else:
        ctes.append("hits AS (SELECT DISTINCT id FROM ranked)")
    pending_columns, pending_join = "", ""
    if with_pending:
        pending_columns = "".join(f", p.{name} AS pending_{name}" for name in REVISION_COLUMNS)
        pending_join = " LEFT JOIN memory_revisions p ON p.memory_id = m.id AND p.status = 'pending'"
    return (
        "WITH "
        + ",\n".join(ctes)
        + f"\nSELECT {_MEMORY_COLUMNS}, r.source, r.rank, r.score{pending_columns} FROM hits h "
        + f"JOIN memories m ON m.id = h.id LEFT JOIN ranked r ON r.id = h.id{pending_join}"
    )


def _distance_sql(embedding_dim: int) -> str:
    """Cosine distance of `m`'s embedding to the query vector `%(qv)s`, in the HNSW index's type."""
    hnsw = hnsw_expression(embedding_dim)
    if hnsw is not None and hnsw[0] != "embedding":
        return (
            f"CAST(m.embedding AS halfvec({embedding_dim})) "
            f"<=> CAST(CAST(%(qv)s AS real[]) AS halfvec({embedding_dim}))"
        )
    return f"m.embedding <=> CAST(CAST(%(qv)s AS real[]) AS vector({embedding_dim}))"


def owned_first_fits(documents: int, *, sample: int, limit: int = OWNED_FIRST_ROWS) -> bool:
    """Whether the owners certainly hold at most `limit` active rows: `documents` is how many of
    at most `sample` rows `term_stats_sql` counted, exact only below `sample`; 0 says nothing (no
    query word had a lexeme, so no row carried the count)."""
    return 0 < documents < sample and documents <= limit


def owned_first_sql(branches: Sequence[str], *, where: str, distance: str, value_weighted: bool) -> str:
    """The `owned` CTE of `recall_sql(owned_first=True)`: the owners' active rows (`where`) with
    the columns `branches` rank by; the vector branch's distance is computed here for every row, so
    no embedding is copied."""
    columns = ["m.id"]
    if "vector" in branches:
        columns.append(f"{distance} AS distance")  # NULL without an embedding
    if "text" in branches:
        columns.append("m.search_tsv")
    if "top" in branches or "standing" in branches or "pinned" in branches:
        columns += ["m.confidence", "m.updated_at"]
    if "standing" in branches:
        columns.append("m.key")  # its value too: the standing branch may weigh its rows
    if ("text" in branches and value_weighted) or "standing" in branches:
        columns.append("m.value")
    if "pinned" in branches:
        columns.append("m.pinned")
    return f"owned AS MATERIALIZED (SELECT {', '.join(columns)} FROM memories m WHERE {where})"


def term_stats_sql(owners: Sequence[OwnerRef]) -> str:
    """Per query word: its lexemes and how many of the owners' active memories contain each, plus
    the number of memories and their mean lexeme count (read from at most `%(sample)s` rows, so a
    huge persona scope costs a bounded scan)."""
    where = f"m.status = 'active' AND {owner_sql(owners, 'm')}"
    return (
        f"WITH owned AS MATERIALIZED (SELECT m.search_tsv FROM memories m WHERE {where} LIMIT %(sample)s), "
        "words AS (SELECT u.word, u.i, l.lex, l.j FROM unnest(CAST(%(words)b AS text[])) "
        "WITH ORDINALITY AS u(word, i), "
        f"unnest(tsvector_to_array(to_tsvector('{TEXT_SEARCH_CONFIG}', u.word))) "
        "WITH ORDINALITY AS l(lex, j)), "
        "lexes AS MATERIALIZED (SELECT DISTINCT lex, plainto_tsquery('simple', lex) AS query FROM words), "
        # one match per row against all the lexemes at once, then each lexeme counted among the
        # few rows that hold one: not a pass over the whole sample per lexeme
        "holding AS MATERIALIZED (SELECT o.search_tsv FROM owned o WHERE o.search_tsv @@ "
        "(SELECT CAST(string_agg(CAST(x.query AS text), ' | ') AS tsquery) FROM lexes x "
        "WHERE numnode(x.query) > 0)), "
        "df AS (SELECT x.lex, count(o.search_tsv) AS containing FROM lexes x "
        "LEFT JOIN holding o ON o.search_tsv @@ x.query GROUP BY x.lex) "
        "SELECT w.word, w.lex, df.containing, (SELECT count(*) FROM owned), "
        "(SELECT coalesce(avg(length(search_tsv)), 0) FROM owned) FROM words w JOIN df ON df.lex = w.lex "
        # in the query's order: the BM25 sums run over the lexemes in this order
        "ORDER BY w.i, w.j"
    )


def pinned_sql(owners: Sequence[OwnerRef]) -> str:
    """The owners' active pinned memories in the team context, most recently changed first, at
    most `%(limit)s` (the same rows and order as `PinnedFacts.pinned_statement`, over the partial
    index of pinned rows)."""
    return (
        f"SELECT {_MEMORY_COLUMNS} FROM memories m WHERE m.pinned = true AND m.status = 'active' "
        f"AND {owner_sql(owners, 'm')} ORDER BY m.updated_at DESC, m.id LIMIT %(limit)s"
    )


# the open proposal of each of the memories `%(ids)s` that has one (`MemoryReview.pending_changes`)
PENDING_CHANGES_SQL = (
    f"SELECT {columns_sql(REVISION_COLUMNS, 'r')} FROM memory_revisions r "
    "WHERE r.status = 'pending' AND r.memory_id = ANY(%(ids)s)"
)
