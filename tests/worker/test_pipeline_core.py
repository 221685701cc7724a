"""The pure core of the pipeline: policy, owners, screening, rows and failure decisions."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
import sqlalchemy.exc

from extraction.errors import (
    PermanentEmbeddingError,
    PermanentExtractionError,
    TransientEmbeddingError,
    TransientExtractionError,
)
from extraction.types import Candidate
from store.errors import StoreIntegrityError, StoreTimeout, StoreUnavailable
from store.model import MemorySettings, OwnerRef
from worker.events import ConversationEnded
from worker.planning import (
    allowed_scopes,
    build_row,
    decide_failure,
    is_database_unavailable,
    owner_for,
    plan_rows,
    retry_delay,
    screen_candidates,
)

USER, PERSONA, CHANNEL = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


def make_event(*, persona: bool) -> ConversationEnded:
    return ConversationEnded.model_validate(
        {
            "event_id": str(uuid.uuid4()),
            "type": "conversation.ended",
            "channel_id": str(CHANNEL),
            "user_id": str(USER),
            "persona_id": str(PERSONA) if persona else None,
            "messages": [{"role": "user", "content": "hello"}],
        }
    )


def cand(key: str, scope: Any = "user", confidence: float = 0.9, value: str = "v") -> Candidate:
    return Candidate(key=key, value=value, confidence=confidence, scope=scope)


@pytest.mark.parametrize(
    ("persona", "policy", "expected"),
    [
        (False, MemorySettings(), ("user",)),
        (False, MemorySettings(persona_learning=True), ("user",)),
        (True, MemorySettings(), ("user", "persona_user")),
        (True, MemorySettings(persona_learning=True), ("user", "persona", "persona_user")),
        (True, MemorySettings(enabled=False, persona_learning=True), ()),
        (False, MemorySettings(enabled=False), ()),
    ],
)
def test_allowed_scopes(persona: bool, policy: MemorySettings, expected: tuple[str, ...]) -> None:
    assert allowed_scopes(make_event(persona=persona), policy) == expected


def test_owners_follow_the_seed() -> None:
    event = make_event(persona=True)
    assert owner_for("user", event) == OwnerRef(scope="user", owner_id=USER)
    assert owner_for("persona", event) == OwnerRef(scope="persona", owner_id=PERSONA)
    assert owner_for("persona_user", event) == OwnerRef(scope="persona_user", owner_id=PERSONA, user_id=USER)
    with pytest.raises(ValueError, match="needs a persona"):
        owner_for("persona", make_event(persona=False))


def test_screen_drops_forbidden_scopes_and_low_confidence() -> None:
    kept, dropped = screen_candidates(
        [
            cand("diet"),
            cand("tone", scope="persona"),
            cand("maybe", confidence=0.2),
            cand("nan", confidence=float("nan")),
            cand("edge", confidence=0.5),
        ],
        allowed=("user", "persona_user"),
        min_confidence=0.5,
    )
    assert [c.key for c in kept] == ["diet", "edge"]
    assert {(d.candidate.key, d.reason) for d in dropped} == {
        ("tone", "scope_not_allowed"),
        ("maybe", "low_confidence"),
        ("nan", "low_confidence"),
    }


def test_rows_are_pending_review_with_owner_and_channel() -> None:
    event = make_event(persona=True)
    row = build_row(event, cand("likes jazz", scope="persona_user", confidence=1.7), [0.1, 0.2])
    assert row.status == "pending_review"
    assert (row.owner_id, row.user_id, row.source_channel_id) == (PERSONA, USER, CHANNEL)
    assert row.confidence == 1.0
    assert row.embedding == [0.1, 0.2]
    user_row = build_row(event, cand("diet"), None)
    assert (user_row.owner_id, user_row.user_id) == (USER, None)


def test_plan_rows_dedups_within_the_batch_and_keeps_owners() -> None:
    event = make_event(persona=True)
    candidates = [
        cand("diet", value="vegetarian"),
        cand("diet", value="vegan"),
        cand("city", scope="persona_user"),
    ]
    vectors = [[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]]
    rows, dropped = plan_rows(event, ("user", "persona_user"), candidates, vectors, [])
    assert sorted((r.scope, r.key, r.value) for r in rows) == [
        ("persona_user", "city", "v"),
        ("user", "diet", "vegan"),
    ]
    assert [d.reason for d in dropped] == ["duplicate_in_event"]


@pytest.mark.parametrize(
    ("exc", "delivered", "action", "label"),
    [
        (TransientExtractionError("429"), 1, "retry", "llm"),
        (TransientExtractionError("500"), 5, "dead_letter", "llm_exhausted"),
        (PermanentExtractionError("bad output"), 1, "dead_letter", "llm_permanent"),
        (TransientEmbeddingError("503"), 2, "retry", "embedding"),
        (PermanentEmbeddingError("dim"), 1, "dead_letter", "embedding_permanent"),
        (StoreUnavailable("connection refused"), 1, "retry", "database"),
        (StoreTimeout("canceling statement due to statement timeout"), 1, "retry", "database"),
        (StoreIntegrityError("duplicate key"), 1, "retry", "unexpected"),
        # the pipeline knows no driver exceptions: the store translates them
        (sqlalchemy.exc.OperationalError("select", {}, Exception("down")), 1, "retry", "unexpected"),
        (KeyError("bug"), 1, "retry", "unexpected"),
        (KeyError("bug"), 5, "dead_letter", "unexpected_exhausted"),
    ],
)
def test_decide_failure(exc: BaseException, delivered: int, action: str, label: str) -> None:
    decision = decide_failure(
        exc, delivery_count=delivered, max_deliver=5, retry_delay_s=2.0, max_retry_delay_s=60
    )
    assert (decision.action, decision.label) == (action, label)
    assert decision.reason


@pytest.mark.parametrize(("retry_after_s", "delay_s"), [(7.0, 7.0), (3600.0, 60)])
def test_retry_after_wins_over_backoff_and_is_capped(retry_after_s: float, delay_s: float) -> None:
    decision = decide_failure(
        TransientExtractionError("429", retry_after_s=retry_after_s),
        delivery_count=1,
        max_deliver=5,
        retry_delay_s=1.0,
        max_retry_delay_s=60,
    )
    assert decision.delay_s == delay_s


def test_backoff_is_exponential_and_capped() -> None:
    assert [retry_delay(n, base_s=1.0, max_s=10.0) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert retry_delay(10_000, base_s=1.0, max_s=300.0) == 300.0


def test_only_the_stores_own_unavailable_error_is_an_outage() -> None:
    assert is_database_unavailable(StoreUnavailable("connection refused"))
    assert not is_database_unavailable(psycopg.OperationalError("connection refused"))
    assert not is_database_unavailable(StoreTimeout("statement timeout"))
    assert not is_database_unavailable(StoreIntegrityError("duplicate key"))
    assert not is_database_unavailable(ValueError("bad value"))


def test_rows_carry_the_conversations_team() -> None:
    team = uuid.uuid4()
    event = make_event(persona=True).model_copy(update={"team_id": team})
    assert build_row(event, cand("diet"), None).team_id == team
    assert build_row(make_event(persona=False), cand("diet"), None).team_id is None


def test_a_deadline_is_retried_then_dead_lettered_with_its_own_label() -> None:
    from worker.planning import EventDeadlineExceeded

    exc = EventDeadlineExceeded("the event took longer than PMEM_EVENT_TIMEOUT_S=1s")
    first = decide_failure(exc, delivery_count=1, max_deliver=2, retry_delay_s=1.0, max_retry_delay_s=9)
    last = decide_failure(exc, delivery_count=2, max_deliver=2, retry_delay_s=1.0, max_retry_delay_s=9)
    assert (first.action, first.label) == ("retry", "deadline")
    assert (last.action, last.label) == ("dead_letter", "deadline_exhausted")
    assert "PMEM_EVENT_TIMEOUT_S=1s" in last.reason


def test_failure_reasons_are_one_line() -> None:
    exc = RuntimeError("(psycopg.DataError) bad\n[SQL: INSERT INTO memories …]\n(Background …)")
    decision = decide_failure(exc, delivery_count=9, max_deliver=2, retry_delay_s=1.0, max_retry_delay_s=9)
    assert "\n" not in decision.reason and "INSERT" not in decision.reason
