"""The LLM tools: schemas, the dispatcher's errors, and what each handler does to the store."""

from __future__ import annotations

import json
import uuid

import pytest

from store.model import MemoryFilter
from store.services.tools import TOOL_NAMES, MemoryTools, ToolCallError, ToolContext, fact_key, tool_schemas
from tests.store.store_testkit import Store, mem


def tools_for(store: Store, persona: uuid.UUID | None = None, user: uuid.UUID | None = None) -> MemoryTools:
    return MemoryTools(ToolContext(user_id=user or uuid.uuid4(), persona_id=persona, store=store))


def test_schemas_are_openai_function_tools() -> None:
    schemas = tool_schemas()
    assert [s["function"]["name"] for s in schemas] == list(TOOL_NAMES)
    assert TOOL_NAMES == (
        "memory_save",
        "memory_recall",
        "conversation_search",
        "remember",
        "recall",
        "forget",
    )
    for schema in schemas:
        assert schema["type"] == "function"
        params = schema["function"]["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert set(params["required"]) <= set(params["properties"])
        json.dumps(schema)
    save = schemas[0]["function"]["parameters"]
    assert save["required"] == ["key", "value"] and "confidence" in save["properties"]
    assert schemas[1]["function"]["parameters"]["required"] == []
    with pytest.raises(ToolCallError, match="unknown memory tool"):
        tool_schemas(("memory_save", "nope"))


async def test_memory_save_without_persona_is_an_active_user_memory(store: Store) -> None:
    tools = tools_for(store)
    result = await tools.handle_tool_call("memory_save", '{"key": "preferred language", "value": "Go"}')
    assert result["saved"] is True and result["scope"] == "user" and result["action"] == "created"
    memory = await store.listing.get_by_id(uuid.UUID(result["id"]))
    assert memory is not None
    assert (memory.scope, memory.owner_id, memory.user_id) == ("user", tools.context.user_id, None)
    assert (memory.status, memory.confidence) == ("active", 1.0)
    assert [e.actor for e in await store.review.audit_log(memory.id)] == [f"user:{tools.context.user_id}"]


async def test_memory_save_with_a_persona_is_persona_user_scoped(store: Store) -> None:
    persona = uuid.uuid4()
    tools = tools_for(store, persona)
    result = await tools.memory_save("struggles with", "recursion", confidence=0.7)
    memory = await store.listing.get_by_id(uuid.UUID(result["id"]))
    assert memory is not None
    assert (memory.scope, memory.owner_id, memory.user_id) == ("persona_user", persona, tools.context.user_id)
    assert memory.confidence == pytest.approx(0.7)


async def test_memory_recall_defaults_to_top_memories_and_merges_scopes(store: Store) -> None:
    user, persona = uuid.uuid4(), uuid.uuid4()
    await store.writes.upsert(mem(owner=user, key="tone", value="casual"))
    await store.writes.upsert(mem(scope="persona", owner=persona, key="policy", value="Refunds in 30 days"))
    tools = tools_for(store, persona, user)
    await tools.memory_save("tone", "formal")
    result = await tools.handle_tool_call("memory_recall", "{}")
    assert result["count"] == 2
    assert {(m["key"], m["value"], m["scope"]) for m in result["memories"]} == {
        ("tone", "formal", "persona_user"),
        ("policy", "Refunds in 30 days", "persona"),
    }
    one = await tools.memory_recall("refund policy", max_results=1)
    assert [m["key"] for m in one["memories"]] == ["policy"] and "score" in one["memories"][0]


async def test_remember_recall_forget_about_the_user(store: Store) -> None:
    tools = tools_for(store)
    await tools.remember("me", "favourite food", "Ramen")
    found = await tools.recall("user", "favourite food")
    assert found["found"] is True and [f["value"] for f in found["facts"]] == ["Ramen"]
    assert [
        m.key for m in await store.listing.list_memories(MemoryFilter(owner_id=tools.context.user_id))
    ] == ["favourite food"]
    assert (await tools.forget("myself", "favourite food"))["forgotten"] == 1
    gone = await tools.recall("me", "favourite food")
    assert gone["found"] is False and gone["facts"] == []


async def test_facts_about_someone_else_are_keyed_by_subject(store: Store) -> None:
    tools = tools_for(store)
    await tools.remember("Alice", "birthday", "3 March")
    await tools.remember("Alice", "city", "Porto")
    await tools.remember("Bob", "city", "Lisbon")
    assert fact_key("Alice", "birthday", tools.context.user_id) == "Alice / birthday"
    alice = await tools.recall("Alice")
    assert [(f["key"], f["value"]) for f in alice["facts"]] == [
        ("Alice / birthday", "3 March"),
        ("Alice / city", "Porto"),
    ]
    assert [f["value"] for f in (await tools.recall("Bob", "city"))["facts"]] == ["Lisbon"]


async def test_recall_of_an_unknown_key_offers_related_memories(store: Store) -> None:
    tools = tools_for(store)
    await tools.remember("me", "favourite food", "Ramen with extra egg")
    result = await tools.recall("me", "food they like")
    assert result["found"] is False
    assert [r["key"] for r in result["related"]] == ["favourite food"]


async def test_forget_never_deletes_persona_scope_memories(store: Store) -> None:
    user, persona = uuid.uuid4(), uuid.uuid4()
    shared = await store.writes.upsert(mem(scope="persona", owner=persona, key="policy", value="30 days"))
    own = await store.writes.upsert(mem(owner=user, key="policy", value="my own note"))
    tools = tools_for(store, persona, user)
    await tools.memory_save("policy", "per-persona note")
    assert (await tools.forget("me", "policy"))["forgotten"] == 2
    assert await store.listing.get_by_id(shared.memory_id) is not None
    assert await store.listing.get_by_id(own.memory_id) is None


async def test_tool_saves_are_not_visible_to_other_users_of_the_persona(store: Store) -> None:
    persona = uuid.uuid4()
    alice, bob = tools_for(store, persona), tools_for(store, persona)
    await alice.remember("me", "allergy", "peanuts")
    assert (await bob.memory_recall())["count"] == 0
    assert (await bob.recall("me", "allergy"))["found"] is False


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("memory_delete_all", "{}", "unknown tool 'memory_delete_all'"),
        ("memory_save", "{not json", "not valid JSON"),
        ("memory_save", "[1, 2]", "must be a JSON object"),
        ("memory_save", '{"key": "diet"}', "value: Field required"),
        ("memory_save", '{"key": "diet", "value": "vegan", "confidence": 3}', "confidence"),
        ("memory_save", '{"key": "diet", "value": "vegan", "scope": "persona"}', "scope: Extra inputs"),
        ("memory_recall", '{"max_results": 0}', "max_results"),
        ("forget", '{"subject": "me"}', "key: Field required"),
    ],
)
async def test_bad_tool_calls_raise_a_message_for_the_model(
    store: Store, name: str, arguments: str, message: str
) -> None:
    with pytest.raises(ToolCallError, match=message):
        await tools_for(store).handle_tool_call(name, arguments)


