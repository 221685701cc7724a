"""The part of the store both backends share, in SQLAlchemy Core, assembled from one module per
role: writes (`store.writes`), review (`store.review`), listing (`store.listing`), erasure and
retention (`store.erasure`), settings (`store.memory_settings`), API keys (`store.api_keys`),
web-UI sessions (`store.ui_sessions`), chat history (`store.history`) and conversation turns
(`store.turns`, through the writes; by channel, `store.channel_turns`). Recall lives in each backend.

Decisions come from pure modules (`store.policy`); these modules only read rows, ask the policy and
run the plan inside one transaction. Rows are locked (`FOR UPDATE` on Postgres; SQLite serialises
writers itself) before deciding, so concurrent writers cannot both act on a stale read.
"""

from __future__ import annotations

from store.api_keys import ApiKeys
from store.channel_turns import ChannelConversations
from store.directory import DirectoryNames
from store.embedding_models import EmbeddingModels
from store.erasure import MemoryErasure
from store.history import ChatHistory
from store.listing import MemoryListing
from store.memory_settings import SettingsRows
from store.review import MemoryReview
from store.ui_sessions import UiSessions
from store.writes import MemoryWrites


class CoreStore(
    MemoryWrites,
    MemoryReview,
    MemoryListing,
    MemoryErasure,
    ChannelConversations,
    SettingsRows,
    ApiKeys,
    UiSessions,
    ChatHistory,
    EmbeddingModels,
    DirectoryNames,
):
    """Everything but recall, shared by the Postgres and SQLite stores."""
