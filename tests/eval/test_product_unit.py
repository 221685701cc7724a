"""The product unit: which dialog turn a recalled item stands for (pure), and one run of
`pmem eval locomo --unit product` through the real pipeline and the product's recall on the fixture,
on both stores."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from cli.commands.evaluate import options_from_args
from cli.main import build_parser, main
from evaluation.extracted import session_events
from evaluation.locomo import load_locomo
from evaluation.options import parse_includes
from evaluation.product import (
    Quote,
    Recalled,
    SessionIndex,
    evidence_quotes,
    include_kinds,
    kinds_count,
    question_result,
    session_index,
)
from evaluation.product_run import WithoutEvidence
from extraction.types import Candidate, ExtractionResult
from tests.factories import past_turn

FIXTURE = Path(__file__).parent / "locomo_tiny.json"
SESSION_1 = uuid.uuid4()
SESSION_2 = uuid.uuid4()
INDEX = SessionIndex(
    by_channel={
        SESSION_1: (
            ("D1:1", "Hi Bo! I adopted a grey cat named Pixel last week."),
            ("D1:2", "Congrats! I have been learning to play the cello."),
            ("D1:3", "Yes"),
        ),
        SESSION_2: (
            ("D2:1", "Congrats! I have been learning to play the cello."),
            ("D2:2", "Write to me at ada@example.org about the cat, please."),
        ),
    }
)


def test_a_quote_is_located_by_its_position_in_its_conversation() -> None:
    assert INDEX.locate(Quote(channel_id=SESSION_1, position=1, text="")) == "D1:2"
    # the same words in another session: the conversation decides
    assert INDEX.locate(Quote(channel_id=SESSION_2, position=0, text="")) == "D2:1"


def test_without_a_usable_position_a_quote_is_located_by_its_text() -> None:
    same_words = "congrats!  I have been LEARNING to play the cello"
    assert INDEX.locate(Quote(channel_id=SESSION_2, position=None, text=same_words)) == "D2:1"
    assert INDEX.locate(Quote(channel_id=SESSION_1, position=7, text=same_words)) == "D1:2"
    capped = "Hi Bo! I adopted a grey cat"
    assert INDEX.locate(Quote(channel_id=SESSION_1, position=None, text=capped)) == "D1:1"
    redacted = "Write to me at [email] about the cat, please."
    assert INDEX.locate(Quote(channel_id=SESSION_2, position=None, text=redacted)) == "D2:2"
    # no channel: any session; nothing alike: no turn; a short word matches only exactly
    anywhere = Quote(channel_id=None, position=None, text="adopted a grey cat named Pixel")
    assert INDEX.locate(anywhere) == "D1:1"
    assert INDEX.locate(Quote(channel_id=SESSION_1, position=None, text="Bo plays the tuba")) is None
    assert INDEX.locate(Quote(channel_id=SESSION_2, position=None, text="yes")) == "D1:3"  # exact
    assert INDEX.locate(Quote(channel_id=SESSION_1, position=None, text="Hi")) is None
    assert INDEX.locate(Quote(channel_id=uuid.uuid4(), position=0, text="Yes")) is None
    # words its own conversation does not hold (a restated fact keeps the later conversation)
    earlier = Quote(channel_id=SESSION_1, position=None, text="Write to me at ada@example.org about the cat")
    assert INDEX.locate(earlier) == "D2:2"


def test_a_memory_s_evidence_lines_become_quotes_of_its_conversation() -> None:
    evidence = "user: Hi Bo! I adopted a grey cat\nassistant: Congrats: truly\n\nnote: kept as said"
    quotes = evidence_quotes(evidence, SESSION_1)
    assert [q.text for q in quotes] == [
        "Hi Bo! I adopted a grey cat",
        "Congrats: truly",
    ]  # a line that is not `role: text` quotes no message
    assert {q.channel_id for q in quotes} == {SESSION_1} and {q.position for q in quotes} == {None}
    assert evidence_quotes(None, SESSION_1) == () == evidence_quotes("", None)
    assert include_kinds("both") == ("memories", "turns") and include_kinds("turns") == ("turns",)


def test_a_memory_covers_its_evidence_and_a_turn_itself() -> None:
    memory = Recalled(
        kind="memory",
        text="pet: has a cat named Pixel",
        quotes=(
            Quote(channel_id=SESSION_1, position=0, text=""),
            Quote(channel_id=SESSION_2, position=1, text=""),
            Quote(channel_id=SESSION_1, position=0, text=""),
            Quote(channel_id=SESSION_1, position=None, text="nothing like it"),
        ),
    )
    turn = Recalled(kind="turn", text="Yes", quotes=(Quote(channel_id=SESSION_1, position=2, text="Yes"),))
    bare = Recalled(kind="memory", text="job: biologist", quotes=())
    assert INDEX.dia_ids(memory) == ("D1:1", "D2:2")
    assert INDEX.dia_ids(turn) == ("D1:3",)
    assert INDEX.dia_ids(bare) == ()

    question = load_locomo(FIXTURE)[0].questions[0]  # the cat's name, evidence D1:1
    result = question_result(question, [bare, memory, turn], INDEX)
    assert result.ranked == ((), ("D1:1", "D2:2"), ("D1:3",))
    assert result.texts == ("job: biologist", "pet: has a cat named Pixel", "Yes")
    assert result.evidence == ("D1:1",) and result.answer == "Pixel"
    assert kinds_count([[bare, memory, turn], [turn]], 2) == {"memories": 1.0, "turns": 0.5}


def test_the_index_follows_the_events_the_runner_sends() -> None:
    conversation = load_locomo(FIXTURE)[0]
    owner = uuid.uuid4()
    index = session_index(conversation, owner)
    events = session_events(conversation, owner)
    assert set(index.by_channel) == {e.event.channel_id for e in events}
    for item in events:
        turns = [t for t in conversation.turns if t.session == item.session]
        channel = index.by_channel[item.event.channel_id]
        assert [dia_id for dia_id, _ in channel] == [t.dia_id for t in turns]
        assert [text for _, text in channel] == [m.content for m in item.event.messages]
    # an image turn is located by the text the product received (with its caption)
    shared = next(t for t in conversation.turns if t.blip_caption)
    channel_id = next(e.event.channel_id for e in events if e.session == shared.session)
    sent = dict(index.by_channel[channel_id])[shared.dia_id]
    assert "research boat" in sent
    assert index.locate(Quote(channel_id=channel_id, position=None, text=sent)) == shared.dia_id


@pytest.mark.slow
@pytest.mark.parametrize("store", ["postgres", "sqlite"])
def test_product_run_sends_every_session_and_asks_every_question(
    store: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PMEM_EMBEDDING_PROVIDER", raising=False)
    monkeypatch.setenv("PMEM_EXTRACTOR", "rules")
    argv = [
        "eval", "locomo", str(FIXTURE), "--unit", "product", "--json", "--store", store,
        "--embedding-provider", "hashing", "--no-embedding-cache", "--data-dir", str(tmp_path / "db"),
        "--k", "1,10,50", "--include", "memories,turns,both",
    ]  # fmt: skip
    if store == "postgres":
        argv += ["--database-url", request.getfixturevalue("database_url")]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["unit"] == "product" and report["store"] == store
    assert report["include"] == ["memories", "turns", "both"] and report["evidence"] is True
    assert report["extractor"] == "rules"
    assert report["extraction"]["events"] == 6  # 3 sessions, each once as each speaker
    assert report["extraction"]["written_total"] >= 1
    rows = report["retrievers"]
    assert list(rows) == ["memories", "turns", "both"]
    for row in rows.values():
        assert row["questions"] == 9 and row["answer_questions"] == 8
        assert 0.0 <= row["answer_recall@1"] <= row["answer_recall@10"] <= row["answer_recall@50"]
    kinds = report["top_10_kinds"]
    assert kinds["memories"]["turns"] == 0 < kinds["memories"]["memories"]
    assert kinds["turns"]["memories"] == 0 < kinds["turns"]["turns"]
    assert kinds["both"]["turns"] > 0  # the best turns come first
    # 17 turns in all: at 50 every stored turn is recalled, so every known dia_id is found
    assert rows["turns"]["recall@50"] == 1.0 and rows["both"]["recall@50"] == 1.0
    # the memories stand for the messages they were extracted from
    assert rows["memories"]["recall@50"] > rows["memories"]["by_category"]["adversarial"]["questions"] / 9
    assert set(report["splits"]) == {"dev", "test"}


def test_product_options(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["eval", "locomo", str(FIXTURE), "--unit", "product"])
    options = options_from_args(args, {})
    assert options.include == ("both",) and options.retrievers == ("hybrid",)
    assert parse_includes("turns, both,turns") == ("turns", "both")
    with pytest.raises(ValueError, match="memories, turns, both"):
        parse_includes("facts")
    assert main(["eval", "locomo", str(FIXTURE), "--unit", "product", "--retriever", "vector"]) == 2
    assert "product's own recall" in capsys.readouterr().err


async def test_the_no_evidence_ablation_drops_only_the_evidence_numbers() -> None:
    candidate = Candidate(
        key="pet", value="has a cat named Pixel", confidence=0.9, scope="user", evidence=(1, 3)
    )

    class Cited:
        closed = False

        async def extract(self, request: object) -> ExtractionResult:
            return ExtractionResult(candidates=(candidate,), llm_calls=1)

        async def close(self) -> None:
            self.closed = True

    inner = Cited()
    bare = WithoutEvidence(inner)
    result = await bare.extract(object())
    assert result.candidates == (replace(candidate, evidence=()),) and result.llm_calls == 1
    await bare.close()
    assert inner.closed


def test_a_recalled_turn_reads_as_the_hint_shows_it_and_the_events_name_the_speakers() -> None:
    from datetime import UTC, datetime

    from evaluation.product_run import recalled_of
    from store.model import RecallItem

    said = past_turn(
        "Madeira, twice!",
        role="assistant",
        at=datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
        position=4,
        speaker="Melanie",
    )
    read = recalled_of(RecallItem(kind="turn", score=1.0, turn=said))
    assert read.text == "[8 May 2023] Melanie: Madeira, twice!"
    assert read.quotes[0].position == 3 and read.quotes[0].channel_id == said.channel_id
    conversation = load_locomo(FIXTURE)[0]
    events = session_events(conversation, uuid.uuid4())
    turns = [t for t in conversation.turns if t.session == events[0].session]
    assert [m.name for m in events[0].event.messages] == [t.speaker for t in turns]


async def test_the_reference_extractor_answers_each_session_with_its_speakers_observations() -> None:
    from evaluation.reference import ReferenceExtractor, observation_key
    from extraction.types import ExtractionRequest, TranscriptMessage
    from worker.planning import transcript

    conversation = load_locomo(FIXTURE)[0]
    extractor = ReferenceExtractor([conversation])
    replies = {}
    for item in session_events(conversation, uuid.uuid4()):
        request = ExtractionRequest(messages=transcript(item.event), allowed_scopes=("user", "persona"))
        replies[(item.session, item.speaker)] = (await extractor.extract(request)).candidates
    ada = replies[(1, "Ada")]
    assert [(c.key, c.value, c.scope, c.evidence) for c in ada] == [
        ("adopted grey cat named", "Ada adopted a grey cat named Pixel.", "user", (1,)),
        ("works marine biologist lisbon", "Ada works as a marine biologist in Lisbon.", "user", (3,)),
    ]
    # dia_ids name messages of this session only; one of another session is left out
    assert [c.evidence for c in replies[(2, "Bo")]] == [(1,), (3,)]
    assert observation_key("Bo's sister Clara lives in Oslo.", "Bo") == "sister_clara_lives_oslo"
    unknown = ExtractionRequest(
        messages=(TranscriptMessage(role="user", content="hi"),), allowed_scopes=("user",)
    )
    result = await extractor.extract(unknown)
    assert result.candidates == () and [r.code for r in result.rejected] == ["refused"]


@pytest.mark.parametrize("store", ["postgres", "sqlite"])
def test_the_reference_extractor_runs_through_the_pipeline_on_both_stores(
    store: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "eval", "locomo", str(FIXTURE), "--unit", "product", "--json", "--store", store,
        "--embedding-provider", "hashing", "--no-embedding-cache", "--data-dir", str(tmp_path / "db"),
        "--k", "10,50", "--include", "memories,both", "--extractor", "reference",
    ]  # fmt: skip
    if store == "postgres":
        argv += ["--database-url", request.getfixturevalue("database_url")]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["extractor"] == "reference"
    # each of the fixture's 9 observations is a fact its conversation supports (the names count)
    assert report["extraction"]["written_total"] == 9
    assert report["extraction"]["llm_calls_total"] == 0
    assert report["retrievers"]["memories"]["recall@50"] > 0.5
