"""Pure parts of the hint and recall's list: which turns add something new (`store.rules.novelty`),
facts then turns each within its own limit, the facts' choice within the token budget, a fact
whose change awaits review, and the hint's sections."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime

from store.model import Memory, RecallHit, RecallItem, Revision, Turn, TurnHit, TurnRole
from store.rules.hint import (
    EARLIER_HEADER,
    FACT_RELEVANCE_FLOOR,
    HINT_TURN_SHARE,
    KNOWN_HEADER,
    brief_fact_line,
    build_hint,
    choose_facts,
    fact_line,
    plan_facts,
)
from store.rules.novelty import content_words, is_filler, new_turn_indexes, normalized, restates, stem
from store.rules.tokens import count_tokens
from store.rules.turn_recall import facts_then_turns
from tests.factories import past_turn, stored_fact

NOW = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)


def memory(key: str, value: str, **fields: object) -> Memory:
    return stored_fact(key, value, at=NOW, **fields)


def turn(text: str, role: TurnRole = "user", **fields: object) -> Turn:
    return past_turn(text, role=role, at=NOW, **fields)


def fact(key: str, value: str, change: Revision | None = None, **fields: object) -> RecallItem:
    return RecallItem(kind="memory", score=1.0, memory=memory(key, value, **fields), pending_change=change)


def said(text: str, role: TurnRole = "user", **fields: object) -> RecallItem:
    return RecallItem(kind="turn", score=1.0, turn=turn(text, role, **fields))


def proposal(of: Memory, new_value: str) -> Revision:
    return Revision(
        id=uuid.uuid4(),
        memory_id=of.id,
        old_value=of.value,
        new_value=new_value,
        confidence=0.9,
        status="pending",
        source_event_id=None,
        created_at=NOW,
    )


# -- novelty ---------------------------------------------------------------------------------------


FILLER = [
    "Thanks!",
    "Enjoy your meal!",
    "You're welcome",
    "Happy saving!",
    "Have a great workout!",
    "Good luck with your studies!",
    "Noted, thanks for telling me.",
    "Got it, I'll keep that in mind.",
    "Ok.",
    "",
]


def test_filler_is_a_turn_whose_content_words_are_all_filler() -> None:
    assert [text for text in FILLER if not is_filler(text)] == []
    for content in (
        "Try a chickpea curry with coconut milk tonight.",
        "I'm allergic to shellfish",
        "Thanks, the lentil soup was great for my marathon training",
        "My sister lives in Porto",
    ):
        assert not is_filler(content), content


def test_a_turn_restates_the_message_when_most_content_words_are_shared() -> None:
    tonight = content_words("What should I cook for dinner tonight?")
    assert restates("What should I cook tonight?", tonight)
    assert restates("what should i COOK for dinner tonight", tonight)
    shrimp = content_words("What can I cook with shrimp?")
    assert not restates("What should I cook tonight?", shrimp)
    # an answer that mentions the question's words and more adds something
    assert not restates("Tonight you could cook a mushroom risotto with peas and lemon.", tonight)
    assert not restates("Thanks!", frozenset())
    assert not restates("Ana moved to Porto", content_words("Porto Ana"))


def test_stems_and_normalized_text_compare_forms_of_one_word() -> None:
    assert stem("studies") == stem("study") and stem("cooking") == stem("cook") == stem("cooks")
    assert stem("shopping") == "shop" and stem("class") == "class"
    assert normalized("  Enjoy your   MEAL! ") == "enjoy your meal"


def test_new_turns_leave_out_restatements_filler_repeats_and_quoted_turns() -> None:
    channel = uuid.uuid4()
    quoting = memory("diet", "Is vegan", evidence="user: I went vegan last spring", source_channel_id=channel)
    turns = [
        turn("What should I cook tonight?"),  # 0 restates
        turn("Try a chickpea curry; it is vegan and quick.", "assistant"),  # 1 the answer, kept
        turn("Enjoy your meal!", "assistant"),  # 2 filler
        turn("Try a chickpea  curry; it is vegan and quick!", "assistant"),  # 3 shown already
        turn("I went vegan last spring", channel_id=channel),  # 4 the fact quotes it
        turn("I went vegan last spring"),  # 5 the same words elsewhere: not what the fact quotes
    ]
    kept = new_turn_indexes(turns, message="What should I cook for dinner tonight?", shown=[quoting])
    assert kept == [1, 5]
    assert new_turn_indexes(turns, message="") == [0, 1, 4]
    # the first that many only; the turns after them are not read
    assert new_turn_indexes(
        turns, message="What should I cook for dinner tonight?", shown=[quoting], limit=1
    ) == [1]
    assert new_turn_indexes(
        [*turns[:2], None], message="What should I cook for dinner tonight?", limit=1
    ) == [1]  # type: ignore[list-item]
    assert new_turn_indexes(turns, message="", limit=0) == []


def test_novelty_costs_linear_time_on_a_stranger_text() -> None:
    hostile = "a" * 200_000 + "!" * 200_000 + " thanks" * 50_000
    started = time.perf_counter()
    assert not is_filler(hostile)
    assert new_turn_indexes([turn(hostile)], message=hostile) == []  # it restates itself
    assert time.perf_counter() - started < 2.0


# -- recall's list ---------------------------------------------------------------------------------


def hit(key: str) -> RecallHit:
    return RecallHit(memory=memory(key, "v"), score=0.5, cosine=0.3)


def turn_hit(text: str, **fields: object) -> TurnHit:
    return TurnHit(turn=turn(text, **fields), score=0.9, cosine=0.9)


def test_recall_lists_the_facts_first_each_kind_within_its_own_limit() -> None:
    facts = [hit(f"k{i}") for i in range(5)]
    turns = [turn_hit(f"the {i}th recipe with lentils and rice") for i in range(8)]
    items = facts_then_turns(facts, turns, limit=3, turn_limit=2, message="what to cook")
    assert [i.kind for i in items] == ["memory"] * 3 + ["turn"] * 2
    assert [i.memory.key for i in items if i.memory] == ["k0", "k1", "k2"]
    assert [i.turn.text for i in items if i.turn] == [turns[0].turn.text, turns[1].turn.text]
    assert [i.kind for i in facts_then_turns(facts, turns, limit=1, turn_limit=0, message="")] == ["memory"]
    only_turns = facts_then_turns([], turns, limit=10, turn_limit=3, message="")
    assert [i.kind for i in only_turns] == ["turn"] * 3


def test_recall_leaves_out_the_turns_that_add_nothing_and_fills_the_turn_limit_after_them() -> None:
    channel = uuid.uuid4()
    quoting = RecallHit(
        memory=memory("diet", "Is vegan", evidence="user: I went vegan", source_channel_id=channel), score=1.0
    )
    turns = [
        turn_hit("What should I cook tonight?"),
        turn_hit("Enjoy your meal!"),
        turn_hit("I went vegan", channel_id=channel),
        turn_hit("Try the chickpea curry."),
        turn_hit("Lentil soup freezes well."),
    ]
    items = facts_then_turns([quoting], turns, limit=5, turn_limit=2, message="What should I cook tonight?")
    assert [i.turn.text for i in items if i.turn] == ["Try the chickpea curry.", "Lentil soup freezes well."]


def test_a_pending_change_travels_with_its_fact() -> None:
    facts = [hit("city"), hit("diet")]
    change = proposal(facts[0].memory, "Munich")
    pending = {facts[0].memory.id: change}
    items = facts_then_turns(facts, [], limit=5, turn_limit=0, message="", pending=pending)
    assert [i.pending_change for i in items] == [change, None]


# -- the hint --------------------------------------------------------------------------------------


def test_a_fact_under_review_is_not_stated_as_certain() -> None:
    city = memory("lives in", "Berlin")
    munich = proposal(city, "Munich")
    line = fact_line(RecallItem(kind="memory", score=1.0, memory=city, pending_change=munich))
    assert line == "- lives in: Berlin — a change to Munich awaits review"
    dated = replace(city, observed_at=NOW, evidence="user: I live in Berlin", source_channel_id=uuid.uuid4())
    line = fact_line(RecallItem(kind="memory", score=1.0, memory=dated, pending_change=munich))
    assert line == (
        '- lives in: Berlin — a change to Munich awaits review (said 4 March 2026) — "I live in Berlin"'
    )


def test_the_hint_has_what_is_known_then_what_earlier_conversations_add() -> None:
    items = [
        fact("diet", "Is vegan", observed_at=NOW),
        fact("city", "Lives in Lyon"),
        said("I went vegan after the marathon\nin Porto"),
        said("Enjoy your meal!", "assistant"),
    ]
    assert build_hint(items) == (
        f"{KNOWN_HEADER}\n- diet: Is vegan (said 4 March 2026)\n- city: Lives in Lyon\n\n"
        f"{EARLIER_HEADER}\n- [4 March 2026] user: I went vegan after the marathon in Porto"
    )
    assert build_hint([]) == ""
    assert build_hint([said("Thanks!")]) == ""


def test_the_hint_stays_within_its_tokens_and_a_fact_is_never_displaced_by_a_turn() -> None:
    facts = [fact(f"k{i}", "x " * 40) for i in range(60)]
    turns = [said(f"turn {i} " + "y " * 300) for i in range(10)]
    for budget in (60, 200, 500, 1500):
        text = build_hint(facts + turns, max_tokens=budget)
        assert count_tokens(text) <= budget
        facts_alone = build_hint(facts, max_tokens=budget)
        # the turns only take what the facts leave
        assert text.startswith(facts_alone)
    few = [fact("diet", "Is vegan")]
    text = build_hint(few + turns, max_tokens=1500)
    turn_part = text.split(EARLIER_HEADER)[1]
    assert count_tokens(turn_part) <= 1500 * HINT_TURN_SHARE


def test_few_facts_are_all_shown_many_only_the_relevant_ones() -> None:
    relevant = [fact("allergy", "Is allergic to shellfish")]
    every = relevant + [fact(f"fact{i}", f"likes thing {i}") for i in range(5)]
    chosen = choose_facts(relevant, budget=1500, every=every)
    assert next(i.memory.key for i in chosen if i.memory) == "allergy"
    assert len(chosen) == 6
    # too many to show all: the relevant ones only
    crowd = relevant + [fact(f"fact{i}", "a fairly long value " * 10) for i in range(40)]
    chosen = choose_facts(relevant, budget=1500, every=crowd)
    assert [i.memory.key for i in chosen if i.memory] == ["allergy"]
    # not read (None): the relevant ones
    assert len(choose_facts(relevant, budget=1500)) == 1


def test_pinned_facts_come_first_within_the_budget() -> None:
    pinned = [fact("medical", "Has type 1 diabetes")]
    relevant = [fact(f"k{i}", "v " * 30) for i in range(30)]
    chosen = choose_facts(relevant, budget=200, pinned=pinned)
    assert chosen[0] is pinned[0]
    assert sum(count_tokens(fact_line(i)) + 1 for i in chosen) <= 200


def test_facts_far_from_the_message_leave_the_turns_their_share() -> None:
    far = [
        RecallItem(kind="memory", score=1.0, memory=memory(f"k{i}", "x " * 40), cosine=0.1) for i in range(30)
    ]
    near = [replace(item, cosine=FACT_RELEVANCE_FLOOR) for item in far]
    budget = 500
    share = int(budget * (1 - HINT_TURN_SHARE))

    def cost(chosen: list[RecallItem]) -> int:
        return sum(count_tokens(fact_line(item)) + 1 for item in chosen)

    assert 0 < cost(choose_facts(far, budget=budget)) <= share
    assert share < cost(choose_facts(near, budget=budget)) <= budget
    turns = [said(f"Turn {i}: the ferry to the island leaves at nine") for i in range(5)]
    assert EARLIER_HEADER in build_hint(far + turns, max_tokens=budget)
    # facts near the message are never displaced by a turn
    assert EARLIER_HEADER not in build_hint(near + turns, max_tokens=budget)


def test_every_fact_is_named_when_all_fit_only_with_the_ones_not_about_the_message_brief() -> None:
    said_before = 'user: I told you this long ago, in a conversation about something else entirely"'
    near = RecallItem(
        kind="memory", score=1.0, memory=memory("allergy", "Is allergic to shellfish"), cosine=0.9
    )
    others = [
        fact(f"fact {i}", f"Likes thing {i}", evidence=said_before.format(i), observed_at=NOW)
        for i in range(12)
    ]
    budget = 300
    planned = plan_facts([near], budget=budget, every=[near, *others])
    assert planned[0][0] is near and len(planned) == 13
    assert planned[0][1] and not all(whole for _, whole in planned)  # the near one in full
    hint = build_hint([near], max_tokens=budget, every=[near, *others])
    assert "- fact 11: Likes thing 11" in hint and count_tokens(hint) <= budget
    # in full they would fit: all in full
    roomy = plan_facts([near], budget=3000, every=[near, *others])
    assert all(whole for _, whole in roomy)


def test_a_message_two_facts_come_from_is_quoted_once() -> None:
    sentence = "user: I'm vegetarian and allergic to peanuts."
    at = {"observed_at": NOW, "evidence": sentence, "source_channel_id": uuid.uuid4()}
    items = [fact("diet", "Is vegetarian", **at), fact("allergy", "Is allergic to peanuts", **at)]
    text = build_hint(items)
    assert text == (
        f"{KNOWN_HEADER}\n"
        '- diet: Is vegetarian (said 4 March 2026) — "I\'m vegetarian and allergic to peanuts."\n'
        "- allergy: Is allergic to peanuts (said 4 March 2026)"
    )
    other = fact("city", "Lives in Lyon", observed_at=NOW, evidence="user: I live in Lyon")
    lyon = '- city: Lives in Lyon (said 4 March 2026) — "I live in Lyon"'
    assert build_hint([*items, other]).endswith(lyon)


def test_the_hint_writes_each_fact_as_planned_in_full_or_brief() -> None:
    """The hint makes each fact's lines once for the plan and the text: the lines it writes are the
    plan's, in its order, each in full or brief as planned."""
    said_before = "user: I told you this long ago ({}), in a conversation about something else entirely"
    near = RecallItem(
        kind="memory", score=1.0, memory=memory("allergy", "Is allergic to shellfish"), cosine=0.9
    )
    city = memory("lives in", "Berlin", observed_at=NOW, evidence="user: I live in Berlin")
    moving = RecallItem(kind="memory", score=0.5, memory=city, pending_change=proposal(city, "Munich"))
    others = [
        fact(f"fact {i}", f"Likes thing {i}", evidence=said_before.format(i), observed_at=NOW)
        for i in range(12)
    ]
    every = [near, moving, *others]
    for budget in (300, 3000):
        planned = plan_facts([near, moving], budget=budget - count_tokens(KNOWN_HEADER), every=every)
        expected = [fact_line(item) if whole else brief_fact_line(item) for item, whole in planned]
        hint = build_hint([near, moving], max_tokens=budget, every=every)
        assert hint.split("\n") == [KNOWN_HEADER, *expected]
    assert any(not whole for _, whole in plan_facts([near], budget=300, every=every))  # both kinds seen


