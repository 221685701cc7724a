"""The context's facts by standing are not read for a hint that could not list them: their
listing weight (`listing_weight`, a lower bound of 4 × a fact's line cost under the estimate
counter) summed over them exceeds the hint's `standing_budget`. A set weighing just the budget is
still read and listed; one a character over it is not, on both stores."""

from __future__ import annotations

import itertools
import sys
import uuid
from dataclasses import replace
from datetime import UTC, datetime

import psycopg

from store.model import NewMemory, RecallHit, RecallItem, RecallQuery, Revision
from store.postgres.recall_sql import STANDING_WEIGHT_SQL
from store.rules.hint import (
    KNOWN_HEADER,
    LISTED_FACT_EXTRA,
    WHITESPACE,
    brief_fact_line,
    build_hint,
    fact_line,
    facts_share,
    listing_weight,
    may_list_standing,
    standing_budget,
)
from store.rules.tokens import ESTIMATE, estimate_tokens
from tests.factories import stored_fact, user_fact
from tests.store.store_testkit import Store

NOW = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
TEAM = uuid.UUID(int=0xC)
MAX_TOKENS = 404


def test_postgres_weighs_a_row_as_listing_weight_does(pg_url: str) -> None:
    """`STANDING_WEIGHT_SQL` (`recall_sql`'s standing branch) is `listing_weight` without its
    constant: every whitespace character left out, every other one counted (a zero-width space
    and other format characters are not whitespace), in one pass over a long text."""
    texts = [
        "",
        "plain words here",
        *(f"a{c}b" for c in WHITESPACE),
        WHITESPACE * 3,
        "zero\u200bwidth\u2060joiner\ufeffmark é ü ß 漢字 🙂",
        ("word " + WHITESPACE[10:]) * 2000,
    ]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for key, value in itertools.product(texts[:4], texts):
            row = conn.execute(
                f"SELECT {STANDING_WEIGHT_SQL} FROM (SELECT %(k)s AS key, %(v)s AS value) AS m",
                {"k": key, "v": value},
            ).fetchone()
            assert row is not None
            assert row[0] == listing_weight(key, value) - LISTED_FACT_EXTRA, (key, value)


def test_the_whitespace_is_what_str_split_takes() -> None:
    assert set(WHITESPACE) == {c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()}


def test_a_fact_s_listing_weight_is_at_most_four_times_its_line_cost_in_full_or_brief() -> None:
    samples = [
        ("city", "Porto"),
        ("diet  plan", "Eats\u3000\u3000fish \t\n on   Fridays"),
        ("Lieblingsgetränk", "Trinkt Apfelschorle ☕"),
        ("好きな食べ物", "寿司と天ぷら"),
        ("a" + " " * 500 + "b", "\u2028" * 300 + "c"),
        ("k", ""),
    ]
    for key, value in samples:
        memory = stored_fact(key, value, observed_at=NOW, evidence="user: I said so")
        change = Revision(
            id=uuid.uuid4(),
            memory_id=memory.id,
            old_value=value,
            new_value="something else",
            confidence=0.8,
            source_event_id=None,
            status="pending",
            created_at=NOW,
        )
        for pending in (None, change):
            item = RecallItem(kind="memory", score=1.0, memory=memory, pending_change=pending)
            for line in (brief_fact_line(item), fact_line(item)):
                assert listing_weight(key, value) <= 4 * (estimate_tokens(line) + 1), (key, value, line)
    # tight for a line of whole tokens: `- k07: vvv…` of 48 bytes costs 13 tokens
    assert listing_weight("k07", "v" * 41) == 4 * (estimate_tokens("- k07: " + "v" * 41) + 1)


def test_no_budget_for_a_counter_that_is_not_the_estimate() -> None:
    assert standing_budget(MAX_TOKENS, counter="cl100k") is None
    assert may_list_standing([10**9], None)
    budget = standing_budget(MAX_TOKENS, counter=ESTIMATE)
    assert budget == 4 * facts_share(MAX_TOKENS - estimate_tokens(KNOWN_HEADER))


