"""Extension points of the store: what it needs from the outside, and what it offers."""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from store.types import (
    AuditEntry,
    ChatMessage,
    EventMemory,
    EventWrite,
    Memory,
    MemoryFilter,
    MemorySettings,
    NewMemory,
    OwnerRef,
    RecallHit,
    Retriever,
    Revision,
    Scope,
    SettingsLevel,
    UpsertResult,
)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into fixed-size vectors (one per text, same order)."""

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class MemoryStore(Protocol):
    """The store contract (seed §4), implemented by the Postgres and SQLite stores."""

    async def upsert(
        self, memory: NewMemory, *, actor: str = "system", event_id: uuid.UUID | None = None
    ) -> UpsertResult: ...

    async def get_by_id(self, memory_id: uuid.UUID) -> Memory | None: ...

    async def list(self, flt: MemoryFilter) -> builtins.list[Memory]: ...

    async def delete(self, memory_id: uuid.UUID, *, actor: str = "system") -> bool: ...

    async def archive(self, memory_id: uuid.UUID, *, actor: str = "system") -> bool: ...

    async def recall(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int = 20,
        *,
        retriever: Retriever = "hybrid",
        team_id: uuid.UUID | None = None,
    ) -> builtins.list[RecallHit]:
        """Active memories for the user (and persona), best first; empty query: top by confidence."""
        ...

    async def count_by_owner(self, scope: Scope, owner_id: uuid.UUID) -> int: ...

    async def approve(self, memory_id: uuid.UUID, *, actor: str) -> Memory | None: ...

    async def reject(self, memory_id: uuid.UUID, *, actor: str) -> Memory | None: ...

    async def edit(self, memory_id: uuid.UUID, value: str, *, actor: str) -> Memory | None: ...

    async def pending_revisions(self, memory_id: uuid.UUID | None = None) -> builtins.list[Revision]: ...

    async def audit_log(self, memory_id: uuid.UUID) -> builtins.list[AuditEntry]: ...

    async def settings_for(
        self, team_id: uuid.UUID | None, persona_id: uuid.UUID | None
    ) -> MemorySettings: ...

    async def put_settings(
        self,
        *,
        level: SettingsLevel,
        target_id: uuid.UUID | None,
        enabled: bool | None = None,
        persona_learning: bool | None = None,
        extraction_prompt: str | None = None,
        min_confidence: float | None = None,
    ) -> None: ...

    async def existing_memories(
        self, owners: Sequence[OwnerRef], *, team_id: uuid.UUID | None = None
    ) -> builtins.list[tuple[Memory, builtins.list[float] | None]]:
        """Active and pending memories (with embeddings) of the given (scope, owner, user) triples,
        visible in the team context (rows of no team, or of `team_id`)."""
        ...

    async def write_event(
        self,
        *,
        event_id: uuid.UUID,
        memories: Sequence[NewMemory],
        actor: str = "worker",
    ) -> EventWrite:
        """Upsert all memories, their audit rows and the processed-event row in ONE transaction.

        An already-processed `event_id` writes nothing and returns `duplicate=True`.
        """
        ...

    async def is_processed(self, event_id: uuid.UUID) -> bool: ...

    async def event_writes(self, event_id: uuid.UUID) -> builtins.list[EventMemory]:
        """What `write_event` created, updated or proposed for this event, in write order (from the
        audit trail; unchanged memories are not audited, so not listed). Empty for unknown events."""
        ...

    async def ping(self) -> None:
        """Raise if the database is unreachable."""
        ...

    async def close(self) -> None: ...


class HistoryStore(Protocol):
    """Conversation history persistence (bot plan §1): per agent and room."""

    async def append_message(self, agent_id: str, room_id: str, message: ChatMessage) -> None: ...

    async def last_messages(self, agent_id: str, room_id: str, limit: int) -> list[ChatMessage]: ...
