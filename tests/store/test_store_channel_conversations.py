"""A person's remembered conversations by channel, on both stores: grouped, newest first, paged,
and deleted one channel at a time without touching anybody else's turns."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from store.core.channel_turns import first_line
from store.model import ConversationQuery
from tests.factories import exchange
from tests.store.store_testkit import Store

TEAM_A, TEAM_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)
PERSONA = uuid.UUID(int=0x9)
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


async def say(
    store: Store,
    *,
    user: uuid.UUID,
    channel: uuid.UUID,
    lines: list[str],
    at: datetime,
    persona: uuid.UUID | None = None,
    team: uuid.UUID | None = TEAM_A,
) -> uuid.UUID:
    """One event of `lines` (user and assistant in turn) in `channel`; its event id."""
    event_id = uuid.uuid4()
    turns = exchange(
        lines, channel=channel, user=user, persona=persona, team=team, at=at, apart=timedelta(minutes=1)
    )
    await store.writes.write_event(event_id=event_id, memories=[], turns=turns)
    return event_id


def test_first_line_skips_blank_lines() -> None:
    assert first_line("\n  \n  I moved to Porto \nlast month") == "I moved to Porto"
    assert first_line("   ") == ""


async def test_conversations_are_grouped_by_channel_newest_first_and_paged(store: Store) -> None:
    user, other = uuid.uuid4(), uuid.uuid4()
    porto, lisbon, quiet = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await say(store, user=user, channel=porto, lines=["I moved to Porto", "Nice!"], at=T0)
    await say(
        store,
        user=user,
        channel=porto,
        lines=["The flat is small"],
        at=T0 + timedelta(days=2),
        persona=PERSONA,
    )
    await say(
        store,
        user=user,
        channel=lisbon,
        lines=["\nPlanning a trip to Lisbon", "When?"],
        at=T0 + timedelta(days=1),
    )
    await say(store, user=user, channel=quiet, lines=["Hello"], at=T0 - timedelta(days=3), team=None)
    await say(store, user=other, channel=porto, lines=["Not about the user"], at=T0 + timedelta(days=5))

    first = await store.channels.list_channel_conversations(ConversationQuery(user_id=user, limit=2))
    assert [c.channel_id for c in first.items] == [porto, lisbon]
    assert first.next_cursor is not None
    porto_item = first.items[0]
    assert porto_item.first_line == "I moved to Porto"  # the channel's first turn, not the other user's
    assert porto_item.turn_count == 3 and porto_item.conversation_count == 2
    assert porto_item.persona_ids == (PERSONA, None) and porto_item.team_ids == (TEAM_A,)
    assert porto_item.started_at == T0 and porto_item.last_at == T0 + timedelta(days=2)
    assert first.items[1].first_line == "Planning a trip to Lisbon"
    rest = await store.channels.list_channel_conversations(
        ConversationQuery(user_id=user, limit=2, cursor=first.next_cursor)
    )
    assert [c.channel_id for c in rest.items] == [quiet] and rest.next_cursor is None
    assert rest.items[0].team_ids == (None,)

    with_persona = await store.channels.list_channel_conversations(
        ConversationQuery(user_id=user, persona_id=PERSONA)
    )
    assert [(c.channel_id, c.turn_count) for c in with_persona.items] == [(porto, 1)]
    in_team = await store.channels.list_channel_conversations(ConversationQuery(user_id=user, team_id=TEAM_A))
    assert {c.channel_id for c in in_team.items} == {porto, lisbon}


async def test_deleting_a_channel_erases_only_that_persons_turns_there(store: Store) -> None:
    user, other = uuid.uuid4(), uuid.uuid4()
    porto, lisbon = uuid.uuid4(), uuid.uuid4()
    await say(store, user=user, channel=porto, lines=["I moved to Porto", "Nice!"], at=T0)
    await say(store, user=user, channel=porto, lines=["The flat is small"], at=T0 + timedelta(days=1))
    await say(store, user=user, channel=lisbon, lines=["Trip to Lisbon"], at=T0)
    await say(store, user=other, channel=porto, lines=["Someone else in the room"], at=T0)

    assert await store.channels.delete_channel_conversation(other, lisbon) == 0  # not theirs
    assert await store.channels.delete_channel_conversation(user, porto, teams=frozenset({TEAM_B})) == 0
    assert await store.channels.delete_channel_conversation(user, porto) == 3
    assert await store.channels.delete_channel_conversation(user, porto) == 0

    left = await store.channels.list_channel_conversations(ConversationQuery(user_id=user))
    assert [c.channel_id for c in left.items] == [lisbon]
    assert [t.text for t in await store.turns.export_turns(user)] == ["Trip to Lisbon"]
    assert [t.text for t in await store.turns.export_turns(other)] == ["Someone else in the room"]
