"""Dead letters seen and fixed on the real worker and nats-server: a team that accepts known
personas only dead-letters an event for an unknown one; `pmem dlq list` shows why; once the cause
is fixed (the setting changed, or the persona registered), `pmem dlq replay` stores its memories
once; `pmem dlq purge` deletes old dead letters."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest

from cli.main import main
from store.model import DirectoryEntry, SettingsRow
from tests.worker.worker_harness import Harness, conversation, wait_for

pytestmark = pytest.mark.asyncio


@pytest.fixture
def dlq_env(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`pmem dlq` configured like the test's worker (its streams and subjects)."""
    for name in ("nats_url", "subject", "stream", "output_stream", "dlq_subject"):
        monkeypatch.setenv(f"PMEM_{name.upper()}", str(harness.base[name]))
    yield


async def pmem(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `pmem ARGV…` as the command line does (in a thread: it runs its own event loop)."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def dead_letters(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    code, out, _ = await pmem(capsys, "dlq", "list", "--json")
    assert code == 0
    return [json.loads(line) for line in out.splitlines() if line.strip()]


async def memory_writes(h: Harness, event_id: str) -> int:
    return await h.count("SELECT count(*) FROM memory_audit WHERE event_id = %s", uuid.UUID(event_id))


@pytest.mark.usefixtures("dlq_env")
async def test_a_dead_letter_is_listed_and_replayed_once_after_the_setting_changed(
    harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    h = harness
    team, persona, user = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    event = conversation(
        "I live in Lisbon. I'm vegetarian.", "Noted!", user_id=user, persona_id=persona, team_id=team
    )
    # settings are read fresh for every event here, so the change applies to the replay at once
    async with h.worker(settings_cache_s=0) as worker:
        await worker.store.settings.replace_settings(
            SettingsRow(level="team", target_id=team, known_personas_only=True)
        )
        await h.publish(event)

        async def dead_lettered() -> bool:
            return len(await h.dlq()) == 1

        await wait_for(dead_lettered, what="the event to be dead-lettered")
        assert await h.processed() == 0 and await h.memories_of(persona) == {}

        (listed,) = await dead_letters(capsys)
        assert listed["kind"] == "unknown_persona"
        assert listed["event_id"] == event["event_id"] and listed["team_id"] == str(team)
        assert f"persona {persona} is not in the directory" in str(listed["reason"])
        code, table, _ = await pmem(capsys, "dlq", "list")
        assert code == 0 and "unknown_persona" in table and event["event_id"] in table
        code, shown, _ = await pmem(capsys, "dlq", "show", str(listed["id"]))
        assert code == 0 and "I live in Lisbon" in shown

        # replayed before the cause is fixed: dead-lettered again, with the same reason
        code, _, _ = await pmem(capsys, "dlq", "replay", str(listed["id"]))
        assert code == 0

        async def dead_again() -> bool:
            found = await dead_letters(capsys)
            return len(found) == 1 and found[0]["id"] != listed["id"]

        await wait_for(dead_again, what="the replayed event to be dead-lettered again")
        (again,) = await dead_letters(capsys)
        assert again["kind"] == "unknown_persona" and again["event_id"] == event["event_id"]

        await worker.store.settings.replace_settings(
            SettingsRow(level="team", target_id=team, known_personas_only=False)
        )
        code, out, _ = await pmem(capsys, "dlq", "replay", str(again["id"]))
        assert code == 0 and f"replayed {again['id']}" in out

        async def processed() -> bool:
            return await h.processed() == 1

        await wait_for(processed, what="the replayed event to be processed")
        keys = await h.sql("SELECT key FROM memories ORDER BY key")
        assert [k for (k,) in keys] == ["diet preference", "home location"]
        written = await memory_writes(h, event["event_id"])
        assert written == 2

        # the dead letter is gone; a second replay finds nothing, a republish is a duplicate
        assert await dead_letters(capsys) == []
        code, _, err = await pmem(capsys, "dlq", "replay", str(again["id"]))
        assert code == 1 and "no dead letter" in err
        await h.publish(event, msg_id=None)

        async def settled() -> bool:
            return await h.consumer_state() == (0, 0)

        await wait_for(settled, what="the republished event to be handled")
    # the duplicate wrote nothing: the event counts once, its memories once
    assert await memory_writes(h, event["event_id"]) == written
    assert await h.processed() == 1 and await h.count("SELECT count(*) FROM memories") == 2


@pytest.mark.usefixtures("dlq_env")
async def test_registering_the_persona_fixes_it_and_replay_all_picks_by_reason(
    harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    h = harness
    team, persona = uuid.uuid4(), uuid.uuid4()
    event = conversation("I work at Acme.", "Ok.", persona_id=persona, team_id=team)
    async with h.worker() as worker:
        await worker.store.settings.replace_settings(
            SettingsRow(level="team", target_id=team, known_personas_only=True)
        )
        await h.publish(event)
        await h.publish(b"{not json", msg_id=None)

        async def both_dead() -> bool:
            return len(await h.dlq()) == 2

        await wait_for(both_dead, what="two dead letters")
        kinds = sorted(str(d["kind"]) for d in await dead_letters(capsys))
        assert kinds == ["invalid_not_json", "unknown_persona"]

        await worker.store.directory.set_names([DirectoryEntry(kind="persona", id=persona, name="Chef")])
        code, out, _ = await pmem(capsys, "dlq", "replay", "--all", "--reason", "unknown_persona")
        assert code == 0 and out.count("replayed ") == 1

        async def processed() -> bool:
            return await h.processed() == 1

        await wait_for(processed, what="the replayed event to be processed")
        (left,) = await dead_letters(capsys)
        assert left["kind"] == "invalid_not_json"
        assert left["event_id"] is None and left["body_sha256"]

        code, out, _ = await pmem(capsys, "dlq", "purge", "--older-than", "1h")
        assert code == 0 and "purged 0" in out
        code, out, _ = await pmem(capsys, "dlq", "purge", "--older-than", "0s")
        assert code == 0 and "purged 1" in out
        assert await dead_letters(capsys) == []
