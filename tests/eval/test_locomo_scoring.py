"""The LoCoMo loader and the official-way scoring, on a small hand-written LoCoMo-shaped fixture."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from evaluation.locomo import (
    CATEGORY_NAMES,
    LocomoFormatError,
    QuestionResult,
    answer_found,
    answer_recall_at_k,
    answer_tokens,
    canonical_dia_id,
    dialog_text,
    evidence_recall,
    load_locomo,
    normalise_evidence,
    parse_ks,
    parse_locomo,
    recall_at_k,
    select_split,
    split_dia_ids,
    split_of,
    summarise,
)

FIXTURE = Path(__file__).parent / "locomo_tiny.json"


def test_category_names_are_the_data_sets_ids() -> None:
    assert CATEGORY_NAMES == {
        1: "multi-hop",
        2: "temporal",
        3: "open-domain",
        4: "single-hop",
        5: "adversarial",
    }


@pytest.mark.parametrize(
    ("token", "expected"),
    [("D1:3", "D1:3"), (" D30:05 ", "D30:5"), ("D", None), ("D:11:26", None), ("S1", None), ("", None)],
)
def test_canonical_dia_id(token: str, expected: str | None) -> None:
    assert canonical_dia_id(token) == expected


def test_split_dia_ids_on_semicolons_commas_and_spaces() -> None:
    assert split_dia_ids("D1:3; D2:1") == ["D1:3", "D2:1"]
    assert split_dia_ids("D1:3,D1:4") == ["D1:3", "D1:4"]
    assert split_dia_ids("D9:1 D4:4  D4:6") == ["D9:1", "D4:4", "D4:6"]
    assert split_dia_ids(["D1:1", "D1:1", "D", "D2:2"]) == ["D1:1", "D2:2"]


def test_normalise_evidence_drops_unknown_ids() -> None:
    known = {"D1:1", "D1:4", "D2:3"}
    assert normalise_evidence(["D2:3,D1:4", "D9:99"], known) == ("D2:3", "D1:4")
    assert normalise_evidence(["D1:04"], known) == ("D1:4",)
    assert normalise_evidence([], known) == ()


def test_evidence_recall_is_the_covered_fraction() -> None:
    assert evidence_recall(["D1:1", "D1:2"], [("D1:2",), ("D3:3",)]) == 0.5
    assert evidence_recall(["D1:1", "D1:2"], [("D1:1", "D1:2")]) == 1.0
    assert evidence_recall(["D1:1"], []) == 0.0
    assert evidence_recall([], []) == 1.0  # no (known) evidence scores 1, as in the official code


def test_recall_at_k_only_looks_at_the_top_k() -> None:
    result = QuestionResult(category=1, evidence=("D1:1", "D2:2"), ranked=(("D1:1",), ("X",), ("D2:2",)))
    assert recall_at_k(result, 1) == 0.5
    assert recall_at_k(result, 2) == 0.5
    assert recall_at_k(result, 3) == 1.0
    assert recall_at_k(result, 50) == 1.0


def test_parse_ks() -> None:
    assert parse_ks("50,5, 10,25,5") == (5, 10, 25, 50)
    with pytest.raises(ValueError, match="5,10,25,50"):
        parse_ks("5,ten")
    with pytest.raises(ValueError, match="positive"):
        parse_ks("0,5")


def test_summarise_overall_and_by_category() -> None:
    results = [
        QuestionResult(category=4, evidence=("D1:1",), ranked=(("D1:1",), ("D1:2",))),
        QuestionResult(category=4, evidence=("D1:1",), ranked=(("D1:2",), ("D1:1",))),
        QuestionResult(category=1, evidence=("D1:1", "D1:2"), ranked=(("D1:2",), ("D1:3",))),
        QuestionResult(category=5, evidence=(), ranked=()),
    ]
    summary = summarise(results, (1, 2))
    assert summary["questions"] == 4
    assert summary["recall@1"] == pytest.approx((1 + 0 + 0.5 + 1) / 4)
    assert summary["recall@2"] == pytest.approx((1 + 1 + 0.5 + 1) / 4)
    assert list(summary["by_category"]) == ["multi-hop", "single-hop", "adversarial"]
    assert summary["by_category"]["single-hop"] == {"questions": 2, "recall@1": 0.5, "recall@2": 1.0}
    assert summary["by_category"]["adversarial"]["recall@1"] == 1.0


def test_load_fixture_questions_units_and_evidence() -> None:
    conversations = load_locomo(FIXTURE)
    assert [c.sample_id for c in conversations] == ["tiny-1", "tiny-2"]
    first = conversations[0]
    assert first.speakers == ("Ada", "Bo")
    assert len(first.turns) == 7
    assert len(first.questions) == 7
    assert first.session_dates == {1: "1:56 pm on 8 May, 2023", 2: "10:00 am on 2 June, 2023"}

    by_question = {q.question: q for q in first.questions}
    assert by_question["What instrument does Bo play and when was his recital?"].evidence == ("D1:2", "D2:1")
    assert by_question["Where did Bo go hiking with his sister?"].evidence == ("D2:3", "D1:4")
    assert by_question["What did Ada's cat spill?"].evidence == ("D2:2",)  # D9:99 and D are unknown
    assert by_question["When did Clara visit?"].evidence == ("D1:4", "D2:3")  # D1:04 → D1:4
    adversarial = by_question["What is Bo's favourite colour?"]
    assert adversarial.category_name == "adversarial"
    assert (adversarial.answer, adversarial.evidence) == ("blue", ())
    assert conversations[1].questions[1].evidence == ()  # "D:1:1" is malformed: dropped


def test_observation_units_carry_their_dia_ids() -> None:
    first = load_locomo(FIXTURE)[0]
    observations = first.units("observation")
    assert len(observations) == 7
    assert observations[0].text == "Ada adopted a grey cat named Pixel."
    assert observations[0].dia_ids == ("D1:1",)
    assert observations[0].session_date == "1:56 pm on 8 May, 2023"
    hiking = next(u for u in observations if "Alps" in u.text)
    assert hiking.dia_ids == ("D2:3", "D1:4")
    assert hiking.session == 2


def test_dialog_units_quote_the_speaker_and_add_the_image_caption() -> None:
    dialog = load_locomo(FIXTURE)[0].units("dialog")
    assert [u.dia_ids for u in dialog][:3] == [("D1:1",), ("D1:2",), ("D1:3",)]
    assert dialog[0].text == 'Ada said, "Hi Bo! I adopted a grey cat named Pixel last week."'
    assert dialog[2].text == (
        'Ada said, "Lovely. I work as a marine biologist in Lisbon."'
        " [shares a photo of a research boat in a harbour]"
    )
    assert dialog_text("Bo", "  hi \n") == 'Bo said, "hi"'


def test_parse_rejects_what_is_not_locomo(tmp_path: Path) -> None:
    with pytest.raises(LocomoFormatError, match="list of conversations"):
        parse_locomo({"qa": []})
    with pytest.raises(LocomoFormatError, match="missing key 'conversation'"):
        parse_locomo([{"qa": []}])
    with pytest.raises(LocomoFormatError, match="no such file"):
        load_locomo(tmp_path / "missing.json")
    with pytest.raises(LocomoFormatError, match="cannot read"):
        load_locomo(tmp_path)  # a directory
    broken = tmp_path / "broken.json"
    broken.write_text("{nope")
    with pytest.raises(LocomoFormatError, match="not valid JSON"):
        load_locomo(broken)
    bad_turn = [{"conversation": {"session_1": [{"speaker": "A", "dia_id": "x", "text": "t"}]}, "qa": []}]
    with pytest.raises(LocomoFormatError, match="D<session>:<turn>"):
        parse_locomo(json.loads(json.dumps(bad_turn)))


def test_split_is_first_half_dev_in_file_order_and_the_rest_test() -> None:
    assert [split_of(i, 10) for i in range(10)] == ["dev"] * 5 + ["test"] * 5
    assert [split_of(i, 3) for i in range(3)] == ["dev", "dev", "test"]
    conversations = load_locomo(FIXTURE)
    assert [c.sample_id for c in select_split(conversations, "dev")] == [conversations[0].sample_id]
    assert [c.sample_id for c in select_split(conversations, "test")] == [conversations[1].sample_id]
    assert select_split(conversations, "all") == conversations


def test_answer_tokens_drop_case_punctuation_and_articles() -> None:
    assert answer_tokens("The Sunday before 25 May, 2023.") == ["sunday", "before", "25", "may", "2023"]
    assert answer_tokens("an adoption_agency") == ["adoption", "agency"]


def test_answer_is_found_when_all_its_tokens_are_in_the_top_k_texts_together() -> None:
    texts = ("Caroline went to the LGBTQ support group", "She paints sunsets", "Mel runs")
    assert answer_found("LGBTQ support group", texts)
    assert answer_found("support group, sunsets", texts)  # tokens may come from different texts
    assert not answer_found("support group in Boston", texts)
    assert not answer_found("...", texts)
    result = QuestionResult(category=4, evidence=(), ranked=((),) * 3, answer="sunsets", texts=texts)
    assert answer_recall_at_k(result, 1) == 0.0
    assert answer_recall_at_k(result, 2) == 1.0


def test_answer_recall_leaves_out_adversarial_and_answerless_questions() -> None:
    texts = ("Caroline paints",)
    results = [
        QuestionResult(category=4, evidence=(), ranked=((),), answer="paints", texts=texts),
        QuestionResult(category=1, evidence=(), ranked=((),), answer="sculpts", texts=texts),
        QuestionResult(category=5, evidence=(), ranked=((),), answer="paints", texts=texts),
        QuestionResult(category=2, evidence=(), ranked=((),), answer=None, texts=texts),
    ]
    summary = summarise(results, (1,))
    assert summary["answer_questions"] == 2
    assert summary["answer_recall@1"] == 0.5
    assert "answer_recall@1" not in summary["by_category"]["adversarial"]


def test_dialog_context_texts_put_the_turns_before_first_within_the_session() -> None:
    first = load_locomo(FIXTURE)[0]
    dialog = first.units("dialog")
    texts = first.context_texts("dialog", 2)
    assert len(texts) == len(dialog)
    assert texts[0] == dialog[0].text  # nothing before the first turn
    assert texts[2] == "\n".join(u.text for u in dialog[:3])
    second_session = next(i for i, u in enumerate(dialog) if u.session == 2)
    assert texts[second_session] == dialog[second_session].text  # the session before is not context
    assert first.context_texts("dialog", 0) == tuple(u.text for u in dialog)
    assert first.context_texts("observation", 2) == tuple(u.text for u in first.units("observation"))


def test_preceding_texts_are_the_context_without_the_turn() -> None:
    first = load_locomo(FIXTURE)[0]
    dialog = first.units("dialog")
    before = first.preceding_texts("dialog", 2)
    assert before[0] == ""  # nothing before the first turn
    assert before[1] == dialog[0].text
    assert before[2] == f"{dialog[0].text}\n{dialog[1].text}"
    second_session = next(i for i, u in enumerate(dialog) if u.session == 2)
    assert before[second_session] == ""  # the session before is not context
    assert first.preceding_texts("dialog", 0) == tuple("" for _ in dialog)
    assert first.preceding_texts("observation", 2) == tuple("" for _ in first.observations)


def test_following_texts_are_the_turns_after_within_the_session() -> None:
    first = load_locomo(FIXTURE)[0]
    dialog = first.units("dialog")
    after = first.following_texts("dialog", 1)
    assert after[0] == dialog[1].text
    last_of_first = next(i for i, u in enumerate(dialog) if u.session == 2) - 1
    assert after[last_of_first] == ""  # the next session is not context
    assert after[-1] == ""
    assert first.following_texts("dialog", 2)[0] == f"{dialog[1].text}\n{dialog[2].text}"
    assert first.following_texts("dialog", 0) == tuple("" for _ in dialog)
    assert first.following_texts("observation", 1) == tuple("" for _ in first.observations)


def test_source_texts_are_the_cited_turns_in_the_order_cited() -> None:
    first = load_locomo(FIXTURE)[0]
    turns = {u.dia_ids[0]: u.text for u in first.units("dialog")}
    sources = first.source_texts()
    assert len(sources) == len(first.observations)
    assert sources[0] == turns["D1:1"] == 'Ada said, "Hi Bo! I adopted a grey cat named Pixel last week."'
    hiking = next(i for i, u in enumerate(first.observations) if "Alps" in u.text)
    assert sources[hiking] == f"{turns['D2:3']}\n{turns['D1:4']}"  # cited D2:3, D1:4
    with_context = first.observation_context_texts("source")
    assert with_context[hiking] == f"{turns['D2:3']}\n{turns['D1:4']}\n{first.observations[hiking].text}"
    assert first.observation_context_texts("none") == tuple(u.text for u in first.observations)


def test_source_texts_can_put_the_turns_before_each_cited_turn_first() -> None:
    first = load_locomo(FIXTURE)[0]
    turns = {u.dia_ids[0]: u.text for u in first.units("dialog")}
    sources = first.source_texts(1)
    assert sources[0] == turns["D1:1"]  # the session's first turn: nothing before it
    bo_cello = next(i for i, u in enumerate(first.observations) if u.dia_ids == ("D1:2",))
    assert sources[bo_cello] == f"{turns['D1:1']}\n{turns['D1:2']}"
    hiking = next(i for i, u in enumerate(first.observations) if "Alps" in u.text)
    # D2:3 after D2:2; D1:4 after D1:3 (each from its own session, none cited twice)
    assert sources[hiking] == f"{turns['D2:2']}\n{turns['D2:3']}\n{turns['D1:3']}\n{turns['D1:4']}"
    assert first.source_texts(0) == first.source_texts()
    two = first.source_texts(2)[hiking].split("\n")
    assert two == [turns["D2:1"], turns["D2:2"], turns["D2:3"], turns["D1:2"], turns["D1:3"], turns["D1:4"]]


def test_source_texts_list_a_turn_once_and_skip_cited_turns_before() -> None:
    first = load_locomo(FIXTURE)[0]
    turns = {u.dia_ids[0]: u.text for u in first.units("dialog")}
    both = replace(first.observations[0], dia_ids=("D1:2", "D1:3"))
    conversation = replace(first, observations=(both,))
    # D1:3's turn before is D1:2, cited: not repeated; D1:1 comes once, before D1:2
    assert conversation.source_texts(1) == (f"{turns['D1:1']}\n{turns['D1:2']}\n{turns['D1:3']}",)
    assert conversation.source_texts(3) == (f"{turns['D1:1']}\n{turns['D1:2']}\n{turns['D1:3']}",)


def test_an_observation_citing_no_known_turn_has_no_source() -> None:
    first = load_locomo(FIXTURE)[0]
    orphan = replace(first.observations[0], dia_ids=())
    conversation = replace(first, observations=(orphan, first.observations[1]))
    assert conversation.source_texts() == ("", first.source_texts()[1])
    assert conversation.observation_context_texts("source")[0] == orphan.text
