"""Semantic dedup decisions for extracted candidates (pure).

For each candidate, against the existing memories of the same scope and owner and against the
rest of the batch:

- `same_key`: an existing memory has the same normalised key. Write it: the upsert goes through
  the unique index (same value → unchanged; a reviewed memory → a pending revision).
- `duplicate`: an existing memory under ANOTHER key says the same thing (same normalised value and
  similar embeddings, or near-identical embeddings). Skip it.
- `batch_duplicate`: the same key appears later in this batch (the later one wins: it is more
  recent in the conversation), or an earlier kept candidate of the batch says the same thing.
  Skip it.
- `new`: write it.

Embeddings are compared by cosine similarity; they must be of the same text form on both sides
(`store.rules.keys.embedding_text(key, value)` is the form the worker embeds and stores). Without
embeddings only key equality is used; a value alone ("Yes") is too weak a signal to call two keys duplicates.
"""

from __future__ import annotations

import math
import operator
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from extraction.types import Candidate
from store.model import DedupVerdict, Memory, Neighbour, NewMemory, OwnerRef, Scope
from store.rules.keys import normalize_key

__all__ = [
    "DedupDecision",
    "DedupOutcome",
    "DedupThresholds",
    "cosine",
    "decide_against_neighbours",
    "decide_dedup",
    "dedup_candidates",
]

