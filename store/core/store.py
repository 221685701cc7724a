"""The store both backends share, in SQLAlchemy Core, composed of one role object per concern,
each a class of its own module: `writes` (`store.core.writes`), `review` (`store.core.review`),
`pinning` (`store.core.pinning`), `listing` (`store.core.listing`), `erasure` and retention
(`store.core.erasure`), `forgetting` — rejecting and forgetting what was said
(`store.core.forgetting`), `gate` — the admission gate run again over stored text
(`store.core.regate`), `turns` — conversation turns (`store.core.turns`), `channels` — turns by
channel (`store.core.channel_turns`), `settings` (`store.core.settings`), `api_keys`
(`store.core.api_keys`), `ui_sessions` (`store.core.ui_sessions`), `embedding_models`
(`store.core.embedding_models`) and `directory` — display names (`store.core.directory`).
A caller asks the role: `store.review.approve(…)`, `store.turns.recall_turns(…)`.

Every role inherits `StoreBase` (`store.core.base`: the backend, schema, row conversion,
embeddings, locked reads, audit rows) and no other role; all of them hold the same backend. What
one role needs of another is a function of the other's module taking a role (the turns the event
write stores, erasure and retention remove and the export lists: `store.core.turns`; the effective
settings: `store.core.settings.effective_settings`). The store keeps what is its own: memory
recall (its arguments are checked here; the backend ranks the memories,
`Backend.recall_memories`), a hint's facts, the schema check and the connections' lifecycle. A
backend's store is `CoreStore` holding its backend: three classes in its MRO with `object`.

Decisions come from pure modules (`store.rules.policy`); the roles only read rows, ask the policy and
run the plan inside one transaction. Rows are locked (`FOR UPDATE` on Postgres; SQLite serialises
writers itself) before deciding, so concurrent writers cannot both act on a stale read.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from store.core.api_keys import ApiKeys
from store.core.backend import Backend
from store.core.base import StoreBase, replica_read
from store.core.channel_turns import ChannelConversations
from store.core.directory import DirectoryNames
from store.core.embedding_models import EmbeddingModels
from store.core.erasure import MemoryErasure
from store.core.forgetting import RejectAndForget
from store.core.listing import MemoryListing
from store.core.pinning import MAX_PINNED, PinnedFacts
from store.core.regate import StoredTextGate
from store.core.review import MemoryReview
from store.core.schema import Schema
from store.core.settings import SettingsRows
from store.core.turns import ConversationTurns
from store.core.ui_sessions import UiSessions
from store.core.writes import MemoryWrites
from store.model import ContextFacts, Memory, MemorySettings, RecallHit, RecallQuery, Retriever
from store.protocols import Embedder
from store.rules.hint import listing_weight, may_list_standing

Role = TypeVar("Role", bound=StoreBase)


class CoreStore:
    """Everything the Postgres and SQLite stores share, as the role objects it holds; each backend
    ranks recalled memories its own way."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        schema: Schema,
        backend: Backend,
        embedder: Embedder,
        settings_defaults: MemorySettings | None = None,
    ) -> None:
        self._engine = engine
        self._schema = schema
        self._backend = backend
        self._embedder = embedder

        def role(cls: type[Role]) -> Role:
            return cls(
                engine=engine,
                schema=schema,
                backend=backend,
                embedder=embedder,
                settings_defaults=settings_defaults,
            )

        self.writes = role(MemoryWrites)
        self.review = role(MemoryReview)
        self.pinning = role(PinnedFacts)
        self.listing = role(MemoryListing)
        self.erasure = role(MemoryErasure)
        self.forgetting = role(RejectAndForget)
        self.gate = role(StoredTextGate)
        self.turns = role(ConversationTurns)
        self.channels = role(ChannelConversations)
        self.settings = role(SettingsRows)
        self.api_keys = role(ApiKeys)
        self.ui_sessions = role(UiSessions)
        self.embedding_models = role(EmbeddingModels)
        self.directory = role(DirectoryNames)

    @property
    def embedder(self) -> Embedder:
        """The embedder this store embeds values and queries with."""
        return self._embedder

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy async engine (for tests and tools that need raw access)."""
        return self._engine

    @property
    def backend(self) -> Backend:
        """The database-specific part this store hands its connections, recall and writes to."""
        return self._backend

    @replica_read
    async def recall(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int = 20,
        *,
        retriever: Retriever = "hybrid",
        query_embedding: Sequence[float] | None = None,
        team_id: uuid.UUID | None = None,
    ) -> list[RecallHit]:
        """Active memories of the user (and persona) in the team context (`team_id`: rows of no team
        and of that team), hybrid-ranked; empty query → top by confidence. An unknown `retriever`
        raises ValueError."""
        asked = RecallQuery(
            user_id=user_id,
            persona_id=persona_id,
            team_id=team_id,
            text=query,
            limit=limit,
            retriever=retriever,
            query_embedding=query_embedding,
        )
        if limit <= 0:
            return []
        return await self._backend.recall_memories(asked)

    @replica_read
    async def _facts_in_one(
        self, asked: RecallQuery, *, standing: int, pinned: bool, standing_budget: int | None
    ) -> ContextFacts | None:
        return await self._backend.context_facts(
            asked, standing=standing, pinned=MAX_PINNED if pinned else 0, standing_budget=standing_budget
        )

    async def context_facts(
        self, asked: RecallQuery, *, standing: int, pinned: bool, standing_budget: int | None = None
    ) -> ContextFacts:
        """A hint's facts of the context (`ContextFacts`): the `asked.limit` most relevant to its
        text, all of them by standing when they are fewer than `standing` and their listing weights
        sum to at most `standing_budget` (`store.rules.hint.may_list_standing`; else, and for
        `standing` 0, None) and, with `pinned`, the pinned ones; three reads side by side, then
        their open proposed changes — or the backend's one statement where it has one (Postgres)."""
        in_one = await self._facts_in_one(
            asked, standing=standing, pinned=pinned, standing_budget=standing_budget
        )
        if in_one is not None:
            return in_one

        async def relevant() -> list[RecallHit]:
            return await self.recall(
                asked.user_id,
                asked.persona_id,
                asked.text,
                asked.limit,
                retriever=asked.retriever,
                query_embedding=asked.query_embedding,
                team_id=asked.team_id,
            )

        async def first() -> list[RecallHit] | None:
            if standing <= 0:
                return None
            hits = await self.recall(asked.user_id, asked.persona_id, "", standing, team_id=asked.team_id)
            weights = (listing_weight(hit.memory.key, hit.memory.value) for hit in hits)
            return hits if len(hits) < standing and may_list_standing(weights, standing_budget) else None

        async def pinned_ones() -> list[Memory]:
            if not pinned:
                return []
            return await self.pinning.pinned_facts(asked.user_id, asked.persona_id, team_id=asked.team_id)

        found, standing_found, pinned_found = await asyncio.gather(relevant(), first(), pinned_ones())
        ids = {hit.memory.id for hit in [*found, *(standing_found or ())]} | {m.id for m in pinned_found}
        return ContextFacts(
            relevant=found,
            standing=standing_found,
            pinned=pinned_found,
            pending=await self.review.pending_changes(ids) if ids else {},
        )

    async def check_schema(self) -> None:
        """Raise `store.migrate.SchemaError` unless the database is migrated to this version and
        embedding dimension (SQLite creates its tables); refuse another embedding model than the
        stored vectors were made with."""
        await self._backend.check_schema()
        await self.embedding_models.check_embedding_identity()

    async def ping(self) -> None:
        """Raise if the database is unreachable."""
        async with self._backend.reading() as conn:
            await conn.execute(select(1))

    async def close(self) -> None:
        """Close every pooled connection."""
        await self._backend.close()
