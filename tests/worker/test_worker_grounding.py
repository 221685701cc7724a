"""Grounding in the worker: candidates their conversation does not support are dropped as
`ungrounded` (counted, logged without their text), partial support lowers the confidence — for a
scripted LLM on a real nats-server and Postgres, and in the pure pipeline step."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from extraction.types import Candidate, TranscriptMessage
from tests.worker.worker_harness import Harness, conversation
from worker.planning import ground_candidates, grounding_sources

USER = TranscriptMessage(role="user", content="I live in Lisbon. We adopted a greyhound named Biscuit.")
ASSISTANT = TranscriptMessage(role="assistant", content="I'll suggest dog-friendly cafés near the Tagus.")


def candidate(key: str, value: str, *, scope: str = "user", confidence: float = 0.9) -> Candidate:
    return Candidate(key=key, value=value, confidence=confidence, scope=scope)  # type: ignore[arg-type]


def test_ground_candidates_drops_filler_and_invented_values_and_keeps_the_rest_in_order() -> None:
    kept, dropped = ground_candidates(
        [
            candidate("home city", "Lives in Lisbon"),
            candidate("home city", "I love it!"),
            candidate("dog", "Has a parrot named Kiwi"),
            candidate("dog", "Has a greyhound named Biscuit"),
        ],
        (USER, ASSISTANT),
    )
    assert [c.value for c in kept] == ["Lives in Lisbon", "Has a greyhound named Biscuit"]
    assert [(d.reason, d.candidate.value) for d in dropped] == [
        ("ungrounded", "I love it!"),
        ("ungrounded", "Has a parrot named Kiwi"),
    ]


def test_a_fact_naming_a_participant_by_the_name_the_event_gives_is_grounded() -> None:
    said = TranscriptMessage(role="user", content="Hey Caroline! I'm swamped with the kids & work.")
    named = Candidate(
        key="busy", value="Melanie is managing kids and work", confidence=0.9, scope="user", evidence=(1,)
    )
    assert ground_candidates([named], (said,))[0] == ()  # nobody says their own name
    assert ground_candidates([named], (said,), names=("Melanie", "Caroline"))[0] == (named,)
    # a name nobody in the conversation has is still unsupported
    invented = replace(named, value="Priya is managing kids and work")
    assert ground_candidates([invented], (said,), names=("Melanie", "Caroline"))[0] == ()


def test_an_assistants_suggestion_is_not_the_users_fact_but_grounds_a_persona_fact() -> None:
    suggestion = candidate("favourite cafes", "Likes dog-friendly cafés near the Tagus")
    assert ground_candidates([suggestion], (USER, ASSISTANT))[0] == ()
    persona = candidate("recommendations", "Suggests dog-friendly cafés near the Tagus", scope="persona")
    assert ground_candidates([persona], (USER, ASSISTANT))[0] == (persona,)
    assert grounding_sources(persona, (USER, ASSISTANT))[1] == (USER.content, ASSISTANT.content)


def test_partial_support_lowers_the_confidence() -> None:
    # an English value about a German conversation: it cannot be compared word for word
    german = TranscriptMessage(role="user", content="Ich arbeite als Bäcker, jeden Tag ab vier Uhr.")
    partial = candidate("job title", "Is a baker", confidence=0.9)
    (kept,), dropped = ground_candidates([partial], (german,))
    assert dropped == () and kept.confidence == pytest.approx(0.9 * 0.7)


def test_secrets_in_the_transcript_are_redacted_before_comparing() -> None:
    message = TranscriptMessage(role="user", content="My password is hunter2 and I live in Porto.")
    assert all("hunter2" not in text for text in grounding_sources(candidate("x", "y"), (message,))[1])


async def test_the_worker_drops_ungrounded_candidates_counts_them_and_logs_no_text(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    h.fake.set_extraction(
        {
            "memories": [
                {"key": "home city", "value": "Lives in Lisbon", "confidence": 0.9, "scope": "user"},
                {"key": "favourite place", "value": "I love it!", "confidence": 0.9, "scope": "user"},
                {"key": "dog", "value": "Has a parrot named Kiwi", "confidence": 0.9, "scope": "user"},
            ]
        }
    )
    user = uuid.uuid4()
    caplog.set_level(logging.INFO)
    said = conversation("I live in Lisbon with my greyhound.", "Lovely!", user_id=user)
    dropped = await h.drops_processing(said, "ungrounded")
    got = await h.memories_of(user)
    assert got == {"home city": "Lives in Lisbon"}
    assert dropped == 2
    lines = [r.getMessage() for r in caplog.records if "ungrounded" in r.getMessage()]
    assert len(lines) == 2
    assert not [line for line in lines for text in ("love it", "parrot", "Kiwi", "favourite") if text in line]


def test_the_demos_scripted_persona_facts_pass_and_a_persona_filler_does_not() -> None:
    samples = Path(__file__).resolve().parents[2] / "cli" / "samples"
    facts = json.loads((samples / "persona_script.json").read_text(encoding="utf-8"))["facts"]
    events = [json.loads(line) for line in (samples / "conversations.jsonl").read_text().splitlines() if line]
    checked = 0
    for event in events:
        messages = tuple(TranscriptMessage(role=m["role"], content=m["content"]) for m in event["messages"])
        said = " ".join(m.content for m in messages if m.role == "assistant")
        for fact in facts:
            if fact["when"] in said:
                persona = candidate(
                    fact["key"], fact["value"], scope="persona", confidence=fact["confidence"]
                )
                (kept,), _ = ground_candidates([persona], messages)
                assert kept.confidence >= 0.5  # above the default minimum confidence
                checked += 1
        filler = candidate("persona style", "I love it!", scope="persona")
        assert ground_candidates([filler], messages)[0] == ()
    assert checked == len(facts)
