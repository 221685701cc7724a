"""The one gate for text at the store's write boundary, on both stores: whatever a writer hands
`upsert`, `write_event`, `edit`, `set_names`, `put_settings` or `replace_settings`, no secret and
no invisible character is stored — every read (get, list, export, conversations, recall, names,
settings) and the hint built from recall come back clean. A memory whose key or value is nothing
but a secret is refused (ValueError naming it), a turn without content is not kept."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from store.model import DirectoryEntry, MemoryFilter, NewTurn, SettingsRow
from store.rules.admission import admit, admit_memory, has_content, secret_key_refusal
from store.rules.hint import build_hint
from store.services.context_recall import ContextRecall, items_in_context
from tests.factories import HOSTILE_TEXT, leaks, user_fact
from tests.store.store_testkit import Store

SAID = datetime(2026, 3, 4, 10, 30, tzinfo=UTC)


def texts(value: Any) -> str:
    """Every string field of a store value (a dataclass, or lists and dicts of them), one a line."""
    if isinstance(value, str):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return "\n".join(texts(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return "\n".join(texts(k) + "\n" + texts(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return "\n".join(texts(item) for item in value)
    return ""


def admissible(text: str, *, key: bool = False) -> bool:
    """Whether the gate lets `text` be a memory's key (one that names no secret) or value."""
    admitted = admit(text, one_line=True).text
    return has_content(admitted) and not (key and secret_key_refusal(admitted) is not None)


# no shrinking: a failure names the read and what leaked (examples share the store)
@settings(
    max_examples=25,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    key=HOSTILE_TEXT,
    value=HOSTILE_TEXT,
    evidence=HOSTILE_TEXT,
    said=st.lists(HOSTILE_TEXT, min_size=1, max_size=3),
    speaker=HOSTILE_TEXT,
    edit=HOSTILE_TEXT,
)
async def test_no_secret_and_no_invisible_character_passes_the_store(
    store: Store, key: str, value: str, evidence: str, said: list[str], speaker: str, edit: str
) -> None:
    user, persona, event = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()  # fresh: examples share the store
    memory = user_fact(user, key, value, evidence=f"user: {evidence}", status="active")
    if not (admissible(key, key=True) and admissible(value)):
        with pytest.raises(ValueError, match=r"key: |value: "):
            await store.writes.upsert(memory)
        with pytest.raises(ValueError, match=r"key: |value: "):
            await store.writes.write_event(event_id=event, memories=[memory])
        assert await store.listing.list_memories(MemoryFilter(owner_id=user)) == []
        memory = user_fact(user, "home city", "Lives in Lisbon", evidence=f"user: {evidence}")
    written = await store.writes.upsert(memory)
    other = dataclasses.replace(memory, key="the other note", status="pending_review")
    turns = [
        NewTurn(
            channel_id=event,
            user_id=user,
            persona_id=None,
            team_id=None,
            role="user",
            text=text,
            at=SAID,
            position=position,
            speaker=speaker,
            search_text=f'{speaker} said, "{text}"',
        )
        for position, text in enumerate(said, start=1)
    ]
    await store.writes.write_event(event_id=event, memories=[other], turns=turns)
    try:
        await store.review.edit(written.memory_id, edit, actor="person")
    except ValueError as refused:
        assert not admissible(edit) and "value: " in str(refused)
    await store.directory.set_names([DirectoryEntry(kind="user", id=user, name=speaker)])
    await store.settings.put_settings(level="persona", target_id=persona, extraction_prompt=evidence)
    await store.settings.replace_settings(
        SettingsRow(level="team", target_id=persona, extraction_prompt=said[0])
    )

    kept = await store.turns.conversation(user, event)
    assert len(kept) == sum(has_content(admit(text).text) for text in said)
    items = await items_in_context(
        store,
        ContextRecall(
            user_id=user, persona_id=None, team_id=None, query=f"{key} {value} {' '.join(said)}", limit=20
        ),
    )
    reads = {
        "get": await store.listing.get_by_id(written.memory_id),
        "list": await store.listing.list_memories(MemoryFilter(owner_id=user)),
        "export": await store.listing.export_user(user),
        "conversation": kept,
        "recall": items,
        "hint": build_hint(items),
        "audit": await store.review.audit_log(written.memory_id),
        "names": await store.directory.names("user", [user]),
        "settings": [
            await store.settings.settings_row("persona", persona),
            await store.settings.settings_row("team", persona),
        ],
        "effective": await store.settings.settings_for(persona, persona),
    }
    for read, result in reads.items():
        assert leaks(texts(result)) == [], (read, leaks(texts(result)))


async def test_a_memory_changed_by_the_gate_is_embedded_as_written(store: Store) -> None:
    user = uuid.uuid4()
    given_text = user_fact(
        user, "work", "Uses sk-proj1234567890abcdefABCDEF daily", embedding=[1.0] * 384, status="active"
    )
    assert admit_memory(given_text).embedding is None
    written = await store.writes.upsert(given_text)
    stored = await store.listing.get_by_id(written.memory_id)
    assert stored is not None and stored.value == "Uses [REDACTED:api_key] daily"
    hits = await store.recall(user, None, "uses daily", 5)
    assert [h.memory.id for h in hits] == [written.memory_id]
