"""`SharedQueryEmbeddings`: an embedder that embeds each recall query text once.

A platform recall runs the memory recall and the turn recall side by side, and each embeds the
query itself plus its own focused variant (`store.rules.recall.embedding_queries`): the query
text was embedded twice per request. This wrapper keeps the query vectors of the last
`max_entries` texts, and a text being embedded is awaited, not embedded again, by a concurrent
recall (the other half of the same request, or another request with the same words: the hint and
the recall of one chat turn). The vectors are the same ones (an embedder is deterministic), so
recall ranks as before. Stored memories' embeddings (`embed`) pass through untouched.

Callers must not modify the vectors they get (they are shared).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from store.protocols import Embedder


class SharedQueryEmbeddings:
    """`inner`, with `embed_queries` remembered per text (module docstring)."""

    def __init__(self, inner: Embedder, *, max_entries: int = 512) -> None:
        self.inner = inner
        self.max_entries = max_entries
        self._vectors: OrderedDict[str, asyncio.Future[list[float]]] = OrderedDict()
        self._embedding: set[asyncio.Task[None]] = set()

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
        if missing:
            # in a task of its own: a caller cancelled meanwhile (a client gone) does not cancel
            # the vectors another recall waits for
            task = asyncio.ensure_future(self._embed_missing(missing))
            self._embedding.add(task)
            task.add_done_callback(self._embedding.discard)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)
        return [future.result() if future.done() else await asyncio.shield(future) for future in wanted]

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
            error = exc if isinstance(exc, Exception) else RuntimeError("query embedding cancelled")
            for text, future in missing:
                if self._vectors.get(text) is future:
                    del self._vectors[text]  # not remembered: the next recall tries again
                if not future.done():
                    future.set_exception(error)
                    future.exception()  # its awaiters get it; none left: no "never retrieved" warning
            return
        for (_, future), vector in zip(missing, vectors, strict=True):
            if not future.done():
                future.set_result(vector)
