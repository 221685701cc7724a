"""The JSON answers of the HTTP API as pydantic models, for the OpenAPI document only: the routes
write their answers with the store's JSON writers (store.services.json_shapes, api.schemas), and
`ROUTE_ANSWERS` names the model each operation's 200 (or 204) answer follows, so clients generated
from the document type every answer. The client tests check real answers against these schemas."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from store.model import AuditAction, Scope, SettingsLevel, Status

Id = str  # a UUID as JSON


class _Answer(BaseModel):
    """An answer object: every field present (null when unknown), nothing else."""

    model_config = ConfigDict(extra="forbid")


class MemoryOut(_Answer):
    """A memory (its embedding is never shown)."""

    id: Id
    scope: Scope
    owner_id: Id
    user_id: Id | None
    team_id: Id | None
    key: str
    value: str
    confidence: float
    status: Status
    source_channel_id: Id | None
    created_at: str
    updated_at: str
    evidence: str | None
    observed_at: str | None
    pinned: bool


class RevisionOut(_Answer):
    """A proposed change to an active memory."""

    id: Id
    memory_id: Id
    old_value: str
    new_value: str
    confidence: float
    status: Literal["pending", "approved", "rejected"]
    source_event_id: Id | None
    created_at: str
    evidence: str | None
    observed_at: str | None


class TurnOut(_Answer):
    """A remembered conversation turn."""

    id: Id
    channel_id: Id
    event_id: Id
    user_id: Id
    persona_id: Id | None
    team_id: Id | None
    role: Literal["user", "assistant"]
    speaker: str | None
    text: str
    at: str
    position: int


class PendingChangeOut(_Answer):
    """A change to a memory awaiting review, as recall shows it."""

    id: Id
    new_value: str
    created_at: str


class RecalledMemory(MemoryOut):
    """A memory in the recall list, with its score, the recall branches that found it and its
    change awaiting review (null without one)."""

    kind: Literal["memory"]
    score: float
    sources: list[str]
    pending_change: PendingChangeOut | None


class RecalledTurn(TurnOut):
    """An earlier conversation's turn in the recall list, with its score."""

    kind: Literal["turn"]
    score: float


class RecallAnswer(_Answer):
    """`POST /v1/recall`: one list, the memories by relevance (at most `limit`), then the turns
    that add something new (at most `turn_limit`)."""

    items: list[RecalledMemory | RecalledTurn]


class HintAnswer(_Answer):
    """`POST /v1/hint`: the prompt hint (empty when nothing is remembered)."""

    hint: str


class ErasedAnswer(_Answer):
    """How many items an erasure removed."""

    erased: int


class MemoryPage(_Answer):
    """A page of memories."""

    items: list[MemoryOut]
    next_cursor: str | None


class RejectedMemory(MemoryOut):
    """A rejected memory; having forgotten what was said, how many turns were erased."""

    forgotten_turns: int | None = None


class ConversationOut(_Answer):
    """One remembered conversation (a channel's turns of the caller)."""

    channel_id: Id
    persona_ids: list[Id | None]
    team_ids: list[Id | None]
    started_at: str
    last_at: str
    first_line: str
    turn_count: int
    conversation_count: int


class ConversationPage(_Answer):
    """A page of remembered conversations."""

    items: list[ConversationOut]
    next_cursor: str | None


class AuditOut(_Answer):
    """One row of a memory's audit trail."""

    id: int
    memory_id: Id | None
    action: AuditAction
    scope: Scope | None
    key: str | None
    old_value: str | None
    new_value: str | None
    actor: str
    event_id: Id | None
    revision_id: Id | None
    at: str


class ExportAnswer(_Answer):
    """`GET /v1/me/export`: everything about the caller."""

    memories: list[MemoryOut]
    revisions: list[RevisionOut]
    audit: list[AuditOut]
    turns: list[TurnOut]


class ReviewItemOut(_Answer):
    """A pending memory (`kind` memory: `value`) or a proposed change (`kind` revision: `old_value`
    and `new_value`)."""

    id: Id
    kind: Literal["memory", "revision"]
    memory_id: Id
    scope: Scope
    owner_id: Id
    user_id: Id | None
    team_id: Id | None
    key: str
    confidence: float
    source_channel_id: Id | None
    created_at: str
    evidence: str | None
    observed_at: str | None
    pinned: bool
    value: str | None = None
    old_value: str | None = None
    new_value: str | None = None


