"""The SQLite store's in-process ranking: an owner's memories held as an `OwnerIndex` (unit-row
embeddings in numpy, keys, word document frequencies), their best cosines to a query, the cosines
of the near-duplicate read, and the FTS5 MATCH expression of a query. Postgres ranks the same in
SQL (`store.postgres.recall_sql`, `store.postgres.neighbours_sql`)."""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from store.model import Memory
from store.rules.keys import normalize_key
from store.rules.terms import keyword_terms, query_terms


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


class Stamped(Protocol):
    """A value read from the database, valid while its stamp (`SqliteBackend._stamp`) is current."""

    @property
    def stamp(self) -> tuple[int, int]:
        """The changes counted when it was read: this store's writes and `PRAGMA data_version`."""
        ...


K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Stamped)


class StampedCache(Generic[K, V]):
    """The `bound` most recently used values by key (an owner's index, a context's turn window),
    each served while its stamp is the current one."""

    def __init__(self, bound: int) -> None:
        self._values: OrderedDict[K, V] = OrderedDict()
        self._bound = bound

    def get(self, key: K, stamp: tuple[int, int]) -> V | None:
        """The value kept for `key` when it is as fresh as `stamp`, else None."""
        cached = self._values.get(key)
        if cached is None or cached.stamp != stamp:
            return None
        self._values.move_to_end(key)
        return cached

    def put(self, key: K, value: V) -> None:
        """Keep `value` for `key`, dropping the least recently used beyond the bound."""
        self._values[key] = value
        self._values.move_to_end(key)
        while len(self._values) > self._bound:
            self._values.popitem(last=False)
