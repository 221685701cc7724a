"""`regate` on both stores: rows stored before the gate (planted past it with plain SQL) pass
through today's admission — a memory whose key names a secret is erased, one with a secret in its
value rewritten and embedded again, turns and names likewise; `dry_run` counts and changes
nothing; a second pass finds nothing to do."""

from __future__ import annotations

import uuid

from sqlalchemy import update

from store.model import DirectoryEntry
from tests.factories import user_fact
from tests.store.as_the_worker import event_of, write_as_the_worker
from tests.store.store_testkit import Store

CARD = "4111  1111  1111  1111"


async def _plant(store: Store) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID, uuid.UUID]:
    user = uuid.uuid4()
    secret_key = (
        await store.writes.upsert(user_fact(user, "favourite colour", "green"), actor="worker")
    ).memory_id
    spaced = (await store.writes.upsert(user_fact(user, "payment", "pays by card"), actor="worker")).memory_id
    clean = (await store.writes.upsert(user_fact(user, "home city", "Lyon"), actor="worker")).memory_id
    channel = uuid.uuid4()
    await write_as_the_worker(store, event_of(["hello there", "hi!", "bye now"], user=user, channel=channel))
    await store.directory.set_names([DirectoryEntry(kind="user", id=user, name="Ana")])
    m, t, d = store._schema.memories, store._schema.turns, store._schema.directory
    async with store._backend.transaction() as conn:
        await conn.execute(
            update(m).where(m.c.id == secret_key).values(key="my password", value="hunter2-Xy9")
        )
        await conn.execute(update(m).where(m.c.id == spaced).values(value=f"pays with {CARD}"))
        await conn.execute(update(t).where(t.c.text == "hello there").values(text=f"my card is {CARD}"))
        await conn.execute(
            update(t).where(t.c.text == "bye now").values(text="sk-proj1234567890abcdefABCDEF")
        )
        await conn.execute(
            update(d).where(d.c.id == user).values(name="Ana\u200b  sk-proj1234567890abcdefABCDEF")
        )
    return user, secret_key, spaced, clean


async def test_regate_rewrites_or_erases_what_was_stored_before_the_gate(store: Store) -> None:
    user, secret_key, spaced, clean = await _plant(store)
    dry = await store.gate.regate(dry_run=True)
    assert (dry.memories_erased, dry.memories_rewritten) == (1, 1)
    assert (dry.turns_erased, dry.turns_rewritten) == (1, 1)
    assert dry.names_rewritten == 1
    still = await store.listing.get_by_id(secret_key)
    assert still is not None and still.value == "hunter2-Xy9"  # a dry run changes nothing

    done = await store.gate.regate()
    assert (done.memories_erased, done.memories_rewritten, done.turns_erased, done.turns_rewritten) == (
        1,
        1,
        1,
        1,
    )
    assert await store.listing.get_by_id(secret_key) is None
    rewritten = await store.listing.get_by_id(spaced)
    assert rewritten is not None and rewritten.value == "pays with [REDACTED:card_number]"
    kept = await store.listing.get_by_id(clean)
    assert kept is not None and kept.value == "Lyon"
    texts = [turn.text for turn in await store.turns.export_turns(user)]
    assert texts == ["my card is [REDACTED:card_number]", "hi!"]
    assert (await store.directory.names("user", [user]))[user] == "Ana [REDACTED:api_key]"

    again = await store.gate.regate()
    assert (again.memories_erased, again.memories_rewritten, again.turns_erased, again.turns_rewritten) == (
        0,
        0,
        0,
        0,
    )
    assert again.names_rewritten == again.names_erased == 0
