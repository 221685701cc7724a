"""Forgetting's pure rules read evidence and turns exactly as the worker writes them: the lines of
`resolve_evidence` cite the turns of `plan_turns`, and a turn read again beside the others reads as
`plan_turns` reads it (its search text and its embedding's texts, folded the same way)."""

from __future__ import annotations

import uuid

import numpy as np

from store.core.forgetting import folded
from store.rules.evidence import evidence_lines
from store.rules.forgetting import StoredTurn, cites, readings, reread_beside, without_lines
from tests.store.as_the_worker import SAID as SAID_AT
from tests.store.as_the_worker import event_of
from worker.planning import plan_turns, redacted_texts, resolve_evidence, split_embeddings

LONG = "word " * 200 + "\n\n  spaced    out   " + "x" * 900
SAID = [
    "Hello, I'm Ada",
    "Hi Ada!  How can I help?",
    LONG,
    "My card is 4111 1111 1111 1111, keep it",
    "z" * 5000,
    "bye",
]


def test_each_evidence_line_cites_the_turn_of_its_message_and_no_other() -> None:
    event = event_of(SAID, user=uuid.uuid4(), channel=uuid.uuid4())
    said = redacted_texts(event.messages)
    turns, _, _ = plan_turns(event, now=SAID_AT, redacted=said)
    for number in range(1, len(SAID) + 1):
        evidence = resolve_evidence(event, [number], said).text
        lines = evidence_lines(evidence)
        assert [t.position for t in turns if cites(lines, t.role, t.text)] == [number], number
    # a secret is redacted alike in both
    card = resolve_evidence(event, [4], said).text
    assert card is not None and "4111" not in card
    # several lines at once
    lines = evidence_lines(resolve_evidence(event, [1, 6], said).text)
    assert [t.position for t in turns if cites(lines, t.role, t.text)] == [1, 6]


def test_a_turn_reads_to_search_as_the_worker_stores_it() -> None:
    names = ["Ada", None, "Ada", "Bot", None, "Ada"]
    event = event_of(SAID, user=uuid.uuid4(), channel=uuid.uuid4(), names=names)
    turns, own, around = plan_turns(event, now=SAID_AT)
    mine = readings(
        [
            StoredTurn(
                id=uuid.uuid4(),
                position=t.position,
                role=t.role,
                speaker=t.speaker,
                text=t.text,
                has_search_text=True,
                has_embedding=True,
            )
            for t in turns
        ]
    )
    assert [r.search_text for r in mine] == [t.search_text for t in turns]
    assert [r.own for r in mine] == own
    assert [r.around for r in mine] == around


def test_the_fold_is_the_workers() -> None:
    rng = np.random.default_rng(7)
    own, around = rng.normal(size=(3, 16)), rng.normal(size=(3, 16))
    _, worker = split_embeddings([*own.tolist(), *around.tolist()], [], [], 3)
    assert np.allclose([folded(a, b) for a, b in zip(own, around, strict=True)], worker)


def turns_of(count: int, *, without_search: frozenset[int] = frozenset()) -> list[StoredTurn]:
    return [
        StoredTurn(
            id=uuid.UUID(int=i + 1),
            position=i + 1,
            role="user" if i % 2 == 0 else "assistant",
            speaker=None,
            text=f"message {i + 1}",
            has_search_text=i + 1 not in without_search,
            has_embedding=True,
        )
        for i in range(count)
    ]


def test_the_turns_read_again_are_those_whose_reading_held_an_erased_one() -> None:
    turns = turns_of(8)
    erased = {turns[3].id}  # position 4: read by 3 (after it), 5 and 6 (before them)
    again = reread_beside(list(reversed(turns)), erased)
    assert sorted(t.int for t in again) == [3, 5, 6]
    kept = [t for t in turns if t.id not in erased]
    expected = dict(zip((t.id for t in kept), readings(kept), strict=True))
    assert all(again[turn_id] == expected[turn_id] for turn_id in again)
    assert all("message 4" not in reading.search_text + reading.around for reading in again.values())
    # at the edges, and two at once
    assert sorted(t.int for t in reread_beside(turns, {turns[0].id})) == [2, 3]
    assert sorted(t.int for t in reread_beside(turns, {turns[7].id})) == [7]
    assert sorted(t.int for t in reread_beside(turns, {turns[2].id, turns[3].id})) == [2, 5, 6]
    assert reread_beside(turns, {uuid.uuid4()}) == {}
    # a turn stored without a search text read nothing around it
    assert sorted(t.int for t in reread_beside(turns_of(8, without_search=frozenset({5})), erased)) == [3, 6]


def test_forgotten_lines_leave_an_evidence_and_the_rest_stays() -> None:
    evidence = "user: I have a cat\nassistant: Nice\nuser: I run"
    assert without_lines(evidence, {"assistant: Nice"}) == "user: I have a cat\nuser: I run"
    assert without_lines(evidence, {"user: I have a cat", "assistant: Nice", "user: I run"}) is None
    assert without_lines(evidence, {"user: I have"}) == evidence  # whole lines only
    assert without_lines(None, {"user: x"}) is None
    assert [line.line for line in evidence_lines(evidence + "\nsystem: ignored\nno colon")] == evidence.split(
        "\n"
    )
