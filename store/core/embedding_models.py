"""Which embedding model made the stored vectors: checked when a store opens, switched by
`pmem reembed` (every memory re-embedded in batches, resumable from its checkpoint)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import bindparam, func, select, update

from store.core.base import StoreBase
from store.migrate import EmbeddingModelMismatch
from store.model import EmbeddingIdentity
from store.rules.keys import embedding_text


@dataclass(frozen=True, kw_only=True, slots=True)
class ReembedReport:
    """What one `reembed` run did."""

    target: EmbeddingIdentity
    total: int
    reembedded: int
    resumed: bool


def embedder_identity(embedder: object) -> EmbeddingIdentity | None:
    """The embedder's `identity` (provider, model, dim) when it has one."""
    identity = getattr(embedder, "identity", None)
    return identity if isinstance(identity, EmbeddingIdentity) else None


class EmbeddingModels(StoreBase):
    """The recorded embedding identity (table `pmem_embedding`) and re-embedding."""

    async def recorded_embedding(self) -> EmbeddingIdentity | None:
        """What `pmem migrate` (or the last finished `pmem reembed`) recorded; None: nothing."""
        e = self._schema.embedding_config
        async with self._backend.reading() as conn:
            row = (await conn.execute(select(e.c.provider, e.c.model, e.c.dim).where(e.c.id == 1))).first()
        return None if row is None else EmbeddingIdentity(provider=row[0], model=row[1], dim=int(row[2]))

    async def check_embedding_identity(self) -> None:
        """Raise `EmbeddingModelMismatch` (naming both) when the store's embedder is not the one
        the stored vectors were made with. Nothing recorded: nothing to check."""
        configured = embedder_identity(self._embedder)
        if configured is None:
            return
        recorded = await self.recorded_embedding()
        if recorded is not None and recorded != configured:
            raise EmbeddingModelMismatch(recorded=recorded, configured=configured)

    async def reembed(
        self, *, batch_size: int = 256, progress: Callable[[int, int], None] | None = None
    ) -> ReembedReport:
        """Re-embed every memory with this store's embedder, `batch_size` rows per transaction,
        in id order. Each batch commits with a checkpoint, so an interrupted run resumes where it
        stopped (for the same target model). At the end the new identity is recorded.
        `progress(done, total)` is called after each batch."""
        target = embedder_identity(self._embedder)
        if target is None:
            raise ValueError("this embedder has no identity (provider, model, dimension) to record")
        if target.dim != self._schema.embedding_dim:
            raise ValueError(
                f"the configured embedder makes {target.dim}-dimensional vectors but the column is "
                f"vector({self._schema.embedding_dim}); re-embedding cannot change the dimension: migrate "
                "a new database with the new PMEM_EMBEDDING_DIM instead"
            )
        e, m = self._schema.embedding_config, self._schema.memories
        async with self._backend.transaction() as conn:
            row = (
                await conn.execute(
                    select(e.c.reembed_provider, e.c.reembed_model, e.c.reembed_after).where(e.c.id == 1)
                )
            ).first()
            resumed = row is not None and (row[0], row[1]) == (target.provider, target.model)
            after: uuid.UUID | None = row[2] if resumed and row is not None else None
            if row is None:
                # nothing recorded (a database migrated before 0003): the target becomes the record
                await conn.execute(
                    self._insert(e).values(id=1, provider=target.provider, model=target.model, dim=target.dim)
                )
            await conn.execute(
                update(e)
                .where(e.c.id == 1)
                .values(reembed_provider=target.provider, reembed_model=target.model, reembed_after=after)
            )
        async with self._backend.reading() as conn:
            total = int((await conn.execute(select(func.count()).select_from(m))).scalar_one())
            done = 0
            if after is not None:
                before = select(func.count()).select_from(m).where(m.c.id <= after)
                done = int((await conn.execute(before)).scalar_one())
        if progress is not None:
            progress(done, total)
        reembedded = 0
        while True:
            stmt = select(m.c.id, m.c.key, m.c.value).order_by(m.c.id).limit(batch_size)
            if after is not None:
                stmt = stmt.where(m.c.id > after)
            async with self._backend.reading() as conn:
                rows = (await conn.execute(stmt)).all()
            if not rows:
                break
            texts = [embedding_text(r._mapping["key"], r._mapping["value"]) for r in rows]
            vectors = await self._embedder.embed(texts)
            if len(vectors) != len(rows):
                raise RuntimeError(f"the embedder returned {len(vectors)} vectors for {len(rows)} texts")
            changes = [
                {"rid": r._mapping["id"], "vec": self._check_dim(vector, "embedding")}
                for r, vector in zip(rows, vectors, strict=True)
            ]
            async with self._backend.transaction() as conn:
                await conn.execute(
                    update(m).where(m.c.id == bindparam("rid")).values(embedding=bindparam("vec")), changes
                )
                after = rows[-1]._mapping["id"]
                await conn.execute(update(e).where(e.c.id == 1).values(reembed_after=after))
            reembedded += len(rows)
            done += len(rows)
            if progress is not None:
                progress(min(done, total), total)
        async with self._backend.transaction() as conn:
            await conn.execute(
                update(e)
                .where(e.c.id == 1)
                .values(
                    provider=target.provider,
                    model=target.model,
                    dim=target.dim,
                    reembed_provider=None,
                    reembed_model=None,
                    reembed_after=None,
                    updated_at=self._backend.now(),
                )
            )
        return ReembedReport(target=target, total=total, reembedded=reembedded, resumed=resumed)
