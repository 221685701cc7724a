"""The chat-scenario set is well-formed and the hint scorer's pure functions score hand-made hints."""

from __future__ import annotations

from pathlib import Path

from evaluation.chat_scenarios import load_scenarios, restating_texts
from evaluation.hint_scoring import evidence_in_hint, hint_faults, score_probe

DATA = Path(__file__).resolve().parents[2] / "bench" / "data" / "chat_scenarios"

HINT = """What is known:
- allergy: Is allergic to shellfish (said 2 August 2026) — "I'm allergic to shellfish."
- eats_fish: Eats fish every day

From earlier conversations:
- [5 August 2026] user: What can I cook with shrimp?
- [5 August 2026] Chef: Enjoy your meal!
- [8 August 2026] user: My father eats fish every day, I used to too.
- [9 August 2026] user: My father eats fish every day, I used to too."""


def test_the_set_holds_what_it_promises() -> None:
    scenarios = load_scenarios(DATA)
    assert len(scenarios) >= 8
    assert len({s.persona for s in scenarios}) >= 5
    assert all(len(s.conversations) >= 12 for s in scenarios)
    assert sum(len(s.probes) for s in scenarios) >= 30
    big = [s for s in scenarios if sum(f.status == "approved" for f in s.facts) >= 30]
    assert len(big) >= 2
    halves = {s.split for s in scenarios}
    assert halves == {"tuning", "heldout"}
    assert all(s.filler_texts() and s.rejected_values() for s in scenarios)
    # earlier questions restate probes, and most probes are restated
    restated = [p for s in scenarios for p in s.probes if restating_texts(s, p)]
    assert len(restated) >= 20


def test_a_hand_made_hint_is_scored_right() -> None:
    faults = hint_faults(
        HINT,
        filler=["Thanks!", "Enjoy your meal!"],
        rejected=["Eats fish every day", "Loves cruises"],
        restating=["What can I cook with shrimp?"],
    )
    assert faults.repeated == ("- [9 August 2026] user: My father eats fish every day, I used to too.",)
    assert faults.filler == ("- [5 August 2026] Chef: Enjoy your meal!",)
    # stated as a fact, not merely quoted in a turn
    assert faults.rejected == ("Eats fish every day",)
    assert faults.restating == ("- [5 August 2026] user: What can I cook with shrimp?",)
    assert faults.count == 4
    clean = hint_faults(
        "What is known:\n- diet: Is vegan", filler=["Thanks!"], rejected=["Eats meat"], restating=[]
    )
    assert clean.count == 0


def test_needed_facts_in_hint_and_recall() -> None:
    score = score_probe(
        probe="p",
        user="u",
        split="heldout",
        hint=HINT,
        recalled_values=["Is vegan", "Is allergic to shellfish"],
        needed=["Is allergic to shellfish", "Is vegan"],
        filler=[],
        rejected=[],
        restating=[],
    )
    assert score.needed_in_recall
    assert not score.needed_in_hint
    assert score.missing_from_hint == ("Is vegan",)


def test_evidence_counts_by_turn_text_or_a_quoting_fact() -> None:
    turns = {
        "D1:1": "I'm allergic to shellfish.",
        "D1:2": "What can I cook with shrimp?",
        "D1:3": "I cook for my two kids on weekdays.",
    }
    assert evidence_in_hint(HINT, turns) == ("D1:1", "D1:2")
    # word-bounded: a text is not found inside longer words
    assert evidence_in_hint("- x: shellfishy", {"a": "shellfish"}) == ()


def test_budgets_parse_and_name_the_rows() -> None:
    import pytest

    from evaluation.hint_run import row_names
    from evaluation.options import parse_budgets

    assert parse_budgets("2000, 500,1000,500") == (500, 1000, 2000)
    with pytest.raises(ValueError, match="--budget"):
        parse_budgets("0")
    with pytest.raises(ValueError, match="--budget"):
        parse_budgets("lots")
    assert row_names((500, 1000)) == ("hint@500", "turns alone@500", "hint@1000", "turns alone@1000")
