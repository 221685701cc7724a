"""Conversation history per agent and room (a short-term window)."""

from __future__ import annotations

import builtins
from typing import Any, cast

from sqlalchemy import select

from store.core.base import StoreBase
from store.model import (
    ChatMessage,
)


class ChatHistory(StoreBase):
    """Append and read chat messages."""

    # -- history ------------------------------------------------------------------

    async def append_message(self, agent_id: str, room_id: str, message: ChatMessage) -> None:
        """Persist one message of a room's conversation."""
        c = self._schema.chat_messages
        async with self._transaction() as conn:
            await conn.execute(
                self._insert(c).values(
                    agent_id=agent_id,
                    room_id=room_id,
                    role=message.role,
                    content=message.content,
                    created_at=message.at if message.at is not None else self._now(),
                )
            )

    async def last_messages(self, agent_id: str, room_id: str, limit: int) -> builtins.list[ChatMessage]:
        """The last `limit` messages of a room, oldest first (ready for a `Window`)."""
        if limit <= 0:
            return []
        c = self._schema.chat_messages
        stmt = (
            select(c.c.role, c.c.content, c.c.created_at)
            .where(c.c.agent_id == agent_id, c.c.room_id == room_id)
            .order_by(c.c.id.desc())
            .limit(limit)
        )
        async with self._reading() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            ChatMessage(role=cast(Any, r.role), content=r.content, at=r.created_at) for r in reversed(rows)
        ]
