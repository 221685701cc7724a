"""Extension points of the store: what it needs from the outside, and what it offers."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from store.model import (
    ApiKey,
    AuditEntry,
    ChannelConversation,
    ContextFacts,
    Conversation,
    ConversationQuery,
    DedupRule,
    DirectoryEntry,
    DirectoryKind,
    EventMemory,
    EventWrite,
    Memory,
    MemoryFilter,
    MemorySettings,
    NewMemory,
    NewTurn,
    OwnerRef,
    Page,
    RecallHit,
    RecallQuery,
    Rejection,
    Retriever,
    ReviewItem,
    ReviewQuery,
    Revision,
    Scope,
    SettingsLevel,
    SettingsRow,
    Turn,
    TurnHit,
    UiSession,
    UpsertResult,
    UserExport,
    UserMemoryQuery,
)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into fixed-size vectors (one per text, same order). `embed` is for what the store
    keeps; an embedder whose model gives queries another role (e5's "query: ") also has
    `embed_queries(texts)`, which recall uses for its query texts (`store.core.base`)."""

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class RecallStore(Protocol):
    """What recall and the hint need (the CLI, the API's platform endpoints, the tools)."""

    async def recall(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int = 20,
        *,
        retriever: Retriever = "hybrid",
        team_id: uuid.UUID | None = None,
    ) -> list[RecallHit]:
        """Active memories for the user (and persona) in the team context, best first."""
        ...

    async def settings_for(
        self, team_id: uuid.UUID | None, persona_id: uuid.UUID | None
    ) -> MemorySettings: ...

    async def recall_turns(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int = 10,
        *,
        team_id: uuid.UUID | None = None,
        query_embedding: Sequence[float] | None = None,
    ) -> list[TurnHit]:
        """Turns said in exactly this context (user, persona or none, team or none), best first."""
        ...

    async def pending_changes(self, memory_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, Revision]:
        """The open proposed change of each of these memories that has one (one read)."""
        ...

    async def pinned_facts(
        self, user_id: uuid.UUID, persona_id: uuid.UUID | None, *, team_id: uuid.UUID | None
    ) -> list[Memory]:
        """Active pinned memories of the user (and persona) in the team context (every hint's)."""
        ...

    async def context_facts(self, asked: RecallQuery, *, standing: int, pinned: bool) -> ContextFacts:
        """A hint's facts: the most relevant to `asked`, all of them by standing when fewer than
        `standing` (else None), and with `pinned` the pinned ones (`pinned_facts`)."""
        ...


