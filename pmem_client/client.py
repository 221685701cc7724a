"""`MemoryClient` and `AsyncMemoryClient`: each owns its httpx client (use it as a context manager or
call `close()`), sends the calls of `pmem_client.calls`, and answers typed dictionaries or raises
`MemoryApiError`. A 429 or 503 is retried after its `Retry-After` within the `RetryPolicy`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self, cast

import httpx

from pmem_client import calls
from pmem_client.calls import Call, IdLike
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
    RejectedMemory,
    ReviewPage,
    Scope,
    Settings,
    SettingsLevel,
    SettingsValues,
    Status,
)
from pmem_client.retry import RetryPolicy
from pmem_client.transport import DEFAULT_TIMEOUT_S, decoded, headers, request_kwargs, wait_before_retry

BOTH: tuple[RecallInclude, ...] = ("memories", "turns")


class MemoryClient:
    """The HTTP API, synchronously. `base_url`: where `pmem serve` listens; `credential`: a service
    key (`pmem keys create NAME`) or a person's JWT. `sleep` is how the client waits before a retry."""

    def __init__(
        self,
        base_url: str,
        credential: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers(credential), timeout=timeout_s, transport=transport
        )
        self._retry = retry or RetryPolicy()
        self._sleep = sleep

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def send(self, call: Call) -> Any:
        """Send one call (retrying a 429 or 503 as the policy allows); its decoded JSON."""
        attempt = 1
        while True:
            response = self._http.request(call.method, call.path, **request_kwargs(call))
            wait = wait_before_retry(call, response, attempt, self._retry)
            if wait is None:
                return decoded(call, response)
            self._sleep(wait)
            attempt += 1

    # -- the platform (a service key) ------------------------------------------------------------

    def recall(
        self,
        user_id: IdLike,
        *,
        persona_id: IdLike | None = None,
        team_id: IdLike | None = None,
        query: str = "",
        limit: int = 20,
        turn_limit: int = 5,
        include: Sequence[RecallInclude] = BOTH,
    ) -> RecallAnswer:
        """The `limit` memories most relevant to `query` for the user (and persona) in the team's
        context, then at most `turn_limit` earlier turns that add something new."""
        body = calls.recall_body(
            user_id=user_id,
            persona_id=persona_id,
            team_id=team_id,
            query=query,
            limit=limit,
            turn_limit=turn_limit,
            include=include,
        )
        return cast(RecallAnswer, self.send(calls.recall(body)))

    def hint(
        self,
        user_id: IdLike,
        *,
        persona_id: IdLike | None = None,
        team_id: IdLike | None = None,
        query: str = "",
        limit: int = 20,
        turn_limit: int = 5,
        include: Sequence[RecallInclude] = BOTH,
        max_tokens: int | None = None,
    ) -> str:
        """The prompt hint for the user's next message `query` within `max_tokens` (None: the
        server's PMEM_HINT_MAX_TOKENS); empty when nothing is remembered."""
        body = calls.recall_body(
            user_id=user_id,
            persona_id=persona_id,
            team_id=team_id,
            query=query,
            limit=limit,
            turn_limit=turn_limit,
            include=include,
            max_tokens=max_tokens,
        )
        return cast(str, self.send(calls.hint(body))["hint"])

    def erase_user(self, user_id: IdLike) -> int:
        """Erase everything about a user; how many items were erased."""
        return cast(int, self.send(calls.erase_user(user_id))["erased"])

    # -- tools -----------------------------------------------------------------------------------

    def tools(self) -> list[dict[str, Any]]:
        """The memory tools' OpenAI function schemas."""
        return cast(list[dict[str, Any]], self.send(calls.list_tools())["tools"])

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        user_id: IdLike | None = None,
        persona_id: IdLike | None = None,
        team_id: IdLike | None = None,
    ) -> dict[str, Any]:
        """Run a model's tool call in the user's context; its result. A tool's own error (bad
        arguments) is a MemoryApiError with status 422 whose message goes back to the model."""
        call = calls.call_tool(
            name=name, arguments=arguments, user_id=user_id, persona_id=persona_id, team_id=team_id
        )
        return cast(dict[str, Any], self.send(call)["result"])

    # -- review (admins, team admins) ------------------------------------------------------------

    def review_queue(
        self,
        *,
        team_id: IdLike | None = None,
        scope: Scope | None = None,
        persona_id: IdLike | None = None,
        user_id: IdLike | None = None,
        min_confidence: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ReviewPage:
        """Pending memories and proposed changes the caller may review, newest first."""
        call = calls.review_queue(
            team_id=team_id,
            scope=scope,
            persona_id=persona_id,
            user_id=user_id,
            min_confidence=min_confidence,
            limit=limit,
            cursor=cursor,
        )
        return cast(ReviewPage, self.send(call))

    def approve(self, item_id: IdLike) -> Memory:
        """Approve a pending memory or apply a proposed change."""
        return cast(Memory, self.send(calls.approve(item_id)))

    def reject(self, item_id: IdLike, *, forget: bool = False) -> RejectedMemory:
        """Reject a pending memory or discard a proposed change (`forget`: erase what was said too)."""
        return cast(RejectedMemory, self.send(calls.reject(item_id, forget=forget)))

    def edit(self, item_id: IdLike, value: str) -> Memory:
        """Edit and approve."""
        return cast(Memory, self.send(calls.edit(item_id, value)))

    def bulk(
        self, action: Literal["approve", "reject"], ids: Sequence[IdLike], *, forget: bool = False
    ) -> BulkAnswer:
        """Approve or reject many items (`forget`, with reject: erase the turns each one's evidence
        cites too); each id's outcome."""
        return cast(BulkAnswer, self.send(calls.bulk(action, ids, forget=forget)))

    def set_pinned(self, memory_id: IdLike, pinned: bool) -> Memory:
        """Pin a memory (while active, it is in every hint of its user) or unpin it."""
        return cast(Memory, self.send(calls.set_pinned(memory_id, pinned)))

    def memory(self, memory_id: IdLike) -> MemoryDetail:
        """One memory with its open proposal and audit history."""
        return cast(MemoryDetail, self.send(calls.memory_detail(memory_id)))

    # -- the signed-in person (a person's JWT) ---------------------------------------------------

    def my_memories(
        self,
        *,
        scope: Literal["user", "persona_user"] | None = None,
        persona_id: IdLike | None = None,
        status: Status | None = None,
        team_id: IdLike | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> MemoryPage:
        """Own memories, every status."""
        call = calls.my_memories(
            scope=scope, persona_id=persona_id, status=status, team_id=team_id, limit=limit, cursor=cursor
        )
        return cast(MemoryPage, self.send(call))

    def edit_my_memory(self, memory_id: IdLike, value: str) -> Memory:
        """Edit an own memory (it becomes active)."""
        return cast(Memory, self.send(calls.edit_my_memory(memory_id, value)))

    def pin_my_memory(self, memory_id: IdLike, pinned: bool) -> Memory:
        """Pin an own memory (while active, it is in every hint) or unpin it."""
        return cast(Memory, self.send(calls.edit_my_memory(memory_id, None, pinned=pinned)))

    def reject_my_memory(self, memory_id: IdLike, *, forget: bool = False) -> RejectedMemory:
        """Reject an own memory (`forget`: erase the turns its evidence cites too)."""
        return cast(RejectedMemory, self.send(calls.reject_my_memory(memory_id, forget=forget)))

    def erase_my_memory(self, memory_id: IdLike) -> None:
        """Erase one own memory."""
        self.send(calls.erase_my_memory(memory_id))

    def erase_all_my_memories(self) -> int:
        """Erase everything remembered about the caller; how many items."""
        return cast(int, self.send(calls.erase_all_my_memories())["erased"])

    def my_conversations(
        self,
        *,
        persona_id: IdLike | None = None,
        team_id: IdLike | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ConversationPage:
        """Own remembered conversations, latest first."""
        call = calls.my_conversations(persona_id=persona_id, team_id=team_id, limit=limit, cursor=cursor)
        return cast(ConversationPage, self.send(call))

    def erase_my_conversation(self, channel_id: IdLike) -> int:
        """Erase the caller's remembered turns of one conversation; how many."""
        return cast(int, self.send(calls.erase_my_conversation(channel_id))["erased"])

    def erase_all_my_conversations(self) -> int:
        """Erase every remembered conversation of the caller; how many turns."""
        return cast(int, self.send(calls.erase_all_my_conversations())["erased"])

    def export_my_data(self) -> Export:
        """Everything about the caller."""
        return cast(Export, self.send(calls.export_my_data()))

    # -- settings and directory ------------------------------------------------------------------

    def settings(self, level: SettingsLevel, target_id: IdLike | None = None) -> Settings:
        """A level's settings (global: no target; team or persona: its id)."""
        return cast(Settings, self.send(calls.get_settings(level, target_id)))

    def put_settings(
        self, level: SettingsLevel, values: SettingsValues, target_id: IdLike | None = None
    ) -> Settings:
        """Replace a level's settings (a value left out inherits); the level as it is now."""
        return cast(Settings, self.send(calls.put_settings(level, target_id, values)))

    def set_name(self, kind: DirectoryKind, item_id: IdLike, name: str) -> DirectoryName:
        """Set the display name of a team, persona or user."""
        return cast(DirectoryName, self.send(calls.set_name(kind, item_id, name)))


class AsyncMemoryClient:
    """The HTTP API for asyncio: the same methods as `MemoryClient`, awaited."""

    def __init__(
        self,
        base_url: str,
        credential: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=headers(credential), timeout=timeout_s, transport=transport
        )
        self._retry = retry or RetryPolicy()
        self._sleep = sleep

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def send(self, call: Call) -> Any:
        """Send one call (retrying a 429 or 503 as the policy allows); its decoded JSON."""
        attempt = 1
        while True:
            response = await self._http.request(call.method, call.path, **request_kwargs(call))
            wait = wait_before_retry(call, response, attempt, self._retry)
            if wait is None:
                return decoded(call, response)
            await self._sleep(wait)
            attempt += 1

    async def recall(
        self,
        user_id: IdLike,
        *,
        persona_id: IdLike | None = None,
        team_id: IdLike | None = None,
        query: str = "",
        limit: int = 20,
        turn_limit: int = 5,
        include: Sequence[RecallInclude] = BOTH,
    ) -> RecallAnswer:
        """The `limit` memories most relevant to `query` for the user (and persona) in the team's
        context, then at most `turn_limit` earlier turns that add something new."""
        body = calls.recall_body(
            user_id=user_id,
            persona_id=persona_id,
            team_id=team_id,
            query=query,
            limit=limit,
            turn_limit=turn_limit,
            include=include,
        )
        return cast(RecallAnswer, await self.send(calls.recall(body)))

    async def hint(
        self,
        user_id: IdLike,
        *,
        persona_id: IdLike | None = None,
        team_id: IdLike | None = None,
        query: str = "",
        limit: int = 20,
        turn_limit: int = 5,
        include: Sequence[RecallInclude] = BOTH,
        max_tokens: int | None = None,
    ) -> str:
        """The prompt hint for the user's next message `query` within `max_tokens` (None: the
        server's PMEM_HINT_MAX_TOKENS); empty when nothing is remembered."""
        body = calls.recall_body(
            user_id=user_id,
            persona_id=persona_id,
            team_id=team_id,
            query=query,
            limit=limit,
            turn_limit=turn_limit,
            include=include,
            max_tokens=max_tokens,
        )
        return cast(str, (await self.send(calls.hint(body)))["hint"])

    async def erase_user(self, user_id: IdLike) -> int:
        """Erase everything about a user; how many items were erased."""
        return cast(int, (await self.send(calls.erase_user(user_id)))["erased"])

    async def tools(self) -> list[dict[str, Any]]:
        """The memory tools' OpenAI function schemas."""
        return cast(list[dict[str, Any]], (await self.send(calls.list_tools()))["tools"])

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        user_id: IdLike | None = None,
        persona_id: IdLike | None = None,
        team_id: IdLike | None = None,
    ) -> dict[str, Any]:
        """Run a model's tool call in the user's context; its result (a tool's own error: a
        MemoryApiError with status 422 whose message goes back to the model)."""
        call = calls.call_tool(
            name=name, arguments=arguments, user_id=user_id, persona_id=persona_id, team_id=team_id
        )
        return cast(dict[str, Any], (await self.send(call))["result"])

    async def review_queue(
        self,
        *,
        team_id: IdLike | None = None,
        scope: Scope | None = None,
        persona_id: IdLike | None = None,
        user_id: IdLike | None = None,
        min_confidence: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ReviewPage:
        """Pending memories and proposed changes the caller may review, newest first."""
        call = calls.review_queue(
            team_id=team_id,
            scope=scope,
            persona_id=persona_id,
            user_id=user_id,
            min_confidence=min_confidence,
            limit=limit,
            cursor=cursor,
        )
        return cast(ReviewPage, await self.send(call))

    async def approve(self, item_id: IdLike) -> Memory:
        """Approve a pending memory or apply a proposed change."""
        return cast(Memory, await self.send(calls.approve(item_id)))

    async def reject(self, item_id: IdLike, *, forget: bool = False) -> RejectedMemory:
        """Reject a pending memory or discard a proposed change (`forget`: erase what was said too)."""
        return cast(RejectedMemory, await self.send(calls.reject(item_id, forget=forget)))

    async def edit(self, item_id: IdLike, value: str) -> Memory:
        """Edit and approve."""
        return cast(Memory, await self.send(calls.edit(item_id, value)))

    async def bulk(
        self, action: Literal["approve", "reject"], ids: Sequence[IdLike], *, forget: bool = False
    ) -> BulkAnswer:
        """Approve or reject many items (`forget`, with reject: erase the turns each one's evidence
        cites too); each id's outcome."""
        return cast(BulkAnswer, await self.send(calls.bulk(action, ids, forget=forget)))

    async def set_pinned(self, memory_id: IdLike, pinned: bool) -> Memory:
        """Pin a memory (while active, it is in every hint of its user) or unpin it."""
        return cast(Memory, await self.send(calls.set_pinned(memory_id, pinned)))

    async def memory(self, memory_id: IdLike) -> MemoryDetail:
        """One memory with its open proposal and audit history."""
        return cast(MemoryDetail, await self.send(calls.memory_detail(memory_id)))

    async def my_memories(
        self,
        *,
        scope: Literal["user", "persona_user"] | None = None,
        persona_id: IdLike | None = None,
        status: Status | None = None,
        team_id: IdLike | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> MemoryPage:
        """Own memories, every status."""
        call = calls.my_memories(
            scope=scope, persona_id=persona_id, status=status, team_id=team_id, limit=limit, cursor=cursor
        )
        return cast(MemoryPage, await self.send(call))

    async def edit_my_memory(self, memory_id: IdLike, value: str) -> Memory:
        """Edit an own memory (it becomes active)."""
        return cast(Memory, await self.send(calls.edit_my_memory(memory_id, value)))

    async def pin_my_memory(self, memory_id: IdLike, pinned: bool) -> Memory:
        """Pin an own memory (while active, it is in every hint) or unpin it."""
        return cast(Memory, await self.send(calls.edit_my_memory(memory_id, None, pinned=pinned)))

    async def reject_my_memory(self, memory_id: IdLike, *, forget: bool = False) -> RejectedMemory:
        """Reject an own memory (`forget`: erase the turns its evidence cites too)."""
        return cast(RejectedMemory, await self.send(calls.reject_my_memory(memory_id, forget=forget)))

    async def erase_my_memory(self, memory_id: IdLike) -> None:
        """Erase one own memory."""
        await self.send(calls.erase_my_memory(memory_id))

    async def erase_all_my_memories(self) -> int:
        """Erase everything remembered about the caller; how many items."""
        return cast(int, (await self.send(calls.erase_all_my_memories()))["erased"])

    async def my_conversations(
        self,
        *,
        persona_id: IdLike | None = None,
        team_id: IdLike | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ConversationPage:
        """Own remembered conversations, latest first."""
        call = calls.my_conversations(persona_id=persona_id, team_id=team_id, limit=limit, cursor=cursor)
        return cast(ConversationPage, await self.send(call))

    async def erase_my_conversation(self, channel_id: IdLike) -> int:
        """Erase the caller's remembered turns of one conversation; how many."""
        return cast(int, (await self.send(calls.erase_my_conversation(channel_id)))["erased"])

    async def erase_all_my_conversations(self) -> int:
        """Erase every remembered conversation of the caller; how many turns."""
        return cast(int, (await self.send(calls.erase_all_my_conversations()))["erased"])

    async def export_my_data(self) -> Export:
        """Everything about the caller."""
        return cast(Export, await self.send(calls.export_my_data()))

    async def settings(self, level: SettingsLevel, target_id: IdLike | None = None) -> Settings:
        """A level's settings (global: no target; team or persona: its id)."""
        return cast(Settings, await self.send(calls.get_settings(level, target_id)))

    async def put_settings(
        self, level: SettingsLevel, values: SettingsValues, target_id: IdLike | None = None
    ) -> Settings:
        """Replace a level's settings (a value left out inherits); the level as it is now."""
        return cast(Settings, await self.send(calls.put_settings(level, target_id, values)))

    async def set_name(self, kind: DirectoryKind, item_id: IdLike, name: str) -> DirectoryName:
        """Set the display name of a team, persona or user."""
        return cast(DirectoryName, await self.send(calls.set_name(kind, item_id, name)))
