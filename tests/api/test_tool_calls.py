"""Pure rules: who a tool call acts for, display-name cleaning, names from events, UI labels."""

from __future__ import annotations

import json
import uuid

import pytest

from api.errors import BadInput, Forbidden
from api.principal import Principal
from api.tool_calls import ToolSubject, tool_subject
from api.ui.core import Names, group_my_memories
from store.rules.directory import MAX_NAME_CHARS, clean_name, directory_entries
from worker.events import ConversationEnded, EventLimits, event_names, parse_event

TEAM_A, TEAM_B, PERSONA = uuid.UUID(int=0xA), uuid.UUID(int=0xB), uuid.UUID(int=9)
PERSON = uuid.uuid4()


def test_a_person_acts_for_themselves_in_their_teams() -> None:
    person = Principal(role="user", subject=PERSON, teams=frozenset({TEAM_A}))
    assert tool_subject(person, user_id=None, persona_id=PERSONA, team_id=TEAM_A) == ToolSubject(
        user_id=PERSON, persona_id=PERSONA, team_id=TEAM_A
    )
    assert tool_subject(person, user_id=PERSON, persona_id=None, team_id=None).user_id == PERSON
    with pytest.raises(Forbidden, match="themselves"):
        tool_subject(person, user_id=uuid.uuid4(), persona_id=None, team_id=None)
    with pytest.raises(Forbidden, match="pmem_teams"):
        tool_subject(person, user_id=None, persona_id=None, team_id=TEAM_B)
    admin = Principal(role="admin", subject=PERSON)
    with pytest.raises(Forbidden):  # an admin's token lists no team: an admin is a person here too
        tool_subject(admin, user_id=None, persona_id=None, team_id=TEAM_A)


def test_a_service_names_the_user() -> None:
    service = Principal(role="service", service_name="chat")
    other = uuid.uuid4()
    assert tool_subject(service, user_id=other, persona_id=None, team_id=TEAM_B).user_id == other
    with pytest.raises(BadInput, match="user_id"):
        tool_subject(service, user_id=None, persona_id=None, team_id=None)


def test_names_are_cleaned_never_rejected_for_fixable_problems() -> None:
    assert clean_name("  Chef\tRemy \n") == "Chef Remy"
    assert clean_name("Ada\x00\x07 Lovelace") == "Ada Lovelace"
    assert clean_name(" \x00 ") is None and clean_name(None) is None
    assert clean_name("x" * 500) == "x" * MAX_NAME_CHARS
    entries = directory_entries(team=(TEAM_A, "Acme"), persona=(None, "Chef"), user=(PERSON, "  "))
    assert [(e.kind, e.id, e.name) for e in entries] == [("team", TEAM_A, "Acme")]


def event_with(**names: object) -> ConversationEnded:
    body = {
        "event_id": str(uuid.uuid4()),
        "type": "conversation.ended",
        "channel_id": str(uuid.uuid4()),
        "user_id": str(PERSON),
        "persona_id": str(PERSONA),
        "team_id": str(TEAM_A),
        "messages": [{"role": "user", "content": "hi"}],
        **names,
    }
    event = parse_event(json.dumps(body).encode(), EventLimits())
    assert isinstance(event, ConversationEnded), event
    return event


def test_an_events_names_are_optional_and_a_bad_one_is_ignored_not_fatal() -> None:
    assert event_names(event_with()) == []
    named = event_names(event_with(team_name="Acme", persona_name="Chef Remy", user_name="Alice"))
    assert [(e.kind, e.id, e.name) for e in named] == [
        ("team", TEAM_A, "Acme"),
        ("persona", PERSONA, "Chef Remy"),
        ("user", PERSON, "Alice"),
    ]
    # a number where a name belongs loses the name, never the event
    assert [e.kind for e in event_names(event_with(user_name=42, team_name="Acme"))] == ["team"]


def test_labels_show_names_and_fall_back_to_the_short_id() -> None:
    names = Names(personas={str(PERSONA): "Chef Remy"})
    assert names.label("persona", PERSONA) == "Chef Remy"
    assert names.label("team", TEAM_A) == str(TEAM_A)[:8]
    item = {"id": "m1", "scope": "persona_user", "owner_id": str(PERSONA), "key": "diet", "value": "veg",
            "status": "active", "confidence": 0.9}  # fmt: skip
    assert [g.heading for g in group_my_memories([item], names)] == ["You, with Chef Remy"]
    assert [g.heading for g in group_my_memories([item])] == [f"You, with persona {str(PERSONA)[:8]}"]
