"""`SharedQueryEmbeddings`: an embedder that embeds each recall query text once.

A platform recall runs the memory recall and the turn recall side by side, and each embeds the
query itself plus its own focused variant (`store.rules.recall.embedding_queries`): the query
text was embedded twice per request. This wrapper keeps the query vectors of the last
`max_entries` texts, and a text being embedded is awaited, not embedded again, by a concurrent
recall (the other half of the same request, or another request with the same words: the hint and
the recall of one chat turn). The vectors are the same ones (an embedder is deterministic), so
recall ranks as before. Stored memories' embeddings (`embed`) pass through untouched.

An inner embedder that encodes one batch at a time anyway (an in-process model: its attribute
`one_batch_at_a_time` is true) gets one call at a time from here too, and the texts that arrive
while a call runs go together in the next one: concurrent requests share a forward pass (MiniLM
on two cores: ~20 ms of CPU for one text alone, ~8 ms a text in a batch of four; bench/README.md,
"Platform load").

Callers must not modify the vectors they get (they are shared).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Coroutine, Sequence
from typing import Any

from store.protocols import Embedder


class SharedQueryEmbeddings:
    """`inner`, with `embed_queries` remembered per text (module docstring)."""

    def __init__(self, inner: Embedder, *, max_entries: int = 512) -> None:
        self.inner = inner
        self.max_entries = max_entries
        self._vectors: OrderedDict[str, asyncio.Future[list[float]]] = OrderedDict()
        self._embedding: set[asyncio.Task[None]] = set()
        # the module docstring: with such an embedder, the texts waiting for the running call
        self._batched = bool(getattr(inner, "one_batch_at_a_time", False))
        self._queued: list[tuple[str, asyncio.Future[list[float]]]] = []
        self._draining = False

    @property
    def dim(self) -> int:
        """The inner embedder's dimension."""
        return self.inner.dim

    def __getattr__(self, name: str) -> Any:
        # the inner embedder's identity, model name, … (only called for what this class lacks)
        return getattr(self.inner, name)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Documents: the inner embedder's, not remembered."""
        return await self.inner.embed(texts)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Query vectors: remembered ones at once, the others in one call to the inner embedder
        (its `embed_queries`, else `embed`)."""
        entries = self._vectors
        loop = asyncio.get_running_loop()
        wanted: list[asyncio.Future[list[float]]] = []
        missing: list[tuple[str, asyncio.Future[list[float]]]] = []
        for text in texts:
            future = entries.get(text)
            if future is None:
                future = loop.create_future()
                entries[text] = future
                missing.append((text, future))
            else:
                entries.move_to_end(text)
            wanted.append(future)
        if missing and not self._batched:
            self._start(self._embed_missing(missing))
        elif missing:
            self._queued.extend(missing)
            if not self._draining:
                self._draining = True
                self._start(self._drain())
        while len(entries) > self.max_entries:
            entries.popitem(last=False)
        return [future.result() if future.done() else await asyncio.shield(future) for future in wanted]

    def _start(self, embedding: Coroutine[Any, Any, None]) -> None:
        # in a task of its own: a caller cancelled meanwhile (a client gone) does not cancel the
        # vectors another recall waits for
        task = asyncio.ensure_future(embedding)
        self._embedding.add(task)
        task.add_done_callback(self._embedding.discard)

    async def _drain(self) -> None:
        """The queued texts, one inner call at a time: those queued during a call go together in
        the next. Never raises; cancelled, it fails the texts still queued."""
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                await self._embed_missing(batch)
        finally:
            self._draining = False
            left, self._queued = self._queued, []
            self._failed(left, RuntimeError("query embedding cancelled"))

    async def _embed_missing(self, missing: list[tuple[str, asyncio.Future[list[float]]]]) -> None:
        """Embed the texts and settle their futures (with the vectors, or the error); never raises."""
        embed = getattr(self.inner, "embed_queries", None)
        try:
            texts = [text for text, _ in missing]
            vectors: list[list[float]] = await (
                embed(texts) if embed is not None else self.inner.embed(texts)
            )
            if len(vectors) != len(missing):
                raise RuntimeError(f"the embedder returned {len(vectors)} vectors for {len(missing)} texts")
        except BaseException as exc:
            self._failed(
                missing, exc if isinstance(exc, Exception) else RuntimeError("query embedding cancelled")
            )
            return
        for (_, future), vector in zip(missing, vectors, strict=True):
            if not future.done():
                future.set_result(vector)

    def _failed(self, missing: list[tuple[str, asyncio.Future[list[float]]]], error: Exception) -> None:
        """Settle the texts' futures with `error`, and forget them: the next recall tries again."""
        for text, future in missing:
            if self._vectors.get(text) is future:
                del self._vectors[text]
            if not future.done():
                future.set_exception(error)
                future.exception()  # its awaiters get it; none left: no "never retrieved" warning
