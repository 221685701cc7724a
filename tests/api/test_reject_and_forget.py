"""Reject and forget what was said, through the API on Postgres and SQLite: a reviewer's
`POST /v1/review/{id}/reject {"forget": true}` and a person's `POST /v1/me/memories/{id}/reject`
erase the conversation turns the memory's evidence cites (no table keeps any text of them, and
recall no longer finds them); a plain rejection keeps them, and recall still finds them."""

from __future__ import annotations

import uuid

import httpx

from store.postgres.store import PostgresMemoryStore
from store.sqlite.store import SqliteMemoryStore
from tests.api.conftest import TEAM_A, TEAM_B, People
from tests.api.test_the_gate_at_every_door import Gated, csrf, gated
from tests.store.as_the_worker import event_of, write_as_the_worker
from tests.store.test_store_turns import holding

Store = PostgresMemoryStore | SqliteMemoryStore
__all__ = ["gated"]
WORD = "Quillberry"
SAID = [
    "Hello again",
    "Hi! What's new?",
    f"I named my new bicycle {WORD} after my grandmother's garden",
    "What a lovely name for a bicycle",
    "Thanks, see you",
]


async def told(
    store: Store, people: People, *, team: uuid.UUID = TEAM_A, key: str = "bicycle name"
) -> tuple[uuid.UUID, uuid.UUID]:
    """The user's conversation (and the other participant's copy of it); the memory from it citing
    the bicycle message, pending review, and the conversation's channel."""
    channel = uuid.uuid4()
    [memory_id] = await write_as_the_worker(
        store,
        event_of(SAID, user=people.user, channel=channel, team=team),
        [(key, "Has a named bicycle", (3,))],
    )
    await write_as_the_worker(store, event_of(SAID, user=people.other_user, channel=channel, team=team))
    return memory_id, channel


async def recalled_turns(client: httpx.AsyncClient, people: People, user: uuid.UUID) -> list[str]:
    """The turn texts the platform's recall gives for the bicycle, in the user's context."""
    answer = await client.post(
        "/v1/recall",
        json={
            "user_id": str(user),
            "team_id": str(TEAM_A),
            "query": "bicycle name garden",
            "include": ["turns"],
        },
        headers=people.headers("service"),
    )
    assert answer.status_code == 200, answer.text
    return [item["text"] for item in answer.json()["items"]]


