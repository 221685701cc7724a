"""Every request of the API as a pure value (method, path, query, body): the sync and async clients
send the same calls, so the two cannot drift apart."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from pmem_client.models import (
    DirectoryKind,
    RecallInclude,
    RecallRequest,
    Scope,
    SettingsLevel,
    SettingsValues,
    Status,
)

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
IdLike = str | uuid.UUID


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """One HTTP request: method, path (ids already in it), query parameters, JSON body."""

    method: Method
    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    body: Any = None


def _id(value: IdLike) -> str:
    """An id as the path or body carries it; ValueError for a value that is not a UUID."""
    return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))


def _opt_id(value: IdLike | None) -> str | None:
    return None if value is None else _id(value)


def _query(**values: object) -> dict[str, str]:
    """Query parameters without the unset ones (ids as strings, numbers as text)."""
    return {name: str(value) for name, value in values.items() if value is not None}


def recall_body(
    *,
    user_id: IdLike,
    persona_id: IdLike | None,
    team_id: IdLike | None,
    query: str,
    limit: int,
    turn_limit: int,
    include: Sequence[RecallInclude],
    max_tokens: int | None = None,
) -> RecallRequest:
    """The body of a recall or hint request (`max_tokens`: the hint's budget, None: the server's)."""
    body: RecallRequest = {
        "user_id": _id(user_id),
        "persona_id": _opt_id(persona_id),
        "team_id": _opt_id(team_id),
        "query": query,
        "limit": limit,
        "turn_limit": turn_limit,
        "include": list(include),
    }
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def recall(body: RecallRequest) -> Call:
    """`POST /v1/recall`."""
    return Call(method="POST", path="/v1/recall", body=body)


def hint(body: RecallRequest) -> Call:
    """`POST /v1/hint`."""
    return Call(method="POST", path="/v1/hint", body=body)


def erase_user(user_id: IdLike) -> Call:
    """`DELETE /v1/users/{user_id}/memories`."""
    return Call(method="DELETE", path=f"/v1/users/{_id(user_id)}/memories")


def list_tools() -> Call:
    """`GET /v1/tools`."""
    return Call(method="GET", path="/v1/tools")


def call_tool(
    *,
    name: str,
    arguments: Mapping[str, Any] | str | None,
    user_id: IdLike | None,
    persona_id: IdLike | None,
    team_id: IdLike | None,
) -> Call:
    """`POST /v1/tools/call` (`arguments`: an object, or the JSON string a chat completion returned)."""
    body = {
        "name": name,
        "arguments": dict(arguments) if isinstance(arguments, Mapping) else arguments,
        "user_id": _opt_id(user_id),
        "persona_id": _opt_id(persona_id),
        "team_id": _opt_id(team_id),
    }
    return Call(method="POST", path="/v1/tools/call", body=body)


def review_queue(
    *,
    team_id: IdLike | None,
    scope: Scope | None,
    persona_id: IdLike | None,
    user_id: IdLike | None,
    min_confidence: float | None,
    limit: int,
    cursor: str | None,
) -> Call:
    """`GET /v1/review`."""
    params = _query(
        team_id=_opt_id(team_id),
        scope=scope,
        persona_id=_opt_id(persona_id),
        user_id=_opt_id(user_id),
        min_confidence=min_confidence,
        limit=limit,
        cursor=cursor,
    )
    return Call(method="GET", path="/v1/review", params=params)


def approve(item_id: IdLike) -> Call:
    """`POST /v1/review/{id}/approve`."""
    return Call(method="POST", path=f"/v1/review/{_id(item_id)}/approve")


def reject(item_id: IdLike, *, forget: bool) -> Call:
    """`POST /v1/review/{id}/reject`."""
    return Call(method="POST", path=f"/v1/review/{_id(item_id)}/reject", body={"forget": forget})


def edit(item_id: IdLike, value: str) -> Call:
    """`POST /v1/review/{id}/edit`."""
    return Call(method="POST", path=f"/v1/review/{_id(item_id)}/edit", body={"value": value})


def bulk(action: Literal["approve", "reject"], ids: Sequence[IdLike], *, forget: bool = False) -> Call:
    """`POST /v1/review/bulk`."""
    body = {"action": action, "ids": [_id(i) for i in ids], "forget": forget}
    return Call(method="POST", path="/v1/review/bulk", body=body)


def set_pinned(memory_id: IdLike, pinned: bool) -> Call:
    """`PUT /v1/memories/{id}/pinned`."""
    return Call(method="PUT", path=f"/v1/memories/{_id(memory_id)}/pinned", body={"pinned": pinned})


def memory_detail(memory_id: IdLike) -> Call:
    """`GET /v1/memories/{id}`."""
    return Call(method="GET", path=f"/v1/memories/{_id(memory_id)}")


def my_memories(
    *,
    scope: Literal["user", "persona_user"] | None,
    persona_id: IdLike | None,
    status: Status | None,
    team_id: IdLike | None,
    limit: int,
    cursor: str | None,
) -> Call:
    """`GET /v1/me/memories`."""
    params = _query(
        scope=scope,
        persona_id=_opt_id(persona_id),
        status=status,
        team_id=_opt_id(team_id),
        limit=limit,
        cursor=cursor,
    )
    return Call(method="GET", path="/v1/me/memories", params=params)


def edit_my_memory(memory_id: IdLike, value: str | None, *, pinned: bool | None = None) -> Call:
    """`PATCH /v1/me/memories/{id}`: a new value, pinned or not (None: left as it is)."""
    body = {name: v for name, v in (("value", value), ("pinned", pinned)) if v is not None}
    return Call(method="PATCH", path=f"/v1/me/memories/{_id(memory_id)}", body=body)


def reject_my_memory(memory_id: IdLike, *, forget: bool) -> Call:
    """`POST /v1/me/memories/{id}/reject`."""
    return Call(method="POST", path=f"/v1/me/memories/{_id(memory_id)}/reject", body={"forget": forget})


def erase_my_memory(memory_id: IdLike) -> Call:
    """`DELETE /v1/me/memories/{id}` (answers 204)."""
    return Call(method="DELETE", path=f"/v1/me/memories/{_id(memory_id)}")


def erase_all_my_memories() -> Call:
    """`DELETE /v1/me/memories`."""
    return Call(method="DELETE", path="/v1/me/memories")


def my_conversations(
    *, persona_id: IdLike | None, team_id: IdLike | None, limit: int, cursor: str | None
) -> Call:
    """`GET /v1/me/conversations`."""
    params = _query(persona_id=_opt_id(persona_id), team_id=_opt_id(team_id), limit=limit, cursor=cursor)
    return Call(method="GET", path="/v1/me/conversations", params=params)


def erase_my_conversation(channel_id: IdLike) -> Call:
    """`DELETE /v1/me/conversations/{channel_id}`."""
    return Call(method="DELETE", path=f"/v1/me/conversations/{_id(channel_id)}")


def erase_all_my_conversations() -> Call:
    """`DELETE /v1/me/conversations`."""
    return Call(method="DELETE", path="/v1/me/conversations")


def export_my_data() -> Call:
    """`GET /v1/me/export`."""
    return Call(method="GET", path="/v1/me/export")


def _settings_path(level: SettingsLevel, target_id: IdLike | None) -> str:
    """The settings path of a level; ValueError when a team or persona level has no target."""
    if level == "global":
        if target_id is not None:
            raise ValueError("global settings have no target id")
        return "/v1/settings/global"
    if target_id is None:
        raise ValueError(f"{level} settings need the {level}'s id")
    return f"/v1/settings/{level}s/{_id(target_id)}"


def get_settings(level: SettingsLevel, target_id: IdLike | None) -> Call:
    """`GET /v1/settings/global|teams/{id}|personas/{id}`."""
    return Call(method="GET", path=_settings_path(level, target_id))


def put_settings(level: SettingsLevel, target_id: IdLike | None, values: SettingsValues) -> Call:
    """`PUT /v1/settings/…`: replaces the level's row (a value left out inherits)."""
    return Call(method="PUT", path=_settings_path(level, target_id), body=dict(values))


def set_name(kind: DirectoryKind, item_id: IdLike, name: str) -> Call:
    """`PUT /v1/directory/{kind}/{id}`."""
    return Call(
        method="PUT", path=f"/v1/directory/{quote(kind, safe='')}/{_id(item_id)}", body={"name": name}
    )