class ReviewPage(_Answer):
    """A page of the review queue."""

    items: list[ReviewItemOut]
    next_cursor: str | None


class BulkOutcome(_Answer):
    """One id's outcome in a bulk decision."""

    id: Id
    status: Literal["done", "not_found", "nothing_pending"]


class BulkAnswer(_Answer):
    """`POST /v1/review/bulk`: each id's outcome."""

    results: list[BulkOutcome]


class MemoryDetailAnswer(MemoryOut):
    """A memory with its open proposal and audit history."""

    pending_revision: RevisionOut | None
    history: list[AuditOut]


class SettingsValues(_Answer):
    """One level's settings (own values: null inherits)."""

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


class SettingsAnswer(_Answer):
    """A level's own values, the effective values there and where each comes from."""

    level: SettingsLevel
    target_id: Id | None
    own: SettingsValues
    effective: SettingsValues
    inherited_from: dict[str, str]


class ToolsAnswer(_Answer):
    """`GET /v1/tools`: OpenAI function-tool schemas."""

    tools: list[dict[str, Any]]


class ToolCallAnswer(_Answer):
    """`POST /v1/tools/call`: the tool's result, to hand back to the model."""

    result: dict[str, Any]


class DirectoryAnswer(_Answer):
    """`PUT /v1/directory/{kind}/{id}`: the name as stored."""

    kind: Literal["teams", "personas", "users"]
    id: Id
    name: str = Field(min_length=1)


NO_CONTENT = None  # an operation answering 204 without a body

ROUTE_ANSWERS: dict[tuple[str, str], type[BaseModel] | None] = {
    ("POST", "/v1/recall"): RecallAnswer,
    ("POST", "/v1/hint"): HintAnswer,
    ("DELETE", "/v1/users/{user_id}/memories"): ErasedAnswer,
    ("GET", "/v1/me/memories"): MemoryPage,
    ("DELETE", "/v1/me/memories"): ErasedAnswer,
    ("PATCH", "/v1/me/memories/{memory_id}"): MemoryOut,
    ("DELETE", "/v1/me/memories/{memory_id}"): NO_CONTENT,
    ("POST", "/v1/me/memories/{memory_id}/reject"): RejectedMemory,
    ("GET", "/v1/me/conversations"): ConversationPage,
    ("DELETE", "/v1/me/conversations"): ErasedAnswer,
    ("DELETE", "/v1/me/conversations/{channel_id}"): ErasedAnswer,
    ("GET", "/v1/me/export"): ExportAnswer,
    ("GET", "/v1/review"): ReviewPage,
    ("POST", "/v1/review/bulk"): BulkAnswer,
    ("POST", "/v1/review/{item_id}/approve"): MemoryOut,
    ("POST", "/v1/review/{item_id}/reject"): RejectedMemory,
    ("POST", "/v1/review/{item_id}/edit"): MemoryOut,
    ("GET", "/v1/memories/{memory_id}"): MemoryDetailAnswer,
    ("PUT", "/v1/memories/{memory_id}/pinned"): MemoryOut,
    ("GET", "/v1/settings/global"): SettingsAnswer,
    ("PUT", "/v1/settings/global"): SettingsAnswer,
    ("GET", "/v1/settings/teams/{team_id}"): SettingsAnswer,
    ("PUT", "/v1/settings/teams/{team_id}"): SettingsAnswer,
    ("GET", "/v1/settings/personas/{persona_id}"): SettingsAnswer,
    ("PUT", "/v1/settings/personas/{persona_id}"): SettingsAnswer,
    ("GET", "/v1/tools"): ToolsAnswer,
    ("POST", "/v1/tools/call"): ToolCallAnswer,
    ("PUT", "/v1/directory/{kind}/{item_id}"): DirectoryAnswer,
}


def with_answer_schemas(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document with each operation in `ROUTE_ANSWERS` answering its model's schema (the
    models land in `components.schemas`)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for (method, path), model in ROUTE_ANSWERS.items():
        operation = schema["paths"].get(path, {}).get(method.lower())
        if operation is None:
            continue
        responses = operation.setdefault("responses", {})
        if model is None:
            continue
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in model_schema.pop("$defs", {}).items():
            components[name] = definition
        components[model.__name__] = model_schema
        ok = responses.setdefault("200", {"description": "Successful Response"})
        ok["content"] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}
    return schema
