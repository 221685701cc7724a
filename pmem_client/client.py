"""`MemoryClient` and `AsyncMemoryClient`: each owns its httpx client (use it as a context manager or
call `close()`) and sends the calls of `pmem_client.calls`, which build every request and read every
answer; the two classes only move them, one blocking, one awaited. Each method answers a typed
dictionary or raises `MemoryApiError`. A 429 or 503 is retried after its `Retry-After` within the
`RetryPolicy`."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

import httpx

from pmem_client import calls
from pmem_client.calls import Call
from pmem_client.retry import RetryPolicy
from pmem_client.transport import DEFAULT_TIMEOUT_S, decoded, headers, request_kwargs, wait_before_retry

P = ParamSpec("P")
T = TypeVar("T")
Method = TypeVar("Method", bound=Callable[..., Any])


def _named_after(build: Callable[..., Any], method: Method, owner: str) -> Method:
    """`method` of the class `owner` as `help()` and tools show it: the endpoint's name, docstring
    and parameters."""
    method.__name__ = build.__name__
    method.__qualname__ = f"{owner}.{build.__name__}"
    method.__doc__ = build.__doc__
    signature = inspect.signature(build)
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    answer = str(signature.return_annotation).removeprefix("Call[").removesuffix("]")
    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[this, *signature.parameters.values()], return_annotation=answer
    )
    return method


def blocking(build: Callable[P, Call[T]]) -> Callable[Concatenate[MemoryClient, P], T]:
    """The `MemoryClient` method of an endpoint: the call `build` makes, sent, its answer read."""

    def method(self: MemoryClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        call = build(*args, **kwargs)
        return call.read(self.send(call))

    return _named_after(build, method, "MemoryClient")


def awaited(
    build: Callable[P, Call[T]],
) -> Callable[Concatenate[AsyncMemoryClient, P], Coroutine[Any, Any, T]]:
    """The `AsyncMemoryClient` method of an endpoint: the call `build` makes, sent, its answer read."""

    async def method(self: AsyncMemoryClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        call = build(*args, **kwargs)
        return call.read(await self.send(call))

    return _named_after(build, method, "AsyncMemoryClient")


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

    def send(self, call: Call[Any]) -> Any:
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

    recall = blocking(calls.recall)
    hint = blocking(calls.hint)
    erase_user = blocking(calls.erase_user)

    # -- tools -----------------------------------------------------------------------------------

    tools = blocking(calls.tools)
    call_tool = blocking(calls.call_tool)

    # -- review (admins, team admins) ------------------------------------------------------------

    review_queue = blocking(calls.review_queue)
    approve = blocking(calls.approve)
    reject = blocking(calls.reject)
    edit = blocking(calls.edit)
    bulk = blocking(calls.bulk)
    set_pinned = blocking(calls.set_pinned)
    memory = blocking(calls.memory)

    # -- the signed-in person (a person's JWT) ---------------------------------------------------

    my_memories = blocking(calls.my_memories)
    edit_my_memory = blocking(calls.edit_my_memory)
    pin_my_memory = blocking(calls.pin_my_memory)
    reject_my_memory = blocking(calls.reject_my_memory)
    erase_my_memory = blocking(calls.erase_my_memory)
    erase_all_my_memories = blocking(calls.erase_all_my_memories)
    my_conversations = blocking(calls.my_conversations)
    erase_my_conversation = blocking(calls.erase_my_conversation)
    erase_all_my_conversations = blocking(calls.erase_all_my_conversations)
    export_my_data = blocking(calls.export_my_data)

    # -- settings and directory ------------------------------------------------------------------

    settings = blocking(calls.settings)
    put_settings = blocking(calls.put_settings)
    set_name = blocking(calls.set_name)


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

    async def send(self, call: Call[Any]) -> Any:
        """Send one call (retrying a 429 or 503 as the policy allows); its decoded JSON."""
        attempt = 1
        while True:
            response = await self._http.request(call.method, call.path, **request_kwargs(call))
            wait = wait_before_retry(call, response, attempt, self._retry)
            if wait is None:
                return decoded(call, response)
            await self._sleep(wait)
            attempt += 1

    # -- the platform (a service key) ------------------------------------------------------------

    recall = awaited(calls.recall)
    hint = awaited(calls.hint)
    erase_user = awaited(calls.erase_user)

    # -- tools -----------------------------------------------------------------------------------

    tools = awaited(calls.tools)
    call_tool = awaited(calls.call_tool)

    # -- review (admins, team admins) ------------------------------------------------------------

    review_queue = awaited(calls.review_queue)
    approve = awaited(calls.approve)
    reject = awaited(calls.reject)
    edit = awaited(calls.edit)
    bulk = awaited(calls.bulk)
    set_pinned = awaited(calls.set_pinned)
    memory = awaited(calls.memory)

    # -- the signed-in person (a person's JWT) ---------------------------------------------------

    my_memories = awaited(calls.my_memories)
    edit_my_memory = awaited(calls.edit_my_memory)
    pin_my_memory = awaited(calls.pin_my_memory)
    reject_my_memory = awaited(calls.reject_my_memory)
    erase_my_memory = awaited(calls.erase_my_memory)
    erase_all_my_memories = awaited(calls.erase_all_my_memories)
    my_conversations = awaited(calls.my_conversations)
    erase_my_conversation = awaited(calls.erase_my_conversation)
    erase_all_my_conversations = awaited(calls.erase_all_my_conversations)
    export_my_data = awaited(calls.export_my_data)

    # -- settings and directory ------------------------------------------------------------------

    settings = awaited(calls.settings)
    put_settings = awaited(calls.put_settings)
    set_name = awaited(calls.set_name)
