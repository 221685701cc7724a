"""Facts that change across sessions (testkit/data/facts_that_change.json): every case
driven through the worker's pipeline with scripted LLM output must end with a pending revision of
the reviewed memory, the current value recalled first once approved, and the old value only in the
audit history."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.sqlite.store import SqliteMemoryStore
from testkit.facts_that_change import default_embedder, load_cases, report, run_all


def test_the_fixture_has_at_least_30_cases_each_changing_one_fact() -> None:
    cases = load_cases()
    assert len(cases) >= 30
    for case in cases:
        first, later = case["sessions"]
        assert case["old_value"] != case["new_value"]
        assert case["key"] in {m["key"] for m in first["extraction"]}
        assert [m["key"].lower().split() for m in later["extraction"]] == [case["key"].split()]


@pytest.mark.slow
async def test_every_changed_fact_becomes_a_revision_and_recall_answers_with_the_current_value(
    tmp_path: Path,
) -> None:
    store = SqliteMemoryStore(f"sqlite:///{tmp_path}/facts.db", default_embedder())
    try:
        results = await run_all(store, load_cases())
    finally:
        await store.close()
    summary = report(results)
    assert summary["failures"] == {}
    assert summary["share_right"] == 1.0
