"""Passing rows stored before the gate through it (`pmem regate`): memories (key, value, evidence),
conversation turns (text, search text, speaker) and directory names, each through today's
admission (`store.rules.admission.regate_*`). A row whose text changes is rewritten, and embedded
again from its new text; a refused one is erased (a memory as `erase` does: its audit keeps a
tombstone). Batches by id, one transaction each, so it can run beside the service and resume."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Row, Table, delete, select, update
from sqlalchemy.exc import IntegrityError

from store.core.base import StoreBase
from store.rules.admission import regate_memory, regate_name, regate_turn
from store.rules.keys import embedding_text

# rows read per batch
REGATE_BATCH = 500


@dataclass(kw_only=True, slots=True)
class RegateReport:
    """What one pass changed (or, with `dry_run`, would change)."""

    memories_seen: int = 0
    memories_rewritten: int = 0
    memories_erased: int = 0
    memories_left: int = 0  # a rewritten key would collide with another memory's: edit by hand
    turns_seen: int = 0
    turns_rewritten: int = 0
    turns_erased: int = 0
    names_seen: int = 0
    names_rewritten: int = 0
    names_erased: int = 0


class StoredTextGate(StoreBase):
    """`regate`: the admission gate over what is already stored."""

    async def regate(self, *, dry_run: bool = False) -> RegateReport:
        """Pass every stored memory, turn and directory name through today's gate (module docstring);
        with `dry_run` only count what would change."""
        report = RegateReport()
        await self._regate_memories(report, dry_run)
        await self._regate_turns(report, dry_run)
        await self._regate_names(report, dry_run)
        return report

    async def _batches(self, table: Table, *columns: ColumnElement[Any]) -> AsyncIterator[Sequence[Row[Any]]]:
        """Every row of `table` (its `id` and these `columns`), `REGATE_BATCH` at a time in id
        order, each batch read on its own (the caller writes between batches)."""
        after: uuid.UUID | None = None
        while True:
            async with self._backend.reading() as conn:
                stmt = select(table.c.id, *columns).order_by(table.c.id).limit(REGATE_BATCH)
                if after is not None:
                    stmt = stmt.where(table.c.id > after)
                rows = (await conn.execute(stmt)).all()
            if not rows:
                return
            after = rows[-1].id
            yield rows

    async def _regate_memories(self, report: RegateReport, dry_run: bool) -> None:
        m = self._schema.memories
        async for rows in self._batches(m, m.c.key, m.c.value, m.c.evidence):
            for row in rows:
                report.memories_seen += 1
                verdict = regate_memory(row.key, row.value, row.evidence)
                if verdict.action == "keep":
                    continue
                if verdict.action == "refuse":
                    report.memories_erased += 1
                    if not dry_run:
                        async with self._backend.transaction() as conn:
                            memory = await self._memory_in(conn, row.id, lock=True)
                            if memory is not None:
                                await self._erase_rows(conn, [memory], actor="system:regate")
                    continue
                if dry_run:
                    report.memories_rewritten += 1
                    continue
                key, value, evidence = verdict.texts
                assert key is not None and value is not None
                [vector] = await self._embedder.embed([embedding_text(key, value)])
                values: dict[str, Any] = {
                    "key": key,
                    "value": value,
                    "evidence": evidence,
                    "embedding": vector,
                }
                try:
                    async with self._backend.transaction() as conn:
                        await conn.execute(update(m).where(m.c.id == row.id).values(**values))
                except IntegrityError:
                    report.memories_left += 1
                    continue
                report.memories_rewritten += 1

    async def _regate_turns(self, report: RegateReport, dry_run: bool) -> None:
        t = self._schema.turns
        embedded_now = t.c.embedding.is_not(None).label("embedded")
        async for rows in self._batches(t, t.c.text, t.c.search_text, t.c.speaker, embedded_now):
            erase: list[uuid.UUID] = []
            rewrite: list[tuple[uuid.UUID, tuple[str | None, ...], bool]] = []
            for row in rows:
                report.turns_seen += 1
                verdict = regate_turn(row.text, row.search_text, row.speaker)
                if verdict.action == "refuse":
                    erase.append(row.id)
                elif verdict.action == "rewrite":
                    rewrite.append((row.id, verdict.texts, bool(row.embedded)))
            report.turns_erased += len(erase)
            report.turns_rewritten += len(rewrite)
            if dry_run or not (erase or rewrite):
                continue
            embedded = [texts[0] or "" for _, texts, has in rewrite if has]
            vectors = iter(await self._embedder.embed(embedded)) if embedded else iter(())
            async with self._backend.transaction() as conn:
                if erase:
                    await conn.execute(delete(t).where(t.c.id.in_(erase)))
                for turn_id, (text, search, speaker), has in rewrite:
                    values: dict[str, Any] = {"text": text, "search_text": search, "speaker": speaker}
                    if has:
                        values["embedding"] = next(vectors)
                    await conn.execute(update(t).where(t.c.id == turn_id).values(**values))

    async def _regate_names(self, report: RegateReport, dry_run: bool) -> None:
        d = self._schema.directory
        async with self._backend.reading() as conn:
            rows = (await conn.execute(select(d.c.kind, d.c.id, d.c.name))).all()
        for row in rows:
            report.names_seen += 1
            verdict = regate_name(row.name)
            if verdict.action == "keep":
                continue
            if verdict.action == "refuse":
                report.names_erased += 1
            else:
                report.names_rewritten += 1
            if dry_run:
                continue
            where = (d.c.kind == row.kind, d.c.id == row.id)
            async with self._backend.transaction() as conn:
                if verdict.action == "refuse":
                    await conn.execute(delete(d).where(*where))
                else:
                    await conn.execute(update(d).where(*where).values(name=verdict.texts[0]))
