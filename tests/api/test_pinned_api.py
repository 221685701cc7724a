"""Pinning over HTTP: reviewers within their teams (`PUT /v1/memories/{id}/pinned`) and the person
(`PATCH /v1/me/memories/{id}`); 200, 403, 404 and 422 as for the other review writes."""

from __future__ import annotations

import uuid

import httpx

from store.postgres.store import PostgresMemoryStore
from store.sqlite.store import SqliteMemoryStore
from tests.api.conftest import TEAM_A, TEAM_B, People
from tests.factories import user_fact


async def test_reviewers_pin_within_their_teams_and_people_pin_their_own(
    each_store: PostgresMemoryStore | SqliteMemoryStore, each_people: People, each_client: httpx.AsyncClient
) -> None:
    people, http = each_people, each_client
    mine = (
        await each_store.writes.upsert(
            user_fact(people.user, "allergy", "Is allergic to shellfish", status="active", team_id=TEAM_A)
        )
    ).memory_id
    elsewhere = (
        await each_store.writes.upsert(
            user_fact(people.other_user, "allergy", "Nuts", status="active", team_id=TEAM_B)
        )
    ).memory_id
    put = f"/v1/memories/{mine}/pinned"
    answer = await http.put(put, json={"pinned": True}, headers=people.headers("team_admin"))
    assert answer.status_code == 200 and answer.json()["pinned"] is True, answer.text
    assert (await http.put(put, json={"pinned": True}, headers=people.headers("user"))).status_code == 403
    assert (await http.put(put, json={"pinned": True}, headers=people.headers("service"))).status_code == 403
    other_team = f"/v1/memories/{elsewhere}/pinned"
    assert (
        await http.put(other_team, json={"pinned": True}, headers=people.headers("team_admin"))
    ).status_code == 404
    missing = f"/v1/memories/{uuid.uuid4()}/pinned"
    assert (
        await http.put(missing, json={"pinned": True}, headers=people.headers("admin"))
    ).status_code == 404
    assert (await http.put(put, json={"pinned": "yes"}, headers=people.headers("admin"))).status_code == 422
    assert (await http.put(put, json={}, headers=people.headers("admin"))).status_code == 422

    patch = f"/v1/me/memories/{mine}"
    answer = await http.patch(patch, json={"pinned": False}, headers=people.headers("user"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["pinned"] is False and answer.json()["value"] == "Is allergic to shellfish"
    unchanged = await http.patch(patch, json={}, headers=people.headers("user"))
    assert unchanged.status_code == 200 and unchanged.json()["pinned"] is False  # nothing to change
    not_mine = f"/v1/me/memories/{elsewhere}"
    assert (
        await http.patch(not_mine, json={"pinned": True}, headers=people.headers("user"))
    ).status_code == 404
    actions = [entry.action for entry in await each_store.review.audit_log(mine)]
    assert actions[-2:] == ["pin", "unpin"]
