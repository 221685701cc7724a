"""The endpoints of `pmem_client.calls` as both clients expose them: the same methods with the
builders' parameters, and what a method sends and answers is what its builder made and read."""

from __future__ import annotations

import inspect
import json
import uuid

import httpx
import pytest

from pmem_client import AsyncMemoryClient, MemoryClient, calls

MEMORY = uuid.UUID(int=0x5)


def endpoints() -> list[str]:
    """The names of the builders of `pmem_client.calls` (the functions answering a `Call`)."""
    return sorted(
        name
        for name, function in inspect.getmembers(calls, inspect.isfunction)
        if function.__module__ == calls.__name__
        and not name.startswith("_")
        and str(inspect.signature(function).return_annotation).startswith("Call[")
    )


def test_both_clients_have_every_endpoint_with_its_parameters() -> None:
    names = endpoints()
    assert "recall" in names and "set_name" in names and len(names) == 25
    for name in names:
        built = list(inspect.signature(getattr(calls, name)).parameters.values())
        for client in (MemoryClient, AsyncMemoryClient):
            method = getattr(client, name)
            assert list(inspect.signature(method).parameters.values())[1:] == built, (client, name)
            assert method.__doc__ == getattr(calls, name).__doc__
        assert inspect.iscoroutinefunction(getattr(AsyncMemoryClient, name))


def test_a_method_sends_its_builders_request_and_reads_its_answer() -> None:
    seen: list[tuple[str, str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, json.loads(request.content or b"null")))
        if request.method == "DELETE":
            return httpx.Response(200, json={"erased": 3})
        return httpx.Response(200, json={"id": str(MEMORY), "pinned": True})

    with MemoryClient("http://pmem.test", "pmem_sk_x", transport=httpx.MockTransport(answer)) as client:
        assert client.pin_my_memory(MEMORY, True) == {"id": str(MEMORY), "pinned": True}
        assert client.edit_my_memory(str(MEMORY), "Has two cats")["id"] == str(MEMORY)
        assert client.erase_all_my_conversations() == 3
    path = f"/v1/me/memories/{MEMORY}"
    assert seen == [
        ("PATCH", path, {"pinned": True}),
        ("PATCH", path, {"value": "Has two cats"}),
        ("DELETE", "/v1/me/conversations", None),
    ]


async def test_the_async_client_reads_the_same_answers() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"hint": "Remembered: a cat", "erased": 2})

    transport = httpx.MockTransport(answer)
    async with AsyncMemoryClient("http://pmem.test", "pmem_sk_x", transport=transport) as client:
        assert await client.hint(MEMORY, query="pets") == "Remembered: a cat"
        assert await client.erase_user(MEMORY) == 2


def test_a_bad_id_or_settings_target_fails_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="badly formed"):
        calls.approve("not-an-id")
    with pytest.raises(ValueError, match="no target id"):
        calls.settings("global", MEMORY)
    with pytest.raises(ValueError, match="team's id"):
        calls.put_settings("team", {"min_confidence": 0.5})
