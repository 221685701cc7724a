"""The web UI's pure decisions (api/ui/core.py): sessions, CSRF, navigation, parsing, view models."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from api.ui import core
from store.model import ReviewQuery

TEAM = uuid.UUID("6d43c50b-3849-56d1-93dd-b57a6f867071")


def test_session_cookie_is_httponly_strict_lives_as_long_as_the_token_and_secure_only_over_https() -> None:
    cookie = core.session_cookie("jwt", expires_at=1_000_600.9, now=1_000_000.0, scheme="http")
    assert cookie is not None
    assert (cookie.max_age, cookie.secure, cookie.httponly, cookie.samesite) == (600, False, True, "strict")
    secure = core.session_cookie("jwt", expires_at=1_000_600, now=1_000_000, scheme="https")
    assert secure is not None and secure.secure
    assert core.session_cookie("jwt", expires_at=1_000_000, now=1_000_000, scheme="https") is None


@pytest.mark.parametrize(
    ("role", "landing", "labels"),
    [
        ("admin", "/ui/review", ["Review queue", "My memories", "Settings"]),
        ("team_admin", "/ui/review", ["Review queue", "My memories", "Settings"]),
        ("user", "/ui/me", ["My memories"]),
    ],
)
def test_a_role_lands_on_its_page_and_sees_only_the_links_it_may_use(
    role: str, landing: str, labels: list[str]
) -> None:
    assert core.landing_path(role) == landing
    links = core.nav_links(role, "/ui/me")
    assert [link.label for link in links] == labels
    assert [link.label for link in links if link.current] == ["My memories"]


@pytest.mark.parametrize(
    ("candidate", "role", "expected"),
    [
        ("/ui/settings/global", "admin", "/ui/settings/global"),
        ("/ui/settings/global", "user", "/ui/me"),
        ("https://evil.example/ui/", "admin", "/ui/review"),
        ("//evil.example/ui/", "admin", "/ui/review"),
        ("/ui/\\evil", "admin", "/ui/review"),
        (None, "user", "/ui/me"),
    ],
)
def test_sign_in_continues_only_inside_the_ui(candidate: str | None, role: str, expected: str) -> None:
    assert core.safe_next(candidate, role) == expected


def test_review_filters_parse_and_round_trip_through_the_query_string() -> None:
    params = {"team_id": str(TEAM), "scope": "persona", "min_confidence": "0.7", "cursor": "c1", "junk": "x"}
    filters, errors = core.parse_review_filters(params)
    assert errors == {}
    assert filters.team_id == TEAM and filters.scope == "persona" and filters.min_confidence == 0.7
    assert filters.active
    again, _ = core.parse_review_filters(dict(p.split("=") for p in filters.query(cursor="c2").split("&")))
    assert again == core.ReviewFilters(team_id=TEAM, scope="persona", min_confidence=0.7, cursor="c2")
    assert "a persona's own" in filters.summary() and "confidence ≥ 0.7" in filters.summary()


def test_the_filters_become_the_store_query_with_the_page_size() -> None:
    person, persona = uuid.uuid4(), uuid.uuid4()
    filters = core.ReviewFilters(
        team_id=TEAM, scope="user", persona_id=persona, user_id=person, min_confidence=0.4, cursor="c3"
    )
    assert filters.review_query(limit=25) == ReviewQuery(
        team_id=TEAM,
        scope="user",
        persona_id=persona,
        user_id=person,
        min_confidence=0.4,
        limit=25,
        cursor="c3",
    )
    assert core.ReviewFilters().review_query(limit=10) == ReviewQuery(limit=10)


def test_unreadable_filters_are_ignored_and_reported_per_field() -> None:
    filters, errors = core.parse_review_filters(
        {"team_id": "acme", "scope": "everyone", "min_confidence": "2", "user_id": " "}
    )
    assert filters == core.ReviewFilters()
    assert not filters.active
    assert set(errors) == {"team_id", "scope", "min_confidence"}
    assert "UUID" in errors["team_id"] and "between 0 and 1" in errors["min_confidence"]


def test_bulk_ids_drop_duplicates_and_report_what_is_not_an_id() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    ids, bad = core.parse_ids([str(a), "nope", str(b), str(a)])
    assert ids == [a, b] and bad == ["nope"]


def test_settings_form_maps_inherit_to_none_and_reports_bad_values_per_field() -> None:
    values, errors = core.parse_settings_form(
        {
            "enabled": "off",
            "persona_learning": "inherit",
            "extraction_prompt": "  ",
            "min_confidence": "0.65",
            "pending_days": "14",
            "archived_days": "",
            "history": "off",
            "history_days": "30",
            "review_tool_saves": "on",
            "known_personas_only": "on",
        }
    )
    assert errors == {}
    assert values == {
        "enabled": False,
        "persona_learning": None,
        "extraction_prompt": None,
        "min_confidence": 0.65,
        "pending_days": 14,
        "archived_days": None,
        "history": False,
        "history_days": 30,
        "review_tool_saves": True,
        "known_personas_only": True,
    }
    _, errors = core.parse_settings_form({"enabled": "maybe", "min_confidence": "1.5", "pending_days": "0"})
    assert set(errors) == {"enabled", "min_confidence", "pending_days"}


def test_a_proposed_change_shows_old_and_new_and_approving_keeps_the_new_value() -> None:
    row = core.review_row(
        {
            "id": "r1",
            "kind": "revision",
            "memory_id": "m1",
            "scope": "user",
            "owner_id": "u1",
            "key": "home city",
            "old_value": "Lives in Lisbon",
            "new_value": "Lives in Porto",
            "confidence": 0.9,
            "created_at": "2026-11-29T18:00:00Z",
        }
    )
    assert row.is_change and row.memory_id == "m1"
    assert (row.old_value, row.proposed) == ("Lives in Lisbon", "Lives in Porto")
    assert row.created == "29 Nov 2026, 18:00 UTC" and row.confidence == "0.90"


def test_my_memories_are_grouped_by_scope_then_persona_with_pending_marked_and_archived_left_out() -> None:
    persona_b, persona_a = "bbbbbbbb-0000-0000-0000-000000000000", "aaaaaaaa-0000-0000-0000-000000000000"
    at = datetime(2026, 11, 29, 18, tzinfo=UTC)

    def item(key: str, scope: str, owner: str, status: str = "active") -> dict[str, object]:
        return {
            "id": key,
            "scope": scope,
            "owner_id": owner,
            "key": key,
            "value": key,
            "status": status,
            "confidence": 0.8,
            "created_at": at,
            "updated_at": at,
        }

    groups = core.group_my_memories(
        [
            item("pizza", "persona_user", persona_b, "pending_review"),
            item("city", "user", "me"),
            item("old", "user", "me", "archived"),
            item("diet", "persona_user", persona_a),
            item("age", "user", "me", "pending_review"),
        ]
    )
    assert [g.heading for g in groups] == [
        "About you",
        "You, with persona aaaaaaaa",
        "You, with persona bbbbbbbb",
    ]
    assert [c.key for c in groups[0].cards] == ["age", "city"]
    assert [c.pending for c in groups[0].cards] == [True, False]
    assert groups[2].cards[0].pending


@pytest.mark.parametrize(
    ("level", "source", "value", "field", "shown"),
    [
        ("team", "team", 14, "pending_days", "In effect: 14 · set here"),
        ("team", "global", 0.6, "min_confidence", "In effect: 0.6 · inherited from the global settings"),
        (
            "persona",
            "default",
            None,
            "extraction_prompt",
            "In effect: the built-in prompt · the deployment default",
        ),
        ("global", "default", None, "archived_days", "In effect: never · the deployment default"),
        ("team", "team", False, "enabled", "In effect: off · set here"),
    ],
)
def test_each_setting_says_what_is_in_effect_and_where_it_comes_from(
    level: str, source: str, value: object, field: str, shown: str
) -> None:
    assert str(core.effect_of(level, source, value, field)).startswith(shown)


@pytest.mark.parametrize(
    ("scope", "persona", "user", "words"),
    [
        ("user", None, None, "about you"),
        ("persona", "Chef", None, "Chef's own"),
        ("persona_user", "Chef", None, "you, with Chef"),
        ("user", None, "Alice", "about Alice"),
        ("persona_user", "Chef", "Alice", "Alice, with Chef"),
        ("persona", "Doris", "Alice", "Doris' own"),
        ("persona", None, None, "the persona's own"),
        ("persona_user", None, None, "you, with the persona"),
        ("team", None, None, "team"),  # not a scope: shown as given
    ],
)
def test_scope_words_say_whose_a_memory_is_as_a_person_says_it(
    scope: str, persona: str | None, user: str | None, words: str
) -> None:
    assert core.scope_words(scope, persona=persona, user=user) == words


def test_a_reviewer_reads_whose_a_memory_is_by_name_or_by_short_id() -> None:
    alice, chef = uuid.uuid4(), uuid.uuid4()
    names = core.Names(personas={str(chef): "Chef"}, users={str(alice): "Alice Martin"})
    assert names.scope_words("user", alice) == "about Alice Martin"
    assert names.scope_words("persona", chef) == "Chef's own"
    assert names.scope_words("persona_user", chef, alice) == "Alice Martin, with Chef"
    stranger = uuid.uuid4()
    assert core.NO_NAMES.scope_words("persona_user", chef, stranger) == (
        f"user {str(stranger)[:8]}, with persona {str(chef)[:8]}"
    )
    assert core.SCOPE_CHOICES == {
        "user": "About a user",
        "persona": "A persona's own",
        "persona_user": "A user, with a persona",
    }


def test_the_header_says_who_is_signed_in() -> None:
    subject = uuid.UUID("36afe7e8-1b43-5866-b7b7-64b2e12a423e")
    assert core.signed_in_as("user", "Alice Martin", subject) == "Signed in as Alice Martin"
    assert core.signed_in_as("admin", "Priya Raman", subject) == "Signed in as Priya Raman, admin"
    assert core.signed_in_as("team_admin", None, subject) == "Signed in as team admin 36afe7e8"


def test_a_remembered_conversation_names_its_personas() -> None:
    chef, stranger = uuid.uuid4(), uuid.uuid4()
    item = {
        "channel_id": "c1",
        "last_at": None,
        "turn_count": 2,
        "first_line": "hi",
        "persona_ids": [chef, stranger],
    }
    names = core.Names(personas={str(chef): "Chef"})
    assert core.conversation_row(item, names).with_whom == f"Chef, persona {str(stranger)[:8]}"
    assert core.conversation_row({**item, "persona_ids": [None]}).with_whom == "no persona"