def _weighing(total: int) -> list[tuple[str, str]]:
    """Keys and values without whitespace, each line `- kNN: v…` a whole number of tokens, their
    listing weights summing to `total` (a multiple of 4): 4 × their lines' costs, exactly."""
    facts: list[tuple[str, str]] = []
    left = total
    while left > 0:
        weight = min(52, left)  # a 48-byte line, 13 tokens; the last one shorter
        facts.append((f"k{len(facts):02d}", "v" * (weight - LISTED_FACT_EXTRA - 3)))
        left -= weight
    return facts


def test_facts_by_standing_weighing_just_the_budget_are_listed_and_one_character_more_are_not() -> None:
    budget = standing_budget(MAX_TOKENS, counter=ESTIMATE)
    assert budget is not None and budget % 4 == 0
    facts = _weighing(budget)
    assert sum(listing_weight(k, v) for k, v in facts) == budget
    hits = [RecallHit(memory=stored_fact(k, v), score=0.5) for k, v in facts]
    hint = build_hint([], max_tokens=MAX_TOKENS, every=hits, counter=estimate_tokens)
    assert hint.count("\n- ") == len(facts)
    assert may_list_standing((listing_weight(k, v) for k, v in facts), budget)
    over = [*facts[:-1], (facts[-1][0], facts[-1][1] + "v")]
    hits = [RecallHit(memory=stored_fact(k, v), score=0.5) for k, v in over]
    assert build_hint([], max_tokens=MAX_TOKENS, every=hits, counter=estimate_tokens) == ""
    assert not may_list_standing((listing_weight(k, v) for k, v in over), budget)


async def test_the_store_reads_the_facts_by_standing_that_may_fit_and_none_beyond(store: Store) -> None:
    """A user's facts, two of them overridden by the persona with the user (shorter values): the
    facts' weight is their winners'; the store reads them at that budget, not one below it."""
    user, persona = uuid.uuid4(), uuid.uuid4()
    facts = _weighing(600)
    for key, value in facts:
        await store.writes.upsert(replace(user_fact(user, key, value + "www"), status="active"))
    for key, value in facts[:2]:
        override = NewMemory(scope="persona_user", owner_id=persona, user_id=user, key=key, value=value)
        await store.writes.upsert(replace(override, status="active"))
    weights = {key: listing_weight(key, value + "www") for key, value in facts}
    weights.update({key: listing_weight(key, value) for key, value in facts[:2]})
    total = sum(weights.values())
    for persona_id in (persona, None):
        if persona_id is None:
            total = sum(listing_weight(key, value + "www") for key, value in facts)
        asked = RecallQuery(user_id=user, persona_id=persona_id, team_id=None, text="k03 v", limit=3)
        for query in ("k03 v", ""):
            asked = replace(asked, text=query)
            read = await store.context_facts(asked, standing=100, pinned=True)
            assert read.standing is not None and len(read.standing) == len(facts)
            within = await store.context_facts(asked, standing=100, pinned=True, standing_budget=total)
            assert within == read
            beyond = await store.context_facts(asked, standing=100, pinned=True, standing_budget=total - 1)
            assert beyond == replace(read, standing=None), (persona_id, query)


async def test_an_override_beyond_the_rows_read_still_counts_at_its_own_weight(store: Store) -> None:
    """Seven facts, each held by the user and the persona in no team and in the team (long values,
    certain) and overridden by the persona with the user (short, least certain): the 30 rows the
    standing branch reads (`candidate_count(10)`) leave out five overrides, yet those are the
    facts the hint lists, at their own weight."""
    user, persona = uuid.uuid4(), uuid.uuid4()
    keys = [f"fact {i}" for i in range(7)]
    for key in keys:
        for team in (None, TEAM):
            for scope, owner, with_user in (("user", user, None), ("persona", persona, None)):
                long = NewMemory(scope=scope, owner_id=owner, user_id=with_user, key=key, value="v" * 400)
                await store.writes.upsert(replace(long, team_id=team, confidence=0.9, status="active"))
        short = NewMemory(scope="persona_user", owner_id=persona, user_id=user, key=key, value="vegan")
        await store.writes.upsert(replace(short, confidence=0.1, status="active"))
    asked = RecallQuery(user_id=user, persona_id=persona, team_id=TEAM, text="fact", limit=3)
    budget = sum(listing_weight(key, "vegan") for key in keys)
    facts = await store.context_facts(asked, standing=10, pinned=False, standing_budget=budget)
    assert facts.standing is not None
    assert sorted(hit.memory.value for hit in facts.standing) == ["vegan"] * 7
