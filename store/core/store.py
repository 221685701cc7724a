"""The part of the store both backends share, in SQLAlchemy Core, assembled from one module per
role: writes (`store.core.writes`), review (`store.core.review`), listing (`store.core.listing`),
erasure and retention (`store.core.erasure`), rejecting and forgetting what was said
(`store.core.forgetting`), settings (`store.core.settings`), API keys
(`store.core.api_keys`), web-UI sessions (`store.core.ui_sessions`), embedding models
(`store.core.embedding_models`), display names (`store.core.directory`), pinned facts
(`store.core.pinning`) and conversation turns (`store.core.turns`; by channel,
`store.core.channel_turns`). Memory recall's arguments are checked
here; the store's backend ranks the memories (`Backend.recall_memories`).

Each part inherits `StoreBase` (`store.core.base`) and no other part, and `CoreStore` lists them all
as its bases: a backend's store, `CoreStore`, a part, `StoreBase`. What one part needs of another
is a function of the other's module taking the store (the turns the event write stores, erasure and
retention remove and the export lists: `store.core.turns`; the effective settings:
`store.core.settings.effective_settings`).

Decisions come from pure modules (`store.rules.policy`); these modules only read rows, ask the policy and
run the plan inside one transaction. Rows are locked (`FOR UPDATE` on Postgres; SQLite serialises
writers itself) before deciding, so concurrent writers cannot both act on a stale read.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

from store.core.api_keys import ApiKeys
from store.core.base import replica_read
from store.core.channel_turns import ChannelConversations
from store.core.directory import DirectoryNames
from store.core.embedding_models import EmbeddingModels
from store.core.erasure import MemoryErasure
from store.core.forgetting import RejectAndForget
from store.core.listing import MemoryListing
from store.core.pinning import MAX_PINNED, PinnedFacts
from store.core.regate import StoredTextGate
from store.core.review import MemoryReview
from store.core.settings import SettingsRows
from store.core.turns import ConversationTurns
from store.core.ui_sessions import UiSessions
from store.core.writes import MemoryWrites
from store.model import ContextFacts, Memory, RecallHit, RecallQuery, Retriever


class CoreStore(
    RejectAndForget,
    StoredTextGate,
    MemoryWrites,
    MemoryReview,
    PinnedFacts,
    MemoryListing,
    MemoryErasure,
    ChannelConversations,
    ConversationTurns,
    SettingsRows,
    ApiKeys,
    UiSessions,
    EmbeddingModels,
    DirectoryNames,
):
    """Everything the Postgres and SQLite stores share; each ranks recalled memories its own way."""

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
    async def _facts_in_one(self, asked: RecallQuery, *, standing: int, pinned: bool) -> ContextFacts | None:
        return await self._backend.context_facts(asked, standing=standing, pinned=MAX_PINNED if pinned else 0)

    async def context_facts(self, asked: RecallQuery, *, standing: int, pinned: bool) -> ContextFacts:
        """A hint's facts of the context (`ContextFacts`): the `asked.limit` most relevant to its
        text, all of them by standing when they are fewer than `standing` (else, and for 0, None)
        and, with `pinned`, the pinned ones; three reads side by side, then their open proposed
        changes — or the backend's one statement where it has one (Postgres)."""
        in_one = await self._facts_in_one(asked, standing=standing, pinned=pinned)
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
            return hits if len(hits) < standing else None

        async def pinned_ones() -> list[Memory]:
            if not pinned:
                return []
            return await self.pinned_facts(asked.user_id, asked.persona_id, team_id=asked.team_id)

        found, standing_found, pinned_found = await asyncio.gather(relevant(), first(), pinned_ones())
        ids = {hit.memory.id for hit in [*found, *(standing_found or ())]} | {m.id for m in pinned_found}
        return ContextFacts(
            relevant=found,
            standing=standing_found,
            pinned=pinned_found,
            pending=await self.pending_changes(ids) if ids else {},
        )

    async def check_schema(self) -> None:
        """Raise `store.migrate.SchemaError` unless the database is migrated to this version and
        embedding dimension (SQLite creates its tables); refuse another embedding model than the
        stored vectors were made with."""
        await self._backend.check_schema()
        await self.check_embedding_identity()