def test_a_crowd_of_facts_that_cannot_fit_is_weighed_only_until_it_passes_the_share() -> None:
    """The plan stops making and counting lines once their sum passes the facts' share: a context
    of 200 facts where 20 fit costs about 20 lines per test, not 200, and plans the same."""
    crowd = [fact(f"fact {i}", f"Likes thing number {i} a great deal") for i in range(200)]
    counted: list[str] = []

    def counting(text: str) -> int:
        counted.append(text)
        return count_tokens(text)

    planned = plan_facts(crowd[:3], budget=200, every=crowd, counter=counting)
    assert [item for item, _ in planned] == crowd[:3]
    assert 0 < len(counted) < 60


def test_facts_by_standing_given_as_hits_hint_as_the_items_they_stand_for() -> None:
    """The context's facts by standing may reach the hint as the store's hits with their changes
    awaiting review beside them: the hint and the plan are those of the same facts as items."""
    near = RecallItem(
        kind="memory", score=1.0, memory=memory("allergy", "Is allergic to shellfish"), cosine=0.9
    )
    city = memory("lives in", "Berlin", observed_at=NOW, evidence="user: I live in Berlin")
    change = proposal(city, "Munich")
    others = [memory(f"fact {i}", f"Likes thing {i}", observed_at=NOW) for i in range(12)]
    hits = [RecallHit(memory=m, score=0.5, cosine=0.95) for m in [near.memory, city, *others]]
    pending = {city.id: change}
    items = [
        RecallItem(kind="memory", score=h.score, memory=h.memory, pending_change=pending.get(h.memory.id))
        for h in hits
    ]
    for budget in (120, 300, 3000):
        as_items = build_hint([near], max_tokens=budget, every=items)
        assert build_hint([near], max_tokens=budget, every=hits, pending=pending) == as_items
        planned = plan_facts([near], budget=budget, every=hits, pending=pending)
        assert planned == plan_facts([near], budget=budget, every=items)
    assert "a change to Munich awaits review" in build_hint(
        [near], max_tokens=3000, every=hits, pending=pending
    )


