"""Every endpoint × every role × own / another user's / another team's resource → one expected
status, generated from one table, on Postgres. Zero leaks: a refused call changes nothing and never
shows the memory's text; a remembered conversation's text is shown to nobody but its person (and
to the platform's recall for that person)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from store.model import NewTurn
from store.postgres.store import PostgresMemoryStore
from tests.api.conftest import TEAM_A, TEAM_B, People
from tests.factories import user_fact

ROLES = ("anonymous", "user", "team_admin", "admin", "service")
# own: about `user`, written in team A; other_user: about `other_user` in team A; other_team: about
# `other_user` in team B. The user and the team admin belong to team A.
RESOURCES = ("own", "other_user", "other_team")
PERSONA = uuid.UUID(int=0x9)
SECRET_VALUE = {
    "own": "own-secret-7f3a",
    "other_user": "other-secret-1b9c",
    "other_team": "team-b-secret-5d2e",
}
TURN_SECRET = {
    "own": "own-said-4c1e",
    "other_user": "other-said-8a2f",
    "other_team": "team-b-said-3e7d",
}
SAID_AT = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Case:
    """One endpoint: how to call it, and the status per role (and per resource where it matters)."""

    method: str
    path: str  # {id}: the resource memory; {user}: its subject; {team}: its team; {channel}: its conversation
    body: dict[str, Any] | None
    expect: dict[str, Any]  # role → status, or role → {resource: status}


def per(own: int, other_user: int, other_team: int) -> dict[str, int]:
    return {"own": own, "other_user": other_user, "other_team": other_team}


ANY_PERSON = {"anonymous": 401, "user": 200, "team_admin": 200, "admin": 200, "service": 403}
REVIEWERS = {
    "anonymous": 401,
    "user": 403,
    "team_admin": per(200, 200, 404),
    "admin": 200,
    "service": 403,
}
TABLE: tuple[Case, ...] = (
    Case("GET", "/v1/me/memories", None, ANY_PERSON),
    Case("GET", "/v1/me/export", None, ANY_PERSON),
    Case("DELETE", "/v1/me/memories", None, ANY_PERSON),
    Case(
        "PATCH",
        "/v1/me/memories/{id}",
        {"value": "edited"},
        {"anonymous": 401, "user": per(200, 404, 404), "team_admin": 404, "admin": 404, "service": 403},
    ),
    Case(
        "DELETE",
        "/v1/me/memories/{id}",
        None,
        {"anonymous": 401, "user": per(204, 404, 404), "team_admin": 404, "admin": 404, "service": 403},
    ),
    *(
        Case(
            "POST",
            "/v1/me/memories/{id}/reject",
            body,
            {"anonymous": 401, "user": per(200, 404, 404), "team_admin": 404, "admin": 404, "service": 403},
        )
        for body in (None, {"forget": True})
    ),
    Case("GET", "/v1/me/conversations", None, ANY_PERSON),
    Case(
        "DELETE",
        "/v1/me/conversations/{channel}",
        None,
        {"anonymous": 401, "user": per(200, 404, 404), "team_admin": 404, "admin": 404, "service": 403},
    ),
    Case("DELETE", "/v1/me/conversations", None, ANY_PERSON),
    Case("GET", "/v1/review", None, {**REVIEWERS, "team_admin": 200}),
    Case("POST", "/v1/review/{id}/approve", None, REVIEWERS),
    Case("POST", "/v1/review/{id}/reject", None, REVIEWERS),
    Case("POST", "/v1/review/{id}/reject", {"forget": True}, REVIEWERS),
    Case("POST", "/v1/review/{id}/edit", {"value": "edited"}, REVIEWERS),
    Case("POST", "/v1/review/bulk", {"action": "approve", "ids": ["{id}"]}, {**REVIEWERS, "team_admin": 200}),
    Case("GET", "/v1/memories/{id}", None, REVIEWERS),
    Case(
        "GET",
        "/v1/settings/global",
        None,
        {"anonymous": 401, "user": 403, "team_admin": 403, "admin": 200, "service": 403},
    ),
    Case(
        "PUT",
        "/v1/settings/global",
        {"min_confidence": 0.6},
        {"anonymous": 401, "user": 403, "team_admin": 403, "admin": 200, "service": 403},
    ),
    Case(
        "GET",
        "/v1/settings/teams/{team}",
        None,
        {"anonymous": 401, "user": 403, "team_admin": per(200, 200, 403), "admin": 200, "service": 403},
    ),
    Case(
        "PUT",
        "/v1/settings/teams/{team}",
        {"pending_days": 10},
        {"anonymous": 401, "user": 403, "team_admin": per(200, 200, 403), "admin": 200, "service": 403},
    ),
    Case(
        "GET",
        f"/v1/settings/personas/{PERSONA}",
        None,
        {"anonymous": 401, "user": 403, "team_admin": 200, "admin": 200, "service": 403},
    ),
    Case(
        "PUT",
        f"/v1/settings/personas/{PERSONA}",
        {"persona_learning": True},
        {"anonymous": 401, "user": 403, "team_admin": 403, "admin": 200, "service": 403},
    ),
    Case(
        "POST",
        "/v1/recall",
        {"user_id": "{user}", "team_id": "{team}", "query": "what was said"},
        {"anonymous": 401, "user": 403, "team_admin": 403, "admin": 403, "service": 200},
    ),
    Case(
        "POST",
        "/v1/hint",
        {"user_id": "{user}", "team_id": "{team}", "query": "what was said"},
        {"anonymous": 401, "user": 403, "team_admin": 403, "admin": 403, "service": 200},
    ),
    Case(
        "DELETE",
        "/v1/users/{user}/memories",
        None,
        # a team admin erases what was said in their own teams (another team's: nothing, see below)
        {"anonymous": 401, "user": 403, "team_admin": 200, "admin": 200, "service": 200},
    ),
    Case(
        "GET",
        "/v1/tools",
        None,
        {"anonymous": 401, "user": 200, "team_admin": 200, "admin": 200, "service": 200},
    ),
    # a person acts for themselves only, in the teams their token lists; a service for anyone
    *(
        Case(
            "POST",
            "/v1/tools/call",
            {"name": name, "arguments": arguments, "user_id": "{user}", "team_id": "{team}"},
            {"anonymous": 401, "user": per(200, 403, 403), "team_admin": 403, "admin": 403, "service": 200},
        )
        for name, arguments in (
            ("memory_recall", {}),
            ("recall", {"subject": "me", "key": "fact {resource}"}),
            ("forget", {"subject": "me", "key": "fact {resource}"}),
            ("memory_save", {"key": "fact {resource}", "value": "overwritten"}),
        )
    ),
    Case(
        "PUT",
        "/v1/directory/users/{user}",
        {"name": "Ada"},
        {"anonymous": 401, "user": 403, "team_admin": 403, "admin": 200, "service": 200},
    ),
)


RECALL_PATHS = ("/v1/recall", "/v1/hint")


def expected(case: Case, role: str, resource: str) -> int:
    value = case.expect[role]
    return value[resource] if isinstance(value, dict) else int(value)


def fill(template: Any, values: dict[str, str]) -> Any:
    if isinstance(template, str):
        for name, value in values.items():
            template = template.replace("{" + name + "}", value)
        return template
    if isinstance(template, list):
        return [fill(item, values) for item in template]
    if isinstance(template, dict):
        return {k: fill(v, values) for k, v in template.items()}
    return template


def owners(people: People) -> dict[str, tuple[uuid.UUID, uuid.UUID]]:
    """The subject and team of each resource kind."""
    return {
        "own": (people.user, TEAM_A),
        "other_user": (people.other_user, TEAM_A),
        "other_team": (people.other_user, TEAM_B),
    }


def channel_of(resource: str) -> uuid.UUID:
    """The conversation (channel) each resource kind's turn was said in."""
    return uuid.UUID(int=0xC0 + RESOURCES.index(resource))