async def test_conversation_search_finds_the_users_own_words_in_this_context_only(store: Store) -> None:
    from datetime import UTC, datetime

    from store.model import NewTurn, SettingsRow

    user, persona, team = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    said = datetime(2026, 3, 4, tzinfo=UTC)

    def said_to(persona_id: uuid.UUID | None, text: str) -> NewTurn:
        return NewTurn(
            channel_id=uuid.uuid4(),
            user_id=user,
            persona_id=persona_id,
            team_id=team,
            role="user",
            text=text,
            at=said,
            position=1,
            speaker="Ada" if persona_id else None,
        )

    await store.writes.write_event(
        event_id=uuid.uuid4(), memories=[], turns=[said_to(persona, "My cat Miso hates rain")]
    )
    await store.writes.write_event(
        event_id=uuid.uuid4(), memories=[], turns=[said_to(None, "My cat Miso is grey")]
    )
    tools = MemoryTools(ToolContext(user_id=user, persona_id=persona, store=store, team_id=team))
    found = await tools.handle_tool_call("conversation_search", '{"query": "cat Miso"}')
    assert found["count"] == 1
    assert found["messages"][0]["text"] == "My cat Miso hates rain" and found["messages"][0]["role"] == "user"
    assert found["messages"][0]["at"] == said.isoformat()
    assert found["messages"][0]["speaker"] == "Ada"
    elsewhere = MemoryTools(ToolContext(user_id=uuid.uuid4(), persona_id=persona, store=store, team_id=team))
    assert (await elsewhere.conversation_search("cat Miso"))["count"] == 0
    await store.settings.replace_settings(SettingsRow(level="persona", target_id=persona, history=False))
    assert (await tools.conversation_search("cat Miso"))["count"] == 0
    with pytest.raises(ToolCallError, match="query"):
        await tools.handle_tool_call("conversation_search", "{}")