def test_turns_recall_kept_for_the_message_hint_as_when_checked_again() -> None:
    """The hint of recall's list (`facts_then_turns`) with `turns_new` checks only the shown facts'
    quotes against its turns: the same hint as checking every rule again, a turn a fact shown by
    standing quotes left out either way."""
    channel = uuid.uuid4()
    message = "What should I cook for dinner tonight?"
    candidates = [
        turn("What should I cook tonight?"),  # restates the message
        turn("Thanks, coach!"),  # filler
        turn("I live in Lyon now", channel_id=channel),  # quoted by a fact by standing
        turn("My sister is visiting on Friday"),
        turn("my sister is visiting on friday"),  # a repeat
        turn("I bought a cast iron pan", role="assistant"),
    ]
    hits = [TurnHit(turn=t, score=1.0 - i / 10) for i, t in enumerate(candidates)]
    relevant = [RecallHit(memory=memory("diet", "Is vegetarian"), score=1.0)]
    lyon = memory("city", "Lives in Lyon", evidence="user: I live in Lyon now", source_channel_id=channel)
    every = [RecallHit(memory=lyon, score=0.5)]
    items = facts_then_turns(relevant, hits, limit=5, turn_limit=5, message=message)
    assert [item.turn.text for item in items if item.turn is not None] == [
        "I live in Lyon now",
        "My sister is visiting on Friday",
        "I bought a cast iron pan",
    ]
    for budget in (200, 1500):
        checked = build_hint(items, max_tokens=budget, message=message, every=every)
        assert build_hint(items, max_tokens=budget, message=message, every=every, turns_new=True) == checked
    assert (
        "Lyon now"
        not in build_hint(items, message=message, every=every, turns_new=True).split(EARLIER_HEADER)[1]
    )