async def seed(store: PostgresMemoryStore, people: People) -> dict[str, uuid.UUID]:
    """One pending memory (with evidence) and one remembered turn per resource kind."""
    ids = {}
    for resource, (subject, team) in owners(people).items():
        turn = NewTurn(
            channel_id=channel_of(resource),
            user_id=subject,
            persona_id=None,
            team_id=team,
            role="user",
            text=TURN_SECRET[resource],
            at=SAID_AT,
            position=1,
        )
        await store.writes.write_event(event_id=uuid.uuid4(), memories=[], turns=[turn])
        result = await store.writes.upsert(
            user_fact(
                subject,
                f"fact {resource}",
                SECRET_VALUE[resource],
                status="pending_review",
                team_id=team,
                evidence=f"user: {SECRET_VALUE[resource]}",
                observed_at=SAID_AT,
            )
        )
        ids[resource] = result.memory_id
    return ids


async def snapshot(store: PostgresMemoryStore, ids: dict[str, uuid.UUID], people: People) -> dict[str, Any]:
    memories = {resource: await store.listing.get_by_id(memory_id) for resource, memory_id in ids.items()}
    turns = {person: await store.turns.export_turns(person) for person in (people.user, people.other_user)}
    return {"memories": memories, "turns": turns}


CASES = [(case, role, resource) for case in TABLE for role in ROLES for resource in RESOURCES]