async def test_a_reviewer_rejects_and_forgets_what_was_said(
    each_client: httpx.AsyncClient, each_store: Store, each_people: People
) -> None:
    people = each_people
    memory_id, _ = await told(each_store, people)
    assert SAID[2] in await recalled_turns(each_client, people, people.user)
    answer = await each_client.post(
        f"/v1/review/{memory_id}/reject", json={"forget": True}, headers=people.headers("team_admin")
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "archived" and body["evidence"] is None and body["forgotten_turns"] == 2
    assert holding(each_store, WORD) == []  # no table or column holds any of it
    for user in (people.user, people.other_user):
        assert all(WORD not in text for text in await recalled_turns(each_client, people, user))
        assert [t.text for t in await each_store.turns.export_turns(user)] == [
            s for s in SAID if WORD not in s
        ]
    detail = await each_client.get(f"/v1/memories/{memory_id}", headers=people.headers("admin"))
    assert [entry["action"] for entry in detail.json()["history"]][-1] == "reject"
    again = await each_client.post(
        f"/v1/review/{memory_id}/reject", json={"forget": True}, headers=people.headers("admin")
    )
    assert again.status_code == 409 and "error" in again.json()


async def test_a_plain_rejection_keeps_the_conversation_for_recall(
    each_client: httpx.AsyncClient, each_store: Store, each_people: People
) -> None:
    people = each_people
    for n, body in enumerate((None, {"forget": False})):
        memory_id, _ = await told(each_store, people, key=f"bicycle name {n}")
        kwargs = {} if body is None else {"json": body}
        answer = await each_client.post(
            f"/v1/review/{memory_id}/reject", headers=people.headers("admin"), **kwargs
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "archived" and "forgotten_turns" not in answer.json()
        assert WORD in answer.json()["evidence"]
    assert SAID[2] in await recalled_turns(each_client, people, people.user)
    assert "conversation_turns.text" in holding(each_store, WORD)


async def test_a_person_rejects_their_own_memory_and_forgets_their_own_turns(
    each_client: httpx.AsyncClient, each_store: Store, each_people: People
) -> None:
    people = each_people
    memory_id, _ = await told(each_store, people)
    me = people.headers("user")
    answer = await each_client.post(f"/v1/me/memories/{memory_id}/reject", json={"forget": True}, headers=me)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "archived" and answer.json()["forgotten_turns"] == 1
    assert all(WORD not in text for text in await recalled_turns(each_client, people, people.user))
    # the other participant's copy of the conversation is theirs
    assert SAID[2] in await recalled_turns(each_client, people, people.other_user)
    mine = (await each_client.get("/v1/me/memories", headers=me)).json()["items"]
    assert [(m["id"], m["status"], m["evidence"]) for m in mine] == [(str(memory_id), "archived", None)]
    again = await each_client.post(f"/v1/me/memories/{memory_id}/reject", headers=me)
    assert again.status_code == 409
    # somebody else's memory is not found (an admin too acts here as a person), and stays as it is
    theirs, _ = await told(each_store, people, key="other bicycle")
    other = await each_client.post(
        f"/v1/me/memories/{theirs}/reject", json={"forget": True}, headers=people.headers("admin")
    )
    assert other.status_code == 404 and WORD not in other.text
    kept = await each_store.listing.get_by_id(theirs)
    assert kept is not None and kept.status == "pending_review"


async def test_a_team_admin_cannot_forget_another_teams_conversation(
    each_client: httpx.AsyncClient, each_store: Store, each_people: People
) -> None:
    people = each_people
    memory_id, _ = await told(each_store, people, team=TEAM_B)
    answer = await each_client.post(
        f"/v1/review/{memory_id}/reject", json={"forget": True}, headers=people.headers("team_admin")
    )
    assert answer.status_code == 404
    assert WORD not in answer.text
    assert SAID[2] in [t.text for t in await each_store.turns.export_turns(people.user)]
    memory = await each_store.listing.get_by_id(memory_id)
    assert memory is not None and memory.status == "pending_review"


async def test_a_persons_forget_clears_their_words_from_a_persona_memory_quoting_them(
    each_client: httpx.AsyncClient, each_store: Store, each_people: People
) -> None:
    from store.model import NewMemory

    people = each_people
    memory_id, channel = await told(each_store, people)
    mine = await each_store.listing.get_by_id(memory_id)
    assert mine is not None and mine.evidence is not None and WORD in mine.evidence
    persona = uuid.uuid4()
    quoted = await each_store.writes.upsert(
        NewMemory(
            scope="persona",
            owner_id=persona,
            user_id=None,
            key="favourite bicycle names",
            value="Users name bicycles after gardens",
            source_channel_id=channel,
            team_id=TEAM_A,
            evidence=f"{mine.evidence}\nassistant: {SAID[3]}",
        ),
        actor="worker",
    )
    me = people.headers("user")
    answer = await each_client.post(f"/v1/me/memories/{memory_id}/reject", json={"forget": True}, headers=me)
    assert answer.status_code == 200, answer.text
    persona_memory = await each_store.listing.get_by_id(quoted.memory_id)
    assert persona_memory is not None
    assert persona_memory.evidence == f"assistant: {SAID[3]}"  # what others said stays


async def test_the_forget_tool_forgets_the_persons_words_too(
    each_client: httpx.AsyncClient, each_store: Store, each_people: People
) -> None:
    people = each_people
    memory_id, _ = await told(each_store, people)
    answer = await each_client.post(
        "/v1/tools/call",
        json={
            "name": "forget",
            "arguments": {"subject": "me", "key": "bicycle name"},
            "user_id": str(people.user),
            "team_id": str(TEAM_A),
        },
        headers=people.headers("service"),
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"]["forgotten"] == 1
    assert await each_store.listing.get_by_id(memory_id) is None
    assert all(WORD not in text for text in await recalled_turns(each_client, people, people.user))
    assert SAID[2] in await recalled_turns(each_client, people, people.other_user)


async def test_bulk_reject_can_forget_as_the_single_item_route_does(
    each_client: httpx.AsyncClient, each_store: Store, each_people: People
) -> None:
    people = each_people
    first, _ = await told(each_store, people)
    second, _ = await told(each_store, people, key="other bicycle")
    answer = await each_client.post(
        "/v1/review/bulk",
        json={"action": "reject", "ids": [str(first), str(second)], "forget": True},
        headers=people.headers("team_admin"),
    )
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [r["status"] for r in results] == ["done", "done"]
    assert sum(r["forgotten_turns"] for r in results) >= 2
    assert holding(each_store, WORD) == []
    # with approve, forget erases nothing: the item is decided as without it
    approved = await each_client.post(
        "/v1/review/bulk",
        json={"action": "approve", "ids": [str(first)], "forget": True},
        headers=people.headers("team_admin"),
    )
    assert approved.status_code == 200, approved.text
    assert [r["status"] for r in approved.json()["results"]] == ["nothing_pending"]


async def test_erasing_a_person_clears_their_words_from_the_teams_memories(
    each_client: httpx.AsyncClient, each_store: Store, each_people: People
) -> None:
    from store.model import NewMemory

    people = each_people
    memory_id, channel = await told(each_store, people)
    mine = await each_store.listing.get_by_id(memory_id)
    assert mine is not None and mine.evidence is not None
    quoted = await each_store.writes.upsert(
        NewMemory(
            scope="persona",
            owner_id=uuid.uuid4(),
            user_id=None,
            key="favourite bicycle names",
            value="Users name bicycles after gardens",
            source_channel_id=channel,
            team_id=TEAM_A,
            evidence=f"{mine.evidence}\nassistant: {SAID[3]}",
        ),
        actor="worker",
    )
    await each_store.erasure.erase_user(people.user, actor="admin:test")
    persona_memory = await each_store.listing.get_by_id(quoted.memory_id)
    assert persona_memory is not None and persona_memory.evidence == f"assistant: {SAID[3]}"


async def test_a_persons_plain_delete_clears_their_words_from_the_teams_evidence(
    each_client: httpx.AsyncClient, each_store: Store, each_people: People
) -> None:
    from store.model import NewMemory

    people = each_people
    memory_id, channel = await told(each_store, people)
    mine = await each_store.listing.get_by_id(memory_id)
    assert mine is not None and mine.evidence is not None and WORD in mine.evidence
    # a persona memory and another person's memory quote the same line beside other lines
    quoting = {}
    for key, scope, owner, user in (
        ("favourite bicycle names", "persona", uuid.uuid4(), None),
        ("heard a bicycle name", "user", people.other_user, None),
    ):
        result = await each_store.writes.upsert(
            NewMemory(
                scope=scope,  # type: ignore[arg-type]
                owner_id=owner,
                user_id=user,
                key=key,
                value="Users name bicycles after gardens",
                source_channel_id=channel,
                team_id=TEAM_A,
                evidence=f"{mine.evidence}\nassistant: {SAID[3]}",
            ),
            actor="worker",
        )
        quoting[key] = result.memory_id
    answer = await each_client.delete(f"/v1/me/memories/{memory_id}", headers=people.headers("user"))
    assert answer.status_code == 204, answer.text
    assert await each_store.listing.get_by_id(memory_id) is None
    for key, quoted_id in quoting.items():
        quoted = await each_store.listing.get_by_id(quoted_id)
        assert quoted is not None and quoted.evidence == f"assistant: {SAID[3]}", key  # others' words stay
    # nothing of the line is left in any memory or audit row; the conversation's turns stay
    assert set(holding(each_store, WORD)) <= {"conversation_turns.text", "conversation_turns.search_text"}
    assert SAID[2] in [t.text for t in await each_store.turns.export_turns(people.user)]


async def test_the_ui_delete_on_my_memories_clears_the_words_too(gated: Gated) -> None:
    from store.model import NewMemory

    g = gated
    channel = uuid.uuid4()
    [memory_id] = await write_as_the_worker(
        g.store,
        event_of(SAID, user=g.user, channel=channel, team=g.team),
        [("bicycle name", "Has a named bicycle", (3,))],
    )
    mine = await g.store.listing.get_by_id(memory_id)
    assert mine is not None and mine.evidence is not None and WORD in mine.evidence
    persona = await g.store.writes.upsert(
        NewMemory(
            scope="persona",
            owner_id=g.persona,
            user_id=None,
            key="favourite bicycle names",
            value="Users name bicycles after gardens",
            source_channel_id=channel,
            team_id=g.team,
            evidence=mine.evidence,
        ),
        actor="worker",
    )
    form = {"csrf_token": await csrf(g.user_ui, "/ui/me")}
    posted = await g.user_ui.post(f"/ui/me/memories/{memory_id}/delete", data=form)
    assert posted.status_code == 303, posted.text
    assert await g.store.listing.get_by_id(memory_id) is None
    quoted = await g.store.listing.get_by_id(persona.memory_id)
    assert quoted is not None and quoted.evidence is None
