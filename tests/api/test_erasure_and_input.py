"""Erasure leaves no trace of the text anywhere in the database; bad input gets a JSON error that
names the problem, never a stack trace."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import jwt
import psycopg

from api.app import create_app
from api.auth import mint_jwt
from store.model import DirectoryEntry, NewMemory, NewTurn
from store.postgres.store import PostgresMemoryStore
from tests.api.conftest import AUTH, SECRET, TEAM_A, People
from tests.factories import user_fact

ERASED = "Keeps a diary in Esperanto"


def text_columns_holding(url: str, needle: str) -> list[str]:
    """Every (table.column) of a text-like type, in every table of the public schema, that contains
    `needle` anywhere (tsvector columns searched through their text form)."""
    hits = []
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' "
            "AND data_type IN ('text', 'character varying', 'tsvector', 'json', 'jsonb')"
        ).fetchall()
        assert len(columns) > 10  # the search really covers the schema
        for table, column in columns:
            row = conn.execute(
                f'SELECT count(*) FROM "{table}" WHERE "{column}"::text ILIKE %s',
                (f"%{needle.split()[-1]}%",),
            ).fetchone()
            if row and row[0]:
                hits.append(f"{table}.{column}")
    return hits


SAID_AT = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)


async def write_history(store: PostgresMemoryStore, people: People) -> uuid.UUID:
    """A memory with a revision history (added, a proposal with its evidence), a persona's memory
    about the person, and the remembered conversation they come from."""
    said = [
        NewTurn(
            channel_id=uuid.UUID(int=0xC1),
            user_id=people.user,
            persona_id=None,
            team_id=TEAM_A,
            role=role,
            text=text,
            at=SAID_AT,
            position=position,
        )
        for position, (role, text) in enumerate(
            [("user", ERASED + " since May"), ("assistant", "Esperanto is a fine choice")], start=1
        )
    ]
    await store.writes.write_event(event_id=uuid.uuid4(), memories=[], turns=said)
    first = await store.writes.upsert(
        user_fact(
            people.user,
            "hobby",
            "Keeps a diary",
            status="active",  # reviewed: the next value becomes a proposal
            team_id=TEAM_A,
        )
    )
    await store.writes.upsert(
        user_fact(
            people.user,
            "hobby",
            ERASED,
            status="pending_review",
            team_id=TEAM_A,
            evidence=f"user: {ERASED} since May",
            observed_at=SAID_AT,
        )
    )
    await store.writes.upsert(
        NewMemory(
            scope="persona_user",
            owner_id=uuid.uuid4(),
            user_id=people.user,
            key="language",
            value=ERASED + " daily",
            team_id=TEAM_A,
            evidence=f"user: {ERASED} since May",
            observed_at=SAID_AT,
        )
    )
    # the name the platform gave the user goes with them; another user's name stays
    await store.directory.set_names(
        [
            DirectoryEntry(kind="user", id=people.user, name="Ada, who writes in Esperanto"),
            DirectoryEntry(kind="user", id=people.other_user, name="Bea"),
        ]
    )
    return first.memory_id


async def test_erasing_everything_about_a_user_leaves_no_text_in_any_table_or_export(
    client: httpx.AsyncClient, api_store: PostgresMemoryStore, people: People, api_db_url: str
) -> None:
    await write_history(api_store, people)
    assert text_columns_holding(api_db_url, ERASED)  # the probe finds the text before
    response = await client.delete(f"/v1/users/{people.user}/memories", headers=people.headers("service"))
    assert response.status_code == 200 and response.json() == {"erased": 2}
    assert text_columns_holding(api_db_url, ERASED) == []
    assert await api_store.directory.names("user", [people.user, people.other_user]) == {
        people.other_user: "Bea"
    }
    export = await client.get("/v1/me/export", headers=people.headers("user"))
    assert export.status_code == 200 and "Esperanto" not in export.text
    audit = export.json()["audit"]
    assert export.json()["memories"] == [] and [a["action"] for a in audit].count("erase") == 2
    assert all(a["key"] is None and a["old_value"] is None and a["new_value"] is None for a in audit)
    assert export.json()["turns"] == [] and export.json()["revisions"] == []


async def test_a_persons_delete_all_erases_their_memories_and_conversations_everywhere(
    client: httpx.AsyncClient, api_store: PostgresMemoryStore, people: People, api_db_url: str
) -> None:
    await write_history(api_store, people)
    before = (await client.get("/v1/me/export", headers=people.headers("user"))).json()
    assert [t["text"] for t in before["turns"]] == [ERASED + " since May", "Esperanto is a fine choice"]
    assert {m["evidence"] for m in before["memories"]} >= {f"user: {ERASED} since May"}
    assert any(r["evidence"] == f"user: {ERASED} since May" for r in before["revisions"])
    assert all(m["observed_at"] == SAID_AT.isoformat() for m in before["memories"] if m["evidence"])
    response = await client.delete("/v1/me/memories", headers=people.headers("user"))
    assert response.status_code == 200 and response.json() == {"erased": 2}
    assert text_columns_holding(api_db_url, ERASED) == []
    assert (await client.get("/v1/me/conversations", headers=people.headers("user"))).json()["items"] == []


async def test_deleting_my_conversations_erases_every_turn_and_keeps_the_memories(
    client: httpx.AsyncClient, api_store: PostgresMemoryStore, people: People, api_db_url: str
) -> None:
    await write_history(api_store, people)
    response = await client.delete("/v1/me/conversations", headers=people.headers("user"))
    assert response.status_code == 200 and response.json() == {"erased": 2}
    assert "conversation_turns.text" not in text_columns_holding(api_db_url, "Esperanto")
    with psycopg.connect(api_db_url) as conn:
        row = conn.execute("SELECT count(*) FROM conversation_turns").fetchone()
    assert row is not None and row[0] == 0
    memories = (await client.get("/v1/me/memories", headers=people.headers("user"))).json()["items"]
    assert len(memories) == 2


async def test_a_user_erasing_one_memory_leaves_a_content_free_tombstone(
    client: httpx.AsyncClient, api_store: PostgresMemoryStore, people: People, api_db_url: str
) -> None:
    memory_id = await write_history(api_store, people)
    response = await client.delete(f"/v1/me/memories/{memory_id}", headers=people.headers("user"))
    assert response.status_code == 204
    with psycopg.connect(api_db_url) as conn:
        rows = conn.execute(
            "SELECT action, actor, key, old_value, new_value FROM memory_audit "
            "WHERE memory_id = %s ORDER BY id",
            (memory_id,),
        ).fetchall()
    assert rows[-1][:2] == ("erase", f"user:{people.user}")
    assert all(row[2:] == (None, None, None) for row in rows)
    assert "memory_revisions" not in str(text_columns_holding(api_db_url, "Esperanto"))


async def test_malformed_ids_and_bodies_are_422_naming_the_field(
    client: httpx.AsyncClient, people: People
) -> None:
    bad_path = await client.post("/v1/review/not-a-uuid/approve", headers=people.headers("admin"))
    assert bad_path.status_code == 422 and "item_id" in bad_path.json()["error"]
    bad_body = await client.post(
        "/v1/recall", json={"user_id": "x", "limit": 0}, headers=people.headers("service")
    )
    assert bad_body.status_code == 422
    assert "user_id" in bad_body.json()["error"] and "limit" in bad_body.json()["error"]
    unknown = await client.put(
        "/v1/settings/global", json={"min_confidense": 0.5}, headers=people.headers("admin")
    )
    assert unknown.status_code == 422 and "min_confidense" in unknown.json()["error"]
    cursor = await client.get("/v1/review?cursor=forged", headers=people.headers("admin"))
    assert cursor.status_code == 422 and "cursor" in cursor.json()["error"]


async def test_422s_name_the_field_as_sent_and_the_json_type(
    client: httpx.AsyncClient, people: People
) -> None:
    service = people.headers("service")
    user = str(people.user)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"json": {"user_id": user, "query": "x" * 4001}}, "query: longer than 4000 characters"),
        ({"json": {"user_id": user, "limit": "ten"}}, "limit: expected an integer, got a string"),
        ({"json": {"user_id": user, "include": "memories"}}, "include: expected an array, got a string"),
        ({"json": {"user_id": 7}}, "user_id: expected a UUID string, got an integer"),
        ({"json": {}}, "user_id: required; it is missing"),
        ({"json": ["user_id"]}, "body: expected an object, got an array"),
        (
            {"content": b'{"user_id": ', "headers": {"Content-Type": "application/json"}},
            "body: not valid JSON (Expecting value at character 12)",
        ),
        (
            {"content": b'{"user_id": "\xff"}', "headers": {"Content-Type": "application/json"}},
            "body: not valid JSON (not UTF-8: invalid start byte at byte 13)",
        ),
    ]
    for kwargs, expected in cases:
        headers = {**service, **kwargs.pop("headers", {})}
        response = await client.post("/v1/recall", headers=headers, **kwargs)
        assert response.status_code == 422, (expected, response.text)
        assert response.json() == {"error": expected}
    query = await client.get("/v1/review?limit=lots", headers=people.headers("admin"))
    assert query.json()["error"] == "query parameter limit: expected an integer, got a string"


async def test_an_oversized_body_is_413(client: httpx.AsyncClient, people: People) -> None:
    huge = {"user_id": str(people.user), "query": "x" * 70_000}
    response = await client.post("/v1/recall", json=huge, headers=people.headers("service"))
    assert response.status_code == 413 and "error" in response.json()


async def test_expired_forged_and_malformed_tokens_are_401(client: httpx.AsyncClient, people: People) -> None:
    expired = mint_jwt(secret=SECRET, subject=people.user, ttl_s=-10)
    forged = mint_jwt(secret="another-secret-that-is-long-enough-too", subject=people.user)
    no_exp = jwt.encode({"sub": str(people.user)}, SECRET, algorithm="HS256")
    bad_role = jwt.encode(
        {"sub": str(people.user), "exp": int(time.time()) + 60, "pmem_role": "root"},
        SECRET,
        algorithm="HS256",
    )
    none_alg = jwt.encode({"sub": str(people.user), "exp": int(time.time()) + 60}, None, algorithm="none")
    for token in (expired, forged, no_exp, bad_role, none_alg, "garbage", "pmem_sk_unknown"):
        response = await client.get("/v1/me/memories", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 401, token
        assert set(response.json()) == {"error"}
    assert (
        "expired"
        in (await client.get("/v1/me/memories", headers={"Authorization": f"Bearer {expired}"})).json()[
            "error"
        ]
    )


async def test_a_revoked_api_key_stops_working(api_store: PostgresMemoryStore) -> None:
    _, key = await api_store.api_keys.create_api_key("short-lived")
    body = {"user_id": str(uuid.uuid4())}
    headers = {"Authorization": f"Bearer {key}"}
    for expected in (200, 401):
        # a new app per call: one process caches a verified key for a few seconds (API_KEY_CACHE_S)
        app = create_app(store=api_store, auth=AUTH)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://pmem.test"
        ) as http:
            assert (await http.post("/v1/recall", json=body, headers=headers)).status_code == expected
        await api_store.api_keys.revoke_api_key("short-lived")


async def test_settings_validate_the_prompt_override_and_show_inheritance(
    client: httpx.AsyncClient, people: People
) -> None:
    admin = people.headers("admin")
    assert (
        await client.put("/v1/settings/global", json={"min_confidence": 0.7}, headers=admin)
    ).status_code == 200
    team = (await client.put(f"/v1/settings/teams/{TEAM_A}", json={"pending_days": 5}, headers=admin)).json()
    assert team["own"]["pending_days"] == 5 and team["own"]["min_confidence"] is None
    assert team["effective"]["min_confidence"] == 0.7 and team["inherited_from"]["min_confidence"] == "global"
    assert team["inherited_from"]["pending_days"] == "team"
    too_long = "Keep facts. " * 3000
    response = await client.put(
        f"/v1/settings/teams/{TEAM_A}", json={"extraction_prompt": too_long}, headers=admin
    )
    assert response.status_code == 422 and "extraction_prompt" in response.json()["error"]


async def test_turning_memory_off_applies_to_the_same_apps_recall_at_once(
    api_store: PostgresMemoryStore, people: People
) -> None:
    await api_store.writes.upsert(
        user_fact(
            people.user,
            "diet",
            "Is vegetarian",
            status="active",
            team_id=TEAM_A,
        )
    )
    # a cache far longer than the test: only the settings write itself can make recall see it
    app = create_app(store=api_store, auth=AUTH, settings_cache_s=3600)
    body = {"user_id": str(people.user), "team_id": str(TEAM_A), "query": "diet"}
    service, admin = people.headers("service"), people.headers("admin")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://pmem.test") as http:
        before = (await http.post("/v1/recall", json=body, headers=service)).json()
        off = await http.put(f"/v1/settings/teams/{TEAM_A}", json={"enabled": False}, headers=admin)
        assert off.status_code == 200
        after = (await http.post("/v1/recall", json=body, headers=service)).json()
    assert [hit["key"] for hit in before["items"]] == ["diet"]
    assert after["items"] == []