@pytest.mark.parametrize(
    ("case", "role", "resource"),
    CASES,
    ids=[f"{c.method} {c.path} as {role} on {resource}" for c, role, resource in CASES],
)
async def test_authorization_matrix(
    case: Case,
    role: str,
    resource: str,
    client: httpx.AsyncClient,
    api_store: PostgresMemoryStore,
    people: People,
) -> None:
    ids = await seed(api_store, people)
    subject = people.user if resource == "own" else people.other_user
    team = TEAM_B if resource == "other_team" else TEAM_A
    values = {
        "id": str(ids[resource]),
        "user": str(subject),
        "team": str(team),
        "channel": str(channel_of(resource)),
        "resource": resource,
    }
    before = await snapshot(api_store, ids, people)
    response = await client.request(
        case.method, fill(case.path, values), json=fill(case.body, values), headers=people.headers(role)
    )
    want = expected(case, role, resource)
    assert response.status_code == want, response.text
    if response.status_code != 204:
        assert "error" in response.json() if want >= 400 else True
    # a turn is read by its person and by the platform's recall for that person, by nobody else
    may_read_turns = {"user": {"own"}, "service": {resource} if case.path in RECALL_PATHS else set()}
    for other, said in TURN_SECRET.items():
        if other not in may_read_turns.get(role, set()):
            assert said not in response.text, f"{role} read {other}'s conversation"
    if role == "service" and case.path in RECALL_PATHS:
        assert TURN_SECRET[resource] in response.text  # the recall the check above guards does read turns
    if want >= 400:
        assert await snapshot(api_store, ids, people) == before  # a refused call changes nothing
        assert all(secret not in response.text for secret in SECRET_VALUE.values())
    elif response.status_code == 200 and (case.method == "GET" or case.path == "/v1/tools/call"):
        # what a caller may list never includes what it may not see
        visible = {
            "user": {"own"},
            "team_admin": {"own", "other_user"},
            "admin": set(RESOURCES),
            "service": {resource},
        }[role]
        for other, secret in SECRET_VALUE.items():
            if other not in visible:
                assert secret not in response.text, f"{role} saw {other}"


async def test_bulk_decisions_skip_what_a_team_admin_may_not_see(
    client: httpx.AsyncClient, api_store: PostgresMemoryStore, people: People
) -> None:
    ids = await seed(api_store, people)
    response = await client.post(
        "/v1/review/bulk",
        json={"action": "approve", "ids": [str(i) for i in ids.values()]},
        headers=people.headers("team_admin"),
    )
    assert response.status_code == 200
    status = {item["id"]: item["status"] for item in response.json()["results"]}
    assert status == {
        str(ids["own"]): "done",
        str(ids["other_user"]): "done",
        str(ids["other_team"]): "not_found",
    }
    untouched = await api_store.listing.get_by_id(ids["other_team"])
    assert untouched is not None and untouched.status == "pending_review"


async def test_a_team_admin_erases_a_user_only_in_their_own_teams(
    client: httpx.AsyncClient, api_store: PostgresMemoryStore, people: People
) -> None:
    ids = await seed(api_store, people)
    response = await client.delete(
        f"/v1/users/{people.other_user}/memories", headers=people.headers("team_admin")
    )
    assert response.status_code == 200 and response.json() == {"erased": 1}
    assert await api_store.listing.get_by_id(ids["other_user"]) is None
    kept = await api_store.listing.get_by_id(ids["other_team"])
    assert kept is not None and kept.value == SECRET_VALUE["other_team"]
    assert [t.text for t in await api_store.turns.export_turns(people.other_user)] == [
        TURN_SECRET["other_team"]
    ]
    assert [t.text for t in await api_store.turns.export_turns(people.user)] == [TURN_SECRET["own"]]
