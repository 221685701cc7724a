"""The SQLite store's in-process ranking: memory vectors scored in numpy (unit rows, the best
cosines) and the FTS5 MATCH expression of a query. Postgres ranks the same in SQL
(`store.postgres.recall_sql`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from store.rules.terms import keyword_terms


def fts5_match(text: str) -> str | None:
    """An SQLite FTS5 MATCH expression ORing the query's informative words (each a quoted string, so
    user text cannot inject FTS5 syntax); None when there is none."""
    terms = [t for t in keyword_terms(text) if t != "or"]
    return " OR ".join(f'"{t}"' for t in terms) if terms else None


def unit_rows(matrix: np.ndarray[Any, np.dtype[np.float32]]) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Rows scaled to unit length (zero rows stay zero, so they score 0 against any query)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    scaled: np.ndarray[Any, np.dtype[np.float32]] = (matrix / norms).astype(np.float32, copy=False)
    return scaled


def top_cosines(
    unit_matrix: np.ndarray[Any, np.dtype[np.float32]],
    usable: np.ndarray[Any, np.dtype[np.bool_]],
    query_vector: Sequence[float],
    k: int,
) -> list[tuple[int, float]]:
    """(row index, cosine) of the `k` rows most similar to the query, best first; rows not `usable`
    (no embedding) are skipped, ties go to the lower index."""
    query = np.asarray(query_vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    if norm == 0.0 or unit_matrix.shape[0] == 0 or unit_matrix.shape[1] != query.shape[0]:
        return []
    cosines = unit_matrix @ (query / norm)
    cosines = np.where(usable, cosines, -np.inf)
    take = min(k, int(usable.sum()))
    if take <= 0:
        return []
    if take < cosines.shape[0]:
        part = np.argpartition(-cosines, take - 1)[:take]
    else:
        part = np.arange(cosines.shape[0])
    order = part[np.lexsort((part, -cosines[part]))]
    return [(int(i), float(cosines[i])) for i in order]
