"""The extracted unit: LoCoMo sessions as `conversation.ended` events (pure), and one run of
`pmem eval locomo --unit extracted` through the real pipeline (rules extractor) on the fixture,
resumed from its checkpoint."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from cli.main import main
from evaluation.extracted import session_events, usage_summary, without_evidence_recall
from evaluation.locomo import load_locomo

FIXTURE = Path(__file__).parent / "locomo_tiny.json"


def test_each_session_is_sent_once_as_each_speaker_to_one_owner() -> None:
    conversation = load_locomo(FIXTURE)[0]
    owner = uuid.uuid4()
    events = session_events(conversation, owner)
    sessions = sorted({t.session for t in conversation.turns})
    assert [(e.session, e.speaker) for e in events] == [
        (s, speaker) for s in sessions for speaker in conversation.speakers
    ]
    first = events[0]
    turns = [t for t in conversation.turns if t.session == first.session]
    assert [m.role for m in first.event.messages] == [
        "user" if t.speaker == first.speaker else "assistant" for t in turns
    ]
    assert {e.event.user_id for e in events} == {owner}
    assert len({e.event.event_id for e in events}) == len(events)
    assert session_events(conversation, owner)[0].event.event_id == first.event.event_id


def test_extracted_summaries_drop_evidence_recall_and_usage_is_per_event() -> None:
    summary = {"questions": 2, "recall@5": 0.0, "answer_recall@5": 0.5, "by_category": {"x": {"recall@5": 0}}}
    assert without_evidence_recall(summary) == {
        "questions": 2,
        "answer_recall@5": 0.5,
        "by_category": {"x": {}},
    }
    used = usage_summary([{"prompt_tokens": 100, "llm_calls": 1, "written": 2}, {"prompt_tokens": 50}])
    assert used["events"] == 2 and used["prompt_tokens_per_event"] == 75 and used["written_total"] == 2


@pytest.mark.slow
def test_extracted_run_reports_answer_recall_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PMEM_EMBEDDING_PROVIDER", raising=False)
    monkeypatch.setenv("PMEM_EXTRACTOR", "rules")
    argv = [
        "eval", "locomo", str(FIXTURE), "--unit", "extracted", "--json", "--store", "sqlite",
        "--embedding-provider", "hashing", "--embedding-cache", str(tmp_path / "cache"),
        "--data-dir", str(tmp_path / "db"), "--retriever", "hybrid",
    ]  # fmt: skip
    assert main(argv) == 0
    first = capsys.readouterr()
    report = json.loads(first.out)
    assert report["extractor"] == "rules"
    assert report["extraction"]["events"] == 6
    hybrid = report["retrievers"]["hybrid"]
    assert "recall@5" not in hybrid and 0.0 <= hybrid["answer_recall@50"] <= 1.0
    assert hybrid["answer_questions"] == 8  # the 9 questions less the adversarial one
    assert list((tmp_path / "cache").glob("extracted-*.json"))

    assert main(argv) == 0
    again = capsys.readouterr()
    assert "resuming: 2 conversation(s) done" in again.err
    assert json.loads(again.out)["retrievers"] == report["retrievers"]
