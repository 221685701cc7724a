"""`SharedQueryEmbeddings`: a recall's query text is embedded once, even by two recalls at once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from extraction.embeddings import HashingEmbedder
from store.services.query_embeddings import SharedQueryEmbeddings


class Counting:
    """A hashing embedder that counts the texts it embeds as queries, slowly."""

    def __init__(self, *, fail: bool = False) -> None:
        self.inner = HashingEmbedder(dim=16)
        self.dim = 16
        self.texts: list[str] = []
        self.fail = fail
        self.identity = "the inner identity"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.inner.embed(texts)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        await asyncio.sleep(0.01)
        if self.fail:
            raise TimeoutError("the embeddings provider did not answer")
        return await self.inner.embed(texts)


async def test_two_recalls_at_once_embed_the_shared_text_once() -> None:
    inner = Counting()
    shared = SharedQueryEmbeddings(inner)
    memory_side, turn_side = await asyncio.gather(
        shared.embed_queries(["where does she work", "she work"]),
        shared.embed_queries(["where does she work", "where work"]),
    )
    assert sorted(inner.texts) == ["she work", "where does she work", "where work"]
    expected = await inner.inner.embed(["where does she work", "she work", "where work"])
    assert memory_side == expected[:2] and turn_side == [expected[0], expected[2]]
    assert await shared.embed_queries(["where does she work"]) == expected[:1]
    assert len(inner.texts) == 3  # remembered
    assert shared.identity == "the inner identity" and shared.dim == 16


async def test_a_failed_embedding_reaches_every_caller_and_is_not_remembered() -> None:
    inner = Counting(fail=True)
    shared = SharedQueryEmbeddings(inner)
    results = await asyncio.gather(
        shared.embed_queries(["a question"]), shared.embed_queries(["a question"]), return_exceptions=True
    )
    assert [type(r) for r in results] == [TimeoutError, TimeoutError]
    inner.fail = False
    assert len(await shared.embed_queries(["a question"])) == 1
    assert inner.texts == ["a question", "a question"]


async def test_a_cancelled_caller_does_not_cancel_the_other() -> None:
    inner = Counting()
    shared = SharedQueryEmbeddings(inner)
    first = asyncio.ensure_future(shared.embed_queries(["same words"]))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(shared.embed_queries(["same words"]))
    await asyncio.sleep(0)
    first.cancel()
    assert len(await second) == 1
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_only_the_most_recent_texts_are_kept() -> None:
    shared = SharedQueryEmbeddings(Counting(), max_entries=2)
    for text in ("one", "two", "three"):
        await shared.embed_queries([text])
    assert list(shared._vectors) == ["two", "three"]


class OneBatchAtATime(Counting):
    """`Counting` that says it encodes one batch at a time, and records each call's texts."""

    one_batch_at_a_time = True

    def __init__(self, *, fail: bool = False) -> None:
        super().__init__(fail=fail)
        self.calls: list[list[str]] = []

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return await super().embed_queries(texts)


async def test_queries_waiting_for_a_one_batch_embedder_share_its_next_call() -> None:
    inner = OneBatchAtATime()
    shared = SharedQueryEmbeddings(inner)
    first = asyncio.ensure_future(shared.embed_queries(["first question"]))
    await asyncio.sleep(0)  # its call runs
    waiting = [shared.embed_queries([f"question {i}", "first question"]) for i in range(3)]
    results = await asyncio.gather(first, *waiting)
    assert inner.calls == [["first question"], ["question 0", "question 1", "question 2"]]
    alone = await Counting().inner.embed(["first question", "question 0", "question 1", "question 2"])
    assert results == [alone[:1], *([alone[i], alone[0]] for i in (1, 2, 3))]
    # a caller without concurrent ones is not held back
    assert await shared.embed_queries(["later"]) == await Counting().inner.embed(["later"])
    assert inner.calls[-1] == ["later"]


async def test_a_failed_batch_reaches_each_of_its_callers_and_the_next_batch_runs() -> None:
    inner = OneBatchAtATime(fail=True)
    shared = SharedQueryEmbeddings(inner)
    first = asyncio.ensure_future(shared.embed_queries(["one"]))
    await asyncio.sleep(0)
    results = await asyncio.gather(
        first, shared.embed_queries(["two"]), shared.embed_queries(["three"]), return_exceptions=True
    )
    assert [type(r) for r in results] == [TimeoutError] * 3
    assert inner.calls == [["one"], ["two", "three"]]
    inner.fail = False
    assert len(await shared.embed_queries(["two"])) == 1  # not remembered as failed
