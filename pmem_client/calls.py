"""Every endpoint of the API as one pure function: the client method's arguments in, a `Call` out —
the request (method, path, query, body) and how its decoded answer becomes the method's value. The
sync and async clients send the same calls (`pmem_client.client`), so the two cannot drift apart;
each function's name, parameters and docstring are the client method's."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from pmem_client.models import (
    BulkAnswer,
    ConversationPage,
    DirectoryKind,
    DirectoryName,
    Export,
    Memory,
    MemoryDetail,
    MemoryPage,
    RecallAnswer,
    RecallInclude,
    RecallRequest,
    RejectedMemory,
    ReviewPage,
    Scope,
    Settings,
    SettingsLevel,
    SettingsValues,
    Status,
)

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
IdLike = str | uuid.UUID
T = TypeVar("T")

BOTH: tuple[RecallInclude, ...] = ("memories", "turns")


def whole(answer: Any) -> Any:
    """The decoded answer as it is (its type is the call's: the API's schema, `pmem_client.models`)."""
    return answer


def one_field(name: str) -> Callable[[Any], Any]:
    """A reader of one field of the decoded answer (`{"erased": 3}` -> 3)."""

    def read(answer: Any) -> Any:
        return answer[name]

    return read


@dataclass(frozen=True, kw_only=True, slots=True)
class Call(Generic[T]):
    """One HTTP request (method, path with the ids in it, query parameters, JSON body) and `read`,
    which makes the decoded JSON answer (None for 204) the method's value."""

    method: Method
    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    read: Callable[[Any], T] = whole


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


# -- the platform (a service key) ----------------------------------------------------------------


def recall(
    user_id: IdLike,
    *,
    persona_id: IdLike | None = None,
    team_id: IdLike | None = None,
    query: str = "",
    limit: int = 20,
    turn_limit: int = 5,
    include: Sequence[RecallInclude] = BOTH,
) -> Call[RecallAnswer]:
    """The `limit` memories most relevant to `query` for the user (and persona) in the team's
    context, then at most `turn_limit` earlier turns that add something new (`POST /v1/recall`)."""
    body = recall_body(
        user_id=user_id,
        persona_id=persona_id,
        team_id=team_id,
        query=query,
        limit=limit,
        turn_limit=turn_limit,
        include=include,
    )
    return Call(method="POST", path="/v1/recall", body=body)


def hint(
    user_id: IdLike,
    *,
    persona_id: IdLike | None = None,
    team_id: IdLike | None = None,
    query: str = "",
    limit: int = 20,
    turn_limit: int = 5,
    include: Sequence[RecallInclude] = BOTH,
    max_tokens: int | None = None,
) -> Call[str]:
    """The prompt hint for the user's next message `query` within `max_tokens` (None: the
    server's PMEM_HINT_MAX_TOKENS); empty when nothing is remembered (`POST /v1/hint`)."""
    body = recall_body(
        user_id=user_id,
        persona_id=persona_id,
        team_id=team_id,
        query=query,
        limit=limit,
        turn_limit=turn_limit,
        include=include,
        max_tokens=max_tokens,
    )
    return Call(method="POST", path="/v1/hint", body=body, read=one_field("hint"))


def erase_user(user_id: IdLike) -> Call[int]:
    """Erase everything about a user; how many items were erased (`DELETE /v1/users/{id}/memories`)."""
    return Call(method="DELETE", path=f"/v1/users/{_id(user_id)}/memories", read=one_field("erased"))


# -- tools ---------------------------------------------------------------------------------------


def tools() -> Call[list[dict[str, Any]]]:
    """The memory tools' OpenAI function schemas (`GET /v1/tools`)."""
    return Call(method="GET", path="/v1/tools", read=one_field("tools"))


