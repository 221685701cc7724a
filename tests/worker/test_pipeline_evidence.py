"""The worker's pure evidence and turn planning: what a fact's message numbers resolve to, which
messages become turns, and how one embeddings batch splits back into memories' and turns' vectors."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime

import pytest

from extraction.types import Candidate
from store.rules.evidence import EVIDENCE_MESSAGE_CHARS
from worker.events import MESSAGE_NAME_MAX_CHARS, ConversationEnded
from worker.planning import (
    EVIDENCE_MAX_CHARS,
    Evidence,
    build_row,
    embedding_batch,
    fold_evidence,
    plan_turns,
    resolve_evidence,
    split_embeddings,
)

OCCURRED = datetime(2026, 11, 29, 19, 0, tzinfo=UTC)
SAID = datetime(2026, 11, 29, 18, 55, tzinfo=UTC)


def event(*messages: dict[str, object]) -> ConversationEnded:
    return ConversationEnded.model_validate(
        {
            "event_id": str(uuid.uuid4()),
            "type": "conversation.ended",
            "occurred_at": OCCURRED.isoformat(),
            "channel_id": str(uuid.uuid4()),
            "user_id": str(uuid.uuid4()),
            "messages": list(messages),
        }
    )


CONVERSATION = event(
    {"role": "system", "content": "You are a bot."},
    {"role": "user", "content": "I'm vegan, my card is 4111 1111 1111 1111", "at": SAID.isoformat()},
    {"role": "assistant", "content": "Noted."},
    {"role": "user", "content": "   "},
)


def test_evidence_is_the_cited_messages_redacted_with_their_role_and_time() -> None:
    found = resolve_evidence(CONVERSATION, (2, 3))
    assert found.text is not None and found.text.startswith("user: I'm vegan, my card is [REDACTED")
    assert "4111" not in found.text and found.text.endswith("\nassistant: Noted.")
    assert found.observed_at == SAID and found.dropped == 0


def test_a_number_naming_no_message_is_dropped_never_the_fact() -> None:
    found = resolve_evidence(CONVERSATION, (9, 1, 4, 3))  # out of range, system, empty, fine
    assert found == Evidence(text="assistant: Noted.", observed_at=OCCURRED, dropped=3)
    none = resolve_evidence(CONVERSATION, (0, 99))
    assert none == Evidence(text=None, observed_at=OCCURRED, dropped=2)
    row = build_row(
        CONVERSATION,
        Candidate(key="diet", value="Is vegan", confidence=0.9, scope="user", evidence=(99,)),
        None,
    )
    assert row.value == "Is vegan" and row.evidence is None and row.observed_at == OCCURRED


def test_evidence_is_capped_per_message_and_in_all() -> None:
    message: dict[str, object] = {"role": "user", "content": "word " * 1000}
    long = event(*([message] * 10))
    found = resolve_evidence(long, tuple(range(1, 11)))
    assert found.text is not None and len(found.text) <= EVIDENCE_MAX_CHARS
    assert all(len(line) <= len("user: ") + EVIDENCE_MESSAGE_CHARS for line in found.text.split("\n"))


def test_turns_are_the_user_and_assistant_messages_numbered_as_the_prompt_numbers_them() -> None:
    turns, own, around = plan_turns(CONVERSATION, now=OCCURRED)
    assert [(t.position, t.role, t.at) for t in turns] == [(2, "user", SAID), (3, "assistant", OCCURRED)]
    assert "4111" not in turns[0].text
    assert own[1] == 'assistant said, "Noted."'
    assert around[1] == own[0] + '\nassistant said, "Noted."'  # the turn after what it answers


def unit(v: list[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def test_one_batch_splits_back_into_folded_memory_and_turn_vectors() -> None:
    cands = [
        Candidate(key="diet", value="Is vegan", confidence=0.9, scope="user", evidence=(2,)),
        Candidate(key="pet", value="Has a cat", confidence=0.9, scope="user"),
    ]
    evidences = [resolve_evidence(CONVERSATION, c.evidence) for c in cands]
    turns, own, around = plan_turns(CONVERSATION, now=OCCURRED)
    texts = embedding_batch(cands, evidences, own, around)
    assert len(texts) == 2 + 1 + 2 * len(turns)
    assert texts[2].startswith("user: I'm vegan") and texts[2].endswith("diet: Is vegan")
    basis = [[1.0 if i == j else 0.0 for i in range(7)] for j in range(7)]
    memories, turn_vectors = split_embeddings(basis, cands, evidences, len(turns))
    assert memories[0] == fold_evidence(basis[0], basis[2], 1.0)
    assert memories[1] == basis[1]  # no evidence: the fact's own vector
    assert turn_vectors[0] == unit([0, 0, 0, 1.0, 0, 1.0, 0])
    assert turn_vectors[1] == unit([0, 0, 0, 0, 1.0, 0, 1.0])
    assert fold_evidence(basis[0], basis[2], 0.0) == basis[0]
    leaning = fold_evidence(basis[0], basis[2], 3.0)
    assert leaning[2] > leaning[0] > 0


def test_a_named_turn_reads_and_is_searched_as_its_speaker_with_the_turns_around_it() -> None:
    named = event(
        {"role": "user", "content": "Where did you sail?", "name": "Bea"},
        {"role": "assistant", "content": "Madeira, twice!", "name": "  Ada\n Lovelace "},
        {"role": "user", "content": "Lovely"},  # no name: the role stands for the speaker
        {"role": "assistant", "content": "Next year Porto", "name": "Ada Lovelace"},
    )
    turns, own, around = plan_turns(named, now=OCCURRED)
    assert [t.speaker for t in turns] == ["Bea", "Ada Lovelace", None, "Ada Lovelace"]
    bea, ada = 'Bea said, "Where did you sail?"', 'Ada Lovelace said, "Madeira, twice!"'
    assert own == [bea, ada, 'user said, "Lovely"', own[3]]
    assert around[1] == f"{bea}\n{ada}"
    assert [t.text for t in turns] == ["Where did you sail?", "Madeira, twice!", "Lovely", "Next year Porto"]
    # two turns before, the turn, one after
    assert turns[0].search_text == f"{bea}\n{ada}"
    assert turns[3].search_text == f'{ada}\nuser said, "Lovely"\nAda Lovelace said, "Next year Porto"'
    assert turns[2].search_text == "\n".join(own)


def test_a_message_name_is_optional_and_one_that_is_not_a_string_is_left_out() -> None:
    parsed = event(
        {"role": "user", "content": "hi", "name": 42},
        {"role": "user", "content": "hi", "name": "   "},
        {"role": "user", "content": "hi", "name": "x" * 500},
        {"role": "user", "content": "hi"},
    )
    assert [m.name for m in parsed.messages] == [None, None, "x" * MESSAGE_NAME_MAX_CHARS, None]


def test_a_message_name_is_admitted_before_it_is_cut() -> None:
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlX29mX3RoZV90b2tlbg"
    parsed = event({"role": "user", "content": "hi", "name": f"Bea\u202e {token}"})
    assert parsed.messages[0].name == "Bea [REDACTED:jwt]"


def test_invisible_characters_and_secrets_never_reach_turns_or_evidence() -> None:
    smuggled = event(
        {
            "role": "user",
            "content": "I live in Lis\u200bbon, key sk-proj1234\u2066567890abcdefABCDEF\U000e0041",
        },
        {"role": "assistant", "content": "Noted\u202e."},
    )
    turns, own, _ = plan_turns(smuggled, now=OCCURRED)
    assert [t.text for t in turns] == ["I live in Lisbon, key [REDACTED:api_key]", "Noted."]
    assert "sk-proj" not in "".join(own)
    found = resolve_evidence(smuggled, (1, 2))
    assert found.text == "user: I live in Lisbon, key [REDACTED:api_key]\nassistant: Noted."


def test_a_message_without_content_is_not_a_turn_and_the_reason_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    said = event(
        {"role": "user", "content": "my key: sk-proj1234567890abcdefABCDEF"},
        {"role": "user", "content": "sk-proj1234567890abcdefABCDEF"},
        {"role": "assistant", "content": "..."},
        {"role": "user", "content": "\u200b?!"},
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": "👍"},
    )
    with caplog.at_level("INFO", logger="pmem.pipeline"):
        turns, _, _ = plan_turns(said, now=OCCURRED)
    assert [(t.position, t.text) for t in turns] == [(1, "my key: [REDACTED:api_key]"), (5, "ok"), (6, "👍")]
    logged = [r.getMessage() for r in caplog.records if getattr(r, "rejection", "") == "turn_without_content"]
    assert [line.split(" of event")[0] for line in logged] == ["turn 2", "turn 3", "turn 4"]
    assert (
        "only a redacted secret" in logged[0] and "no words" in logged[1] and "sk-proj" not in "".join(logged)
    )