DedupOutcome = Literal["new", "same_key", "duplicate", "batch_duplicate"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DedupThresholds:
    """Cosine thresholds. Defaults suit normalised sentence embeddings (MiniLM, OpenAI)."""

    # same normalised value under another key, and the "key: value" texts at least this similar
    same_value_similarity: float = 0.80
    # near-identical "key: value" texts under another key, whatever the exact wording of the value
    duplicate_similarity: float = 0.95


@dataclass(frozen=True, kw_only=True, slots=True)
class DedupDecision:
    """What to do with one candidate, and why (the matched memory's id and the similarity)."""

    candidate: Candidate
    outcome: DedupOutcome
    key: str  # the key to write under: the stored memory's exact key for `same_key`
    embedding: Sequence[float] | None = None
    existing_id: uuid.UUID | None = None
    similarity: float | None = None

    @property
    def action(self) -> Literal["write", "skip"]:
        """`write` for `new` and `same_key` (the candidate goes to the store), else `skip`."""
        return "write" if self.outcome in ("new", "same_key") else "skip"


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0.0 when either is all zeros or the lengths differ)."""
    if len(a) != len(b) or not a:
        return 0.0
    # map/hypot run in C: a third of the generator expressions' time, on every pair of a batch
    dot = sum(map(operator.mul, a, b))
    norm = math.hypot(*a) * math.hypot(*b)
    return dot / norm if norm > 0.0 else 0.0


def _normal_value(value: str) -> str:
    return " ".join(value.lower().split()).strip(" .!")


def _owned(memory: Memory, owners: Mapping[Scope, OwnerRef] | None) -> bool:
    if owners is None:
        return True
    owner = owners.get(memory.scope)
    return owner is not None and memory.owner_id == owner.owner_id and memory.user_id == owner.user_id


@dataclass(frozen=True, kw_only=True, slots=True)
class _Item:
    scope: Scope
    key: str  # normalised
    value: str
    embedding: Sequence[float] | None
    stored_key: str = ""  # exact key of a stored memory
    memory_id: uuid.UUID | None = None


def _same_meaning(a: _Item, b: _Item, thresholds: DedupThresholds) -> float | None:
    """The similarity when `a` and `b` (different keys, same scope) mean the same, else None."""
    if a.embedding is None or b.embedding is None:
        return None
    similarity = cosine(a.embedding, b.embedding)
    if similarity >= thresholds.duplicate_similarity:
        return similarity
    if _normal_value(a.value) == _normal_value(b.value) and similarity >= thresholds.same_value_similarity:
        return similarity
    return None


def _best(item: _Item, others: Sequence[_Item], thresholds: DedupThresholds) -> tuple[_Item, float] | None:
    """The most similar other item (under another key) that means the same as `item`."""
    best: tuple[_Item, float] | None = None
    for other in others:
        if other.key == item.key:
            continue
        similarity = _same_meaning(item, other, thresholds)
        if similarity is not None and (best is None or similarity > best[1]):
            best = (other, similarity)
    return best


def _stored_items(
    existing: Sequence[tuple[Memory, Sequence[float] | None]], owners: Mapping[Scope, OwnerRef] | None
) -> dict[Scope, list[_Item]]:
    stored: dict[Scope, list[_Item]] = {}
    for memory, vector in existing:
        if _owned(memory, owners):
            stored.setdefault(memory.scope, []).append(
                _Item(
                    scope=memory.scope,
                    key=normalize_key(memory.key),
                    value=memory.value,
                    embedding=vector,
                    stored_key=memory.key,
                    memory_id=memory.id,
                )
            )
    return stored


def _against_stored(
    candidate: Candidate, item: _Item, stored: Sequence[_Item], thresholds: DedupThresholds
) -> DedupDecision:
    """`same_key`, `duplicate` or `new` for one candidate against stored memories of its owner."""
    match = next((m for m in stored if m.key == item.key), None)
    if match is not None:
        return DedupDecision(
            candidate=candidate,
            outcome="same_key",
            key=match.stored_key,
            embedding=item.embedding,
            existing_id=match.memory_id,
        )
    duplicate = _best(item, stored, thresholds)
    if duplicate is not None:
        return DedupDecision(
            candidate=candidate,
            outcome="duplicate",
            key=item.key,
            embedding=item.embedding,
            existing_id=duplicate[0].memory_id,
            similarity=duplicate[1],
        )
    return DedupDecision(candidate=candidate, outcome="new", key=item.key, embedding=item.embedding)


def decide_dedup(
    candidate: Candidate,
    embedding: Sequence[float] | None,
    existing: Sequence[tuple[Memory, Sequence[float] | None]],
    *,
    thresholds: DedupThresholds | None = None,
) -> DedupDecision:
    """Decision for ONE candidate against `existing` = the memories of the candidate's own owner.

    Memories of another scope are ignored. Outcomes: `same_key`, `duplicate` or `new` (no batch
    view here; use `dedup_candidates` for a whole batch).
    """
    item = _Item(
        scope=candidate.scope, key=normalize_key(candidate.key), value=candidate.value, embedding=embedding
    )
    stored = _stored_items(existing, None).get(candidate.scope, [])
    return _against_stored(candidate, item, stored, thresholds or DedupThresholds())


def dedup_candidates(
    candidates: Sequence[Candidate],
    embeddings: Sequence[Sequence[float]] | None,
    existing: Sequence[tuple[Memory, Sequence[float] | None]],
    *,
    owners: Mapping[Scope, OwnerRef] | None = None,
    thresholds: DedupThresholds | None = None,
) -> list[DedupDecision]:
    """One decision per candidate, in input order (see the module docstring for the outcomes).

    `embeddings[i]` belongs to `candidates[i]` (or pass None). `existing` are the memories of this
    event's owners with their embeddings; when `owners` is given, memories of any other owner are
    ignored, so a caller cannot dedup across users by mistake.
    """
    thresholds = thresholds or DedupThresholds()
    if embeddings is not None and len(embeddings) != len(candidates):
        raise ValueError(f"{len(embeddings)} embeddings for {len(candidates)} candidates; expected one each")
    items = [
        _Item(
            scope=c.scope,
            key=normalize_key(c.key),
            value=c.value,
            embedding=embeddings[i] if embeddings is not None else None,
        )
        for i, c in enumerate(candidates)
    ]
    stored = _stored_items(existing, owners)
    last_index = {(item.scope, item.key): index for index, item in enumerate(items)}

    decisions: list[DedupDecision] = []
    kept: list[_Item] = []
    for index, (candidate, item) in enumerate(zip(candidates, items, strict=True)):
        if last_index[(item.scope, item.key)] != index:  # the later mention of the key wins
            decisions.append(
                DedupDecision(
                    candidate=candidate, outcome="batch_duplicate", key=item.key, embedding=item.embedding
                )
            )
            continue
        decision = _against_stored(candidate, item, stored.get(item.scope, []), thresholds)
        if decision.outcome == "new":
            earlier = _best(item, [k for k in kept if k.scope == item.scope], thresholds)
            if earlier is not None:
                decision = DedupDecision(
                    candidate=candidate,
                    outcome="batch_duplicate",
                    key=item.key,
                    embedding=item.embedding,
                    similarity=earlier[1],
                )
        decisions.append(decision)
        if decision.action == "write":
            kept.append(item)
    return decisions


def decide_against_neighbours(
    memory: NewMemory, neighbours: Sequence[Neighbour], *, thresholds: DedupThresholds | None = None
) -> DedupVerdict:
    """The store's `DedupRule`: decide one new memory against its nearest stored neighbours (the
    store found them in the database: same owner and team context, with their similarities).

    A neighbour under the same normalised key: write under that stored key (the upsert makes it an
    update or a pending revision). Else the most similar neighbour under another key that means
    the same (`DedupThresholds`): skip, it already says it. Else write."""
    thresholds = thresholds or DedupThresholds()
    key = normalize_key(memory.key)
    for near in neighbours:
        if near.memory.scope == memory.scope and normalize_key(near.memory.key) == key:
            return DedupVerdict(key=near.memory.key)
    value = _normal_value(memory.value)
    best: Neighbour | None = None
    for near in neighbours:
        if near.memory.scope != memory.scope:
            continue
        same = near.similarity >= thresholds.duplicate_similarity or (
            near.similarity >= thresholds.same_value_similarity and _normal_value(near.memory.value) == value
        )
        if same and (best is None or near.similarity > best.similarity):
            best = near
    return DedupVerdict(duplicate_of=best.memory.id) if best is not None else DedupVerdict()