def call_tool(
    name: str,
    arguments: Mapping[str, Any] | str | None = None,
    *,
    user_id: IdLike | None = None,
    persona_id: IdLike | None = None,
    team_id: IdLike | None = None,
) -> Call[dict[str, Any]]:
    """Run a model's tool call in the user's context; its result. `arguments`: an object, or the
    JSON string a chat completion returned. A tool's own error (bad arguments) is a MemoryApiError
    with status 422 whose message goes back to the model (`POST /v1/tools/call`)."""
    body = {
        "name": name,
        "arguments": dict(arguments) if isinstance(arguments, Mapping) else arguments,
        "user_id": _opt_id(user_id),
        "persona_id": _opt_id(persona_id),
        "team_id": _opt_id(team_id),
    }
    return Call(method="POST", path="/v1/tools/call", body=body, read=one_field("result"))


# -- review (admins, team admins) ----------------------------------------------------------------


def review_queue(
    *,
    team_id: IdLike | None = None,
    scope: Scope | None = None,
    persona_id: IdLike | None = None,
    user_id: IdLike | None = None,
    min_confidence: float | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Call[ReviewPage]:
    """Pending memories and proposed changes the caller may review, newest first (`GET /v1/review`)."""
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


def approve(item_id: IdLike) -> Call[Memory]:
    """Approve a pending memory or apply a proposed change (`POST /v1/review/{id}/approve`)."""
    return Call(method="POST", path=f"/v1/review/{_id(item_id)}/approve")


def reject(item_id: IdLike, *, forget: bool = False) -> Call[RejectedMemory]:
    """Reject a pending memory or discard a proposed change (`forget`: erase what was said too)
    (`POST /v1/review/{id}/reject`)."""
    return Call(method="POST", path=f"/v1/review/{_id(item_id)}/reject", body={"forget": forget})


def edit(item_id: IdLike, value: str) -> Call[Memory]:
    """Edit and approve (`POST /v1/review/{id}/edit`)."""
    return Call(method="POST", path=f"/v1/review/{_id(item_id)}/edit", body={"value": value})


def bulk(
    action: Literal["approve", "reject"], ids: Sequence[IdLike], *, forget: bool = False
) -> Call[BulkAnswer]:
    """Approve or reject many items (`forget`, with reject: erase the turns each one's evidence
    cites too); each id's outcome (`POST /v1/review/bulk`)."""
    body = {"action": action, "ids": [_id(i) for i in ids], "forget": forget}
    return Call(method="POST", path="/v1/review/bulk", body=body)


def set_pinned(memory_id: IdLike, pinned: bool) -> Call[Memory]:
    """Pin a memory (while active, it is in every hint of its user) or unpin it
    (`PUT /v1/memories/{id}/pinned`)."""
    return Call(method="PUT", path=f"/v1/memories/{_id(memory_id)}/pinned", body={"pinned": pinned})


def memory(memory_id: IdLike) -> Call[MemoryDetail]:
    """One memory with its open proposal and audit history (`GET /v1/memories/{id}`)."""
    return Call(method="GET", path=f"/v1/memories/{_id(memory_id)}")


# -- the signed-in person (a person's JWT) -------------------------------------------------------


def my_memories(
    *,
    scope: Literal["user", "persona_user"] | None = None,
    persona_id: IdLike | None = None,
    status: Status | None = None,
    team_id: IdLike | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Call[MemoryPage]:
    """Own memories, every status (`GET /v1/me/memories`)."""
    params = _query(
        scope=scope,
        persona_id=_opt_id(persona_id),
        status=status,
        team_id=_opt_id(team_id),
        limit=limit,
        cursor=cursor,
    )
    return Call(method="GET", path="/v1/me/memories", params=params)


def _patch_my_memory(memory_id: IdLike, **changes: object) -> Call[Memory]:
    """`PATCH /v1/me/memories/{id}` with the changes given (a new value, pinned or not)."""
    return Call(method="PATCH", path=f"/v1/me/memories/{_id(memory_id)}", body=changes)


def edit_my_memory(memory_id: IdLike, value: str) -> Call[Memory]:
    """Edit an own memory (it becomes active) (`PATCH /v1/me/memories/{id}`)."""
    return _patch_my_memory(memory_id, value=value)


def pin_my_memory(memory_id: IdLike, pinned: bool) -> Call[Memory]:
    """Pin an own memory (while active, it is in every hint) or unpin it
    (`PATCH /v1/me/memories/{id}`)."""
    return _patch_my_memory(memory_id, pinned=pinned)


def reject_my_memory(memory_id: IdLike, *, forget: bool = False) -> Call[RejectedMemory]:
    """Reject an own memory (`forget`: erase the turns its evidence cites too)
    (`POST /v1/me/memories/{id}/reject`)."""
    return Call(method="POST", path=f"/v1/me/memories/{_id(memory_id)}/reject", body={"forget": forget})


def erase_my_memory(memory_id: IdLike) -> Call[None]:
    """Erase one own memory (`DELETE /v1/me/memories/{id}`, answers 204)."""
    return Call(method="DELETE", path=f"/v1/me/memories/{_id(memory_id)}")


def erase_all_my_memories() -> Call[int]:
    """Erase everything remembered about the caller; how many items (`DELETE /v1/me/memories`)."""
    return Call(method="DELETE", path="/v1/me/memories", read=one_field("erased"))


def my_conversations(
    *,
    persona_id: IdLike | None = None,
    team_id: IdLike | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Call[ConversationPage]:
    """Own remembered conversations, latest first (`GET /v1/me/conversations`)."""
    params = _query(persona_id=_opt_id(persona_id), team_id=_opt_id(team_id), limit=limit, cursor=cursor)
    return Call(method="GET", path="/v1/me/conversations", params=params)


def erase_my_conversation(channel_id: IdLike) -> Call[int]:
    """Erase the caller's remembered turns of one conversation; how many
    (`DELETE /v1/me/conversations/{channel_id}`)."""
    return Call(method="DELETE", path=f"/v1/me/conversations/{_id(channel_id)}", read=one_field("erased"))


def erase_all_my_conversations() -> Call[int]:
    """Erase every remembered conversation of the caller; how many turns
    (`DELETE /v1/me/conversations`)."""
    return Call(method="DELETE", path="/v1/me/conversations", read=one_field("erased"))


def export_my_data() -> Call[Export]:
    """Everything about the caller (`GET /v1/me/export`)."""
    return Call(method="GET", path="/v1/me/export")


# -- settings and directory ----------------------------------------------------------------------


def _settings_path(level: SettingsLevel, target_id: IdLike | None) -> str:
    """The settings path of a level; ValueError when a team or persona level has no target."""
    if level == "global":
        if target_id is not None:
            raise ValueError("global settings have no target id")
        return "/v1/settings/global"
    if target_id is None:
        raise ValueError(f"{level} settings need the {level}'s id")
    return f"/v1/settings/{level}s/{_id(target_id)}"


def settings(level: SettingsLevel, target_id: IdLike | None = None) -> Call[Settings]:
    """A level's settings (global: no target; team or persona: its id)
    (`GET /v1/settings/global|teams/{id}|personas/{id}`)."""
    return Call(method="GET", path=_settings_path(level, target_id))


def put_settings(
    level: SettingsLevel, values: SettingsValues, target_id: IdLike | None = None
) -> Call[Settings]:
    """Replace a level's settings (a value left out inherits); the level as it is now
    (`PUT /v1/settings/…`)."""
    return Call(method="PUT", path=_settings_path(level, target_id), body=dict(values))


def set_name(kind: DirectoryKind, item_id: IdLike, name: str) -> Call[DirectoryName]:
    """Set the display name of a team, persona or user (`PUT /v1/directory/{kind}/{id}`)."""
    return Call(
        method="PUT", path=f"/v1/directory/{quote(kind, safe='')}/{_id(item_id)}", body={"name": name}
    )
