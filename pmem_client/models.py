"""The API's requests and answers as typed dictionaries: exactly the JSON the server sends (ids are
UUID strings, times ISO 8601 strings), so nothing is converted on the way."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Scope = Literal["user", "persona", "persona_user"]
Status = Literal["active", "pending_review", "archived"]
SettingsLevel = Literal["global", "team", "persona"]
DirectoryKind = Literal["teams", "personas", "users"]
RecallInclude = Literal["memories", "turns"]
AuditAction = Literal["add", "update", "propose", "approve", "reject", "edit", "archive", "delete", "erase"]


class Memory(TypedDict):
    """A memory (its embedding is never shown)."""

    id: str
    scope: Scope
    owner_id: str
    user_id: str | None
    team_id: str | None
    key: str
    value: str
    confidence: float
    status: Status
    source_channel_id: str | None
    created_at: str
    updated_at: str
    evidence: str | None
    observed_at: str | None
    pinned: bool


class Revision(TypedDict):
    """A proposed change to an active memory."""

    id: str
    memory_id: str
    old_value: str
    new_value: str
    confidence: float
    status: Literal["pending", "approved", "rejected"]
    source_event_id: str | None
    created_at: str
    evidence: str | None
    observed_at: str | None


class Turn(TypedDict):
    """A remembered conversation turn."""

    id: str
    channel_id: str
    event_id: str
    user_id: str
    persona_id: str | None
    team_id: str | None
    role: Literal["user", "assistant"]
    speaker: str | None
    text: str
    at: str
    position: int


class PendingChange(TypedDict):
    """A change to a memory awaiting review, as recall shows it."""

    id: str
    new_value: str
    created_at: str


class RecalledMemory(Memory):
    """A memory in the recall list, with its score, the recall branches that found it and its
    change awaiting review (None without one)."""

    kind: Literal["memory"]
    score: float
    sources: list[str]
    pending_change: PendingChange | None


class RecalledTurn(Turn):
    """An earlier conversation's turn in the recall list, with its score."""

    kind: Literal["turn"]
    score: float


class RecallAnswer(TypedDict):
    """`POST /v1/recall`: the memories by relevance (at most `limit`), then the turns that add
    something new (at most `turn_limit`); `kind` tells a memory from a turn."""

    items: list[RecalledMemory | RecalledTurn]


class HintAnswer(TypedDict):
    """`POST /v1/hint`: the prompt hint (empty when nothing is remembered)."""

    hint: str


class RecallRequest(TypedDict):
    """The body of `POST /v1/recall` and `POST /v1/hint`."""

    user_id: str
    persona_id: str | None
    team_id: str | None
    query: str
    limit: int
    turn_limit: int
    include: list[RecallInclude]
    max_tokens: NotRequired[int]


class ErasedAnswer(TypedDict):
    """How many items an erasure removed."""

    erased: int


class MemoryPage(TypedDict):
    """A page of memories; `next_cursor` asks for the next one."""

    items: list[Memory]
    next_cursor: str | None


class RejectedMemory(Memory):
    """A rejected memory; with `forget`, how many conversation turns were erased."""

    forgotten_turns: NotRequired[int]


class Conversation(TypedDict):
    """One remembered conversation (a channel's turns of the caller)."""

    channel_id: str
    persona_ids: list[str | None]
    team_ids: list[str | None]
    started_at: str
    last_at: str
    first_line: str
    turn_count: int
    conversation_count: int


class ConversationPage(TypedDict):
    """A page of remembered conversations."""

    items: list[Conversation]
    next_cursor: str | None


class AuditEntry(TypedDict):
    """One row of a memory's audit trail."""

    id: int
    memory_id: str | None
    action: AuditAction
    scope: Scope | None
    key: str | None
    old_value: str | None
    new_value: str | None
    actor: str
    event_id: str | None
    revision_id: str | None
    at: str


class Export(TypedDict):
    """`GET /v1/me/export`: everything about the caller."""

    memories: list[Memory]
    revisions: list[Revision]
    audit: list[AuditEntry]
    turns: list[Turn]


class ReviewItem(TypedDict):
    """A pending memory (`kind` memory: `value`) or a proposed change (`kind` revision: `old_value`
    and `new_value`)."""

    id: str
    kind: Literal["memory", "revision"]
    memory_id: str
    scope: Scope
    owner_id: str
    user_id: str | None
    team_id: str | None
    key: str
    confidence: float
    source_channel_id: str | None
    created_at: str
    evidence: str | None
    observed_at: str | None
    pinned: bool
    value: NotRequired[str]
    old_value: NotRequired[str]
    new_value: NotRequired[str]


class ReviewPage(TypedDict):
    """A page of the review queue."""

    items: list[ReviewItem]
    next_cursor: str | None


class BulkOutcome(TypedDict):
    """One id's outcome in a bulk decision."""

    id: str
    status: Literal["done", "not_found", "nothing_pending"]


class BulkAnswer(TypedDict):
    """`POST /v1/review/bulk`: each id's outcome."""

    results: list[BulkOutcome]


class MemoryDetail(Memory):
    """A memory with its open proposal and audit history."""

    pending_revision: Revision | None
    history: list[AuditEntry]


class SettingsValues(TypedDict, total=False):
    """One level's settings; a value left out (or null) inherits from the level above."""

    enabled: bool | None
    persona_learning: bool | None
    extraction_prompt: str | None
    min_confidence: float | None
    pending_days: int | None
    archived_days: int | None
    history: bool | None
    history_days: int | None
    review_tool_saves: bool | None
    known_personas_only: bool | None


class Settings(TypedDict):
    """A level's own values (null inherits), the effective values and where each comes from."""

    level: SettingsLevel
    target_id: str | None
    own: SettingsValues
    effective: SettingsValues
    inherited_from: dict[str, str]


class ToolsAnswer(TypedDict):
    """`GET /v1/tools`: OpenAI function-tool schemas (`tools=[…]` of a chat completion)."""

    tools: list[dict[str, Any]]


class ToolCallAnswer(TypedDict):
    """`POST /v1/tools/call`: the tool's result, to hand back to the model."""

    result: dict[str, Any]


class DirectoryName(TypedDict):
    """`PUT /v1/directory/{kind}/{id}`: the name as stored."""

    kind: DirectoryKind
    id: str
    name: str
