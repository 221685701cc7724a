"""A person's remembered conversations by channel: what the control plane lists and erases.

The API names a conversation by its `channel_id` (the chat room the platform knows); a channel may
hold the turns of several events (each `conversation.ended` of that room). Listing groups a person's
turns by channel, newest activity first; deleting a channel erases all of that person's turns in it
and nobody else's."""

from __future__ import annotations

import uuid

from sqlalchemy import func, select

from store.core.base import StoreBase, replica_read
from store.core.turns import conversation_conditions, delete_user_turns
from store.model import ChannelConversation, ConversationQuery, Page
from store.rules.pagination import newest_first_page


def first_line(text: str) -> str:
    """The first non-empty line of a turn's text (empty when it has none)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _ordered(values: set[uuid.UUID | None]) -> tuple[uuid.UUID | None, ...]:
    """Ids in a stable order, None (no persona / no team) last."""
    return tuple(sorted(values, key=lambda v: (v is None, str(v))))


class ChannelConversations(StoreBase):
    """Listing and deleting a person's turns by channel (both backends)."""

    @replica_read
    async def list_channel_conversations(self, query: ConversationQuery) -> Page[ChannelConversation]:
        """A person's remembered conversations, one per channel, latest turn first, one page
        (`persona_id` / `team_id` narrow it to turns said with that persona / in that team)."""
        t = self._schema.turns
        conditions = conversation_conditions(t, query)
        groups = (
            select(
                t.c.channel_id,
                func.min(t.c.at).label("started_at"),
                func.max(t.c.at).label("last_at"),
                func.count().label("turn_count"),
                func.count(t.c.event_id.distinct()).label("conversation_count"),
            )
            .where(*conditions)
            .group_by(t.c.channel_id)
            .subquery()
        )
        stmt = (
            select(groups)
            .where(*self._after(groups.c.last_at, groups.c.channel_id, query.cursor))
            .order_by(groups.c.last_at.desc(), groups.c.channel_id.desc())
            .limit(query.limit + 1)
        )
        async with self._backend.reading() as conn:
            heads = (await conn.execute(stmt)).all()
            channels = [head.channel_id for head in heads]
            firsts: dict[uuid.UUID, str] = {}
            contexts: dict[uuid.UUID, tuple[set[uuid.UUID | None], set[uuid.UUID | None]]] = {}
            if channels:
                in_page = [*conditions, t.c.channel_id.in_(channels)]
                rank = (
                    func.row_number()
                    .over(partition_by=t.c.channel_id, order_by=(t.c.at, t.c.event_id, t.c.position))
                    .label("rank")
                )
                ranked = select(t.c.channel_id, t.c.text, rank).where(*in_page).subquery()
                for row in (await conn.execute(select(ranked).where(ranked.c.rank == 1))).all():
                    firsts[row.channel_id] = first_line(row.text)
                pairs = select(t.c.channel_id, t.c.persona_id, t.c.team_id).where(*in_page).distinct()
                for row in (await conn.execute(pairs)).all():
                    personas, teams = contexts.setdefault(row.channel_id, (set(), set()))
                    personas.add(row.persona_id)
                    teams.add(row.team_id)
        entries = []
        for head in heads:
            if head.channel_id not in firsts:
                continue  # deleted between the reads
            personas, teams = contexts.get(head.channel_id, (set(), set()))
            entries.append(
                (
                    head.last_at,
                    head.channel_id,
                    ChannelConversation(
                        channel_id=head.channel_id,
                        persona_ids=_ordered(personas),
                        team_ids=_ordered(teams),
                        started_at=head.started_at,
                        last_at=head.last_at,
                        first_line=firsts[head.channel_id],
                        turn_count=int(head.turn_count),
                        conversation_count=int(head.conversation_count),
                    ),
                )
            )
        return newest_first_page(entries, query.limit)

    async def delete_channel_conversation(
        self, user_id: uuid.UUID, channel_id: uuid.UUID, *, teams: frozenset[uuid.UUID] | None = None
    ) -> int:
        """Erase this person's turns in one channel (of `teams` only, when given); how many were
        erased (0: none of theirs). Other people's turns in the channel stay."""
        channel = self._schema.turns.c.channel_id == channel_id
        return await delete_user_turns(self, user_id, teams=teams, where=[channel])
