"""Which turns say nothing whatever their language or emoji, and which earlier questions the next
message repeats (`store.rules.novelty`)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from store.model import Turn, TurnRole
from store.rules.novelty import asked_before, content_words, is_filler, new_turn_indexes, normalized
from tests.factories import past_turn

NOW = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)


def turn(text: str, role: TurnRole = "user") -> Turn:
    return past_turn(text, role=role, at=NOW)


SIGN_OFFS = [
    "Thanks, coach!",
    "Thank you, chef.",
    "Thanks Anna!",
    "¡Hasta luego! 📖",
    "Gracias, ¡buenas noches!",
    "¡Buen provecho!",
    "Merci beaucoup !",
    "Спасибо!",
    "ありがとう！",
    "Bon appétit!",
    "Safe travels! ✈️",
    "Keep moving! 🏃",
    "Stay warm! Keep it up! 💪",
    "Happy budgeting! 💰",
    "Have a great trip!",
    "Take care!",
    "👍🎉",
]


def test_a_turn_with_no_content_is_filler_whatever_its_language_emoji_or_vocative() -> None:
    assert [text for text in SIGN_OFFS if not is_filler(text)] == []


def test_a_turn_that_says_something_beside_its_thanks_is_not_filler() -> None:
    for content in (
        "Thanks, the risotto worked",
        "Thanks, Tuesday works for my lesson",
        "Hey chef, I'm vegan and I'm allergic to shellfish.",
        "Keep the heat low.",
        "Stay away from dairy.",
        "Have you tried tofu?",
        "Good time for flashcards.",
        "Gracias, la paella salió perfecta",
        "Rui is allergic to sesame. Thanks!",
    ):
        assert not is_filler(content), content


def asks(earlier: str, message: str) -> bool:
    return asked_before(earlier, message_words=content_words(message), message_text=normalized(message))


def test_an_earlier_question_that_opens_or_shortens_the_message_is_asked_again() -> None:
    assert asks("How do I use the subjunctive?", "How do I use the subjunctive? Is it like in Italian?")
    assert asks("Should I invest in crypto?", "Should I invest in crypto or pay something off first?")
    assert asks("Is it safe to do sit-ups", "Is it safe to do sit-ups or crunches on the floor?")
    assert asks("What should I cook?", "What should I cook for dinner tonight?")
    # another question, or a statement whose words the message happens to use, is not
    assert not asks("What can I cook with shrimp?", "What should I cook for dinner tonight?")
    assert not asks("I live in Lisbon", "Where should I live, Lisbon or Porto?")
    assert not asks("How do I use the subjunctive? Is it like in Italian?", "How do I use the subjunctive?")
    assert not asks("", "Anything?")


def test_new_turns_leave_out_the_users_shorter_question_but_keep_the_answer_to_it() -> None:
    turns = [
        turn("How do I write a formal email in Spanish?"),
        turn("Open with 'Estimado/a' and close with 'Atentamente'.", "assistant"),
        turn("¡Hasta luego! 📖", "assistant"),
        turn("Thanks, coach!"),
        # the assistant quoting the question back is not the user's question
        turn("How do I write a formal email in Spanish?", "assistant"),
    ]
    message = "How do I write a formal email in Spanish to apply for a job at a bank in Madrid?"
    assert new_turn_indexes(turns, message=message) == [1, 4]


def test_filler_and_asked_before_cost_linear_time() -> None:
    # a quadratic scan of these would take minutes: the bound is loose for a loaded machine
    hostile = ", ".join(["Thanks coach"] * 20_000) + " hasta" * 20_000 + "!" * 50_000 + "🏃" * 25_000
    question = "how " * 50_000 + "?"
    started = time.perf_counter()
    assert not is_filler(hostile)  # "hasta" alone is no sign-off
    assert is_filler(", ".join(["Thanks coach"] * 20_000))
    assert asks(question, question + " more")
    assert time.perf_counter() - started < 3.0
