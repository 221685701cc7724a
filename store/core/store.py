"""The part of the store both backends share, in SQLAlchemy Core, assembled from one module per
role: writes (`store.core.writes`), review (`store.core.review`), listing (`store.core.listing`),
erasure and retention (`store.core.erasure`), settings (`store.core.settings`), API keys
(`store.core.api_keys`), web-UI sessions (`store.core.ui_sessions`) and conversation turns
(`store.core.turns`, through the writes; by channel, `store.core.channel_turns`). Recall lives in
each backend.

Decisions come from pure modules (`store.rules.policy`); these modules only read rows, ask the policy and
run the plan inside one transaction. Rows are locked (`FOR UPDATE` on Postgres; SQLite serialises
writers itself) before deciding, so concurrent writers cannot both act on a stale read.
"""

from __future__ import annotations

from store.core.api_keys import ApiKeys
from store.core.channel_turns import ChannelConversations
from store.core.directory import DirectoryNames
from store.core.embedding_models import EmbeddingModels
from store.core.erasure import MemoryErasure
from store.core.listing import MemoryListing
from store.core.review import MemoryReview
from store.core.settings import SettingsRows
from store.core.ui_sessions import UiSessions
from store.core.writes import MemoryWrites


class CoreStore(
    MemoryWrites,
    MemoryReview,
    MemoryListing,
    MemoryErasure,
    ChannelConversations,
    SettingsRows,
    ApiKeys,
    UiSessions,
    EmbeddingModels,
    DirectoryNames,
):
    """Everything but recall, shared by the Postgres and SQLite stores."""
