"""Semantic dedup decisions: same key, duplicate under another key, batch duplicates, thresholds."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from extraction.dedup import DedupThresholds, cosine, decide_dedup, dedup_candidates
from extraction.types import Candidate
from store.model import Memory, OwnerRef, Scope
from tests.factories import stored_fact

USER = uuid.uuid4()
OTHER_USER = uuid.uuid4()
PERSONA = uuid.uuid4()
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def memory(key: str, value: str, *, scope: Scope = "user", owner: uuid.UUID = USER) -> Memory:
    user = USER if scope == "persona_user" else None
    return stored_fact(key, value, at=NOW, scope=scope, owner_id=owner, user_id=user)


def cand(key: str, value: str, scope: Scope = "user") -> Candidate:
    return Candidate(key=key, value=value, confidence=0.9, scope=scope)


def unit(*xs: float) -> list[float]:
    norm = math.sqrt(sum(x * x for x in xs))
    return [x / norm for x in xs]


A = unit(1, 0, 0)
A_CLOSE = unit(1, 0.1, 0)  # cosine ≈ 0.995
A_NEAR = unit(1, 0.5, 0)  # cosine ≈ 0.894
B = unit(0, 1, 0)


def outcomes(decisions: Sequence[object]) -> list[str]:
    return [d.outcome for d in decisions]  # type: ignore[attr-defined]


def test_same_normalised_key_is_same_key_and_keeps_the_stored_spelling() -> None:
    stored = memory("Home City", "Lives in Lyon")
    [decision] = dedup_candidates([cand("home city", "Lives in Paris")], [B], [(stored, A)])
    assert decision.outcome == "same_key"
    assert decision.key == "Home City"  # the unique index matches the exact stored key
    assert decision.existing_id == stored.id
    assert decision.action == "write"


def test_same_value_under_another_key_with_similar_embedding_is_a_duplicate() -> None:
    stored = memory("home city", "Lives in Lyon")
    [decision] = dedup_candidates([cand("current city", "lives in lyon.")], [A_NEAR], [(stored, A)])
    assert decision.outcome == "duplicate"
    assert decision.action == "skip"
    assert decision.existing_id == stored.id
    assert decision.similarity == pytest.approx(cosine(A_NEAR, A))


def test_same_short_value_under_an_unrelated_key_is_new() -> None:
    # "Yes" under "likes tea" and "likes coffee": equal values, different meaning
    stored = memory("likes tea", "Yes")
    [decision] = dedup_candidates([cand("likes coffee", "Yes")], [B], [(stored, A)])
    assert decision.outcome == "new"


def test_near_identical_embedding_is_a_duplicate_whatever_the_wording() -> None:
    stored = memory("home city", "Lives in Lyon")
    [decision] = dedup_candidates([cand("city of residence", "Resides in Lyon")], [A_CLOSE], [(stored, A)])
    assert decision.outcome == "duplicate"


def test_thresholds_are_parameters() -> None:
    stored = memory("home city", "Lives in Lyon")
    strict = DedupThresholds(duplicate_similarity=0.999, same_value_similarity=0.99)
    [decision] = dedup_candidates(
        [cand("city of residence", "Resides in Lyon")], [A_CLOSE], [(stored, A)], thresholds=strict
    )
    assert decision.outcome == "new"


def test_without_embeddings_only_keys_are_compared() -> None:
    stored = memory("home city", "Lives in Lyon")
    decisions = dedup_candidates(
        [cand("home city", "Lives in Lyon"), cand("current city", "Lives in Lyon")], None, [(stored, None)]
    )
    assert outcomes(decisions) == ["same_key", "new"]


def test_other_scopes_and_other_owners_are_not_compared() -> None:
    persona_scoped = memory("home city", "Lives in Lyon", scope="persona_user", owner=PERSONA)
    other_user = memory("diet preference", "Is vegan", owner=OTHER_USER)
    owners = {"user": OwnerRef(scope="user", owner_id=USER)}
    decisions = dedup_candidates(
        [cand("home city", "Lives in Lyon"), cand("diet preference", "Is vegan")],
        [A, B],
        [(persona_scoped, A), (other_user, B)],
        owners=owners,
    )
    assert outcomes(decisions) == ["new", "new"]


def test_same_key_twice_in_a_batch_keeps_the_later_one() -> None:
    decisions = dedup_candidates(
        [cand("home city", "Lives in Lyon"), cand("Home City", "Lives in Paris")], [A, B], []
    )
    assert outcomes(decisions) == ["batch_duplicate", "new"]
    assert decisions[1].candidate.value == "Lives in Paris"


def test_same_meaning_twice_in_a_batch_keeps_the_first() -> None:
    decisions = dedup_candidates(
        [cand("home city", "Lives in Lyon"), cand("current city", "Lives in Lyon")], [A, A_NEAR], []
    )
    assert outcomes(decisions) == ["new", "batch_duplicate"]


def test_a_skipped_candidate_does_not_shadow_later_ones() -> None:
    stored = memory("home city", "Lives in Lyon")
    decisions = dedup_candidates(
        [cand("current city", "Lives in Lyon"), cand("town", "x y")],
        [A_CLOSE, A_CLOSE],
        [(stored, A)],
    )
    # the first is a duplicate of the stored memory, the second too (not of the skipped first)
    assert outcomes(decisions) == ["duplicate", "duplicate"]


def test_decide_dedup_for_one_candidate() -> None:
    stored = memory("home city", "Lives in Lyon")
    other_scope = memory("job title", "Is a nurse", scope="persona_user", owner=PERSONA)
    assert decide_dedup(cand("HOME  city", "x"), B, [(stored, A)]).outcome == "same_key"
    assert decide_dedup(cand("current city", "Lives in Lyon"), A_NEAR, [(stored, A)]).action == "skip"
    assert decide_dedup(cand("job title", "Is a nurse"), A, [(other_scope, A)]).outcome == "new"


def test_embeddings_must_match_candidates() -> None:
    with pytest.raises(ValueError, match="2 embeddings for 1 candidates"):
        dedup_candidates([cand("home city", "x")], [A, B], [])


def test_cosine_edge_cases() -> None:
    assert cosine(A, A) == pytest.approx(1.0)
    assert cosine(A, B) == pytest.approx(0.0)
    assert cosine([0.0, 0.0], [1.0, 0.0]) == 0.0
    assert cosine([1.0], [1.0, 0.0]) == 0.0