class WorkerStore(Protocol):
    """What the worker's per-event pipeline needs: policy, existing memories, one write per event,
    and the display names events carry."""

    async def set_names(self, entries: Sequence[DirectoryEntry]) -> None: ...

    async def names(self, kind: DirectoryKind, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
        """The known names of these ids (ids the directory does not know are absent)."""
        ...

    async def settings_for(
        self, team_id: uuid.UUID | None, persona_id: uuid.UUID | None
    ) -> MemorySettings: ...

    async def prompt_memories(
        self,
        owners: Sequence[OwnerRef],
        *,
        team_id: uuid.UUID | None,
        words: Sequence[str],
        limit: int,
    ) -> list[Memory]:
        """At most `limit` memories of these owners (team context) most relevant to `words`."""
        ...

    async def write_event(
        self,
        *,
        event_id: uuid.UUID,
        memories: Sequence[NewMemory],
        actor: str = "worker",
        dedup: DedupRule | None = None,
        neighbours: int = 8,
        turns: Sequence[NewTurn] = (),
        body_sha256: str | None = None,
    ) -> EventWrite:
        """Upsert all memories, their audit rows, the event's turns and the processed-event row in
        ONE transaction.

        An already-processed `event_id` writes nothing and returns `duplicate=True`, with the
        `body_sha256` it was first written with (so a reused id with another body shows). With `dedup`,
        each memory is first decided against its `neighbours` nearest stored memories, inside the
        transaction and under a per-owner lock (`Backend.lock_owners`)."""
        ...

    async def is_processed(self, event_id: uuid.UUID) -> bool: ...

    async def event_writes(self, event_id: uuid.UUID) -> list[EventMemory]:
        """What `write_event` created, updated or proposed for this event, in write order (from the
        audit trail; unchanged memories are not audited, so not listed). Empty for unknown events."""
        ...

    async def ping(self) -> None:
        """Raise if the database is unreachable."""
        ...

    async def close(self) -> None: ...


class ReviewStore(Protocol):
    """The review queue and its decisions (admins and team admins)."""

    async def review_queue(self, query: ReviewQuery) -> Page[ReviewItem]: ...

    async def review_target(self, item_id: uuid.UUID) -> Memory | None:
        """The memory a review item (memory id or open-revision id) stands for."""
        ...

    async def pending_counts(self, teams: frozenset[uuid.UUID] | None = None) -> dict[str, int]: ...

    async def get_by_id(self, memory_id: uuid.UUID) -> Memory | None: ...

    async def approve(self, memory_id: uuid.UUID, *, actor: str) -> Memory | None: ...

    async def reject(self, memory_id: uuid.UUID, *, actor: str) -> Memory | None: ...

    async def set_pinned(self, memory_id: uuid.UUID, pinned: bool, *, actor: str) -> Memory | None: ...

    async def reject_memory(
        self,
        memory_id: uuid.UUID,
        *,
        actor: str,
        forget: bool = False,
        person: uuid.UUID | None = None,
    ) -> Rejection | None:
        """Reject (a reviewer; or a person, their own memory whatever its status), and with
        `forget` erase the conversation turns its evidence cites, leaving no text of them."""
        ...

    async def edit(
        self,
        memory_id: uuid.UUID,
        value: str,
        *,
        actor: str,
        activate: bool = False,
        pending_only: bool = False,
    ) -> Memory | None: ...

    async def pending_revisions(self, memory_id: uuid.UUID | None = None) -> list[Revision]: ...

    async def audit_log(self, memory_id: uuid.UUID) -> list[AuditEntry]: ...


class PersonalStore(Protocol):
    """A person's control over what is stored about them, and erasure."""

    async def list_for_user(self, query: UserMemoryQuery) -> Page[Memory]: ...

    async def export_user(self, user_id: uuid.UUID) -> UserExport: ...

    async def erase(self, memory_id: uuid.UUID, *, actor: str = "system") -> bool: ...

    async def erase_own(self, memory_id: uuid.UUID, *, actor: str, person: uuid.UUID) -> bool:
        """Erase a person's own memory, and their words it quotes from the evidence of the team's
        other memories and proposals."""
        ...

    async def erase_user(
        self,
        user_id: uuid.UUID,
        *,
        actor: str,
        teams: frozenset[uuid.UUID] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int: ...

    async def list_conversations(self, query: ConversationQuery) -> Page[Conversation]:
        """A person's remembered conversations, newest first."""
        ...

    async def conversation(self, user_id: uuid.UUID, event_id: uuid.UUID) -> list[Turn]:
        """The turns of one of this person's conversations, in order."""
        ...

    async def delete_conversation(
        self, user_id: uuid.UUID, event_id: uuid.UUID, *, teams: frozenset[uuid.UUID] | None = None
    ) -> int: ...

    async def delete_conversations(
        self, user_id: uuid.UUID, *, teams: frozenset[uuid.UUID] | None = None
    ) -> int: ...

    async def list_channel_conversations(self, query: ConversationQuery) -> Page[ChannelConversation]:
        """A person's remembered conversations, one per channel, latest turn first."""
        ...

    async def delete_channel_conversation(
        self, user_id: uuid.UUID, channel_id: uuid.UUID, *, teams: frozenset[uuid.UUID] | None = None
    ) -> int:
        """Erase this person's turns in one channel; how many went."""
        ...


class SettingsStore(Protocol):
    """Memory settings per level, with inheritance."""

    @property
    def settings_defaults(self) -> MemorySettings: ...

    async def settings_row(self, level: SettingsLevel, target_id: uuid.UUID | None) -> SettingsRow: ...

    async def replace_settings(self, row: SettingsRow) -> None: ...

    async def settings_for(
        self, team_id: uuid.UUID | None, persona_id: uuid.UUID | None
    ) -> MemorySettings: ...


class KeyStore(Protocol):
    """Service API keys."""

    async def create_api_key(self, name: str) -> tuple[ApiKey, str]: ...

    async def list_api_keys(self) -> list[ApiKey]: ...

    async def revoke_api_key(self, name_or_id: str) -> bool: ...

    async def verify_api_key(self, key: str) -> ApiKey | None: ...


class SessionStore(Protocol):
    """Web-UI sessions, each opened by one single-use sign-in token."""

    async def open_ui_session(
        self,
        *,
        digest: str,
        sign_in_id: str,
        sign_in_expires_at: datetime,
        session: UiSession,
    ) -> bool: ...

    async def ui_session(self, digest: str) -> UiSession | None: ...

    async def end_ui_session(self, digest: str) -> None: ...


class DirectoryStore(Protocol):
    """Display names of teams, personas and users."""

    async def set_names(self, entries: Sequence[DirectoryEntry]) -> None: ...

    async def names(self, kind: DirectoryKind, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]: ...

    async def directory(self, kind: DirectoryKind, *, limit: int = 500) -> list[DirectoryEntry]: ...


class MemoryStore(RecallStore, WorkerStore, ReviewStore, PersonalStore, SettingsStore, Protocol):
    """The whole store contract, implemented by the Postgres and SQLite stores."""

    async def upsert(
        self, memory: NewMemory, *, actor: str = "system", event_id: uuid.UUID | None = None
    ) -> UpsertResult: ...

    async def list_memories(self, flt: MemoryFilter) -> list[Memory]: ...

    async def delete(self, memory_id: uuid.UUID, *, actor: str = "system") -> bool: ...

    async def archive(self, memory_id: uuid.UUID, *, actor: str = "system") -> bool: ...

    async def count_by_owner(self, scope: Scope, owner_id: uuid.UUID) -> int: ...

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


class ControlPlaneStore(MemoryStore, KeyStore, DirectoryStore, SessionStore, Protocol):
    """Everything `pmem serve` needs: the whole store (the memory tools write through it), API keys,
    display names and web-UI sessions."""

    async def ping(self) -> None: ...
