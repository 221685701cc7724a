"""Rejecting a memory, and with it forgetting what was said: the conversation turns its evidence
cites are erased, and no text of them stays anywhere.

A plain rejection keeps the conversation's turns (they still feed conversation recall when history is
on). Rejecting and forgetting erases, in the same transaction as the rejection:

- every stored copy of each cited message in the memory's conversation (`store.rules.forgetting`),
  within the reviewer's reach: the memory's team (a person rejecting their own memory: their own
  turns);
- the erased turns' words from the turns beside them: their full text and embedding are read again
  from the turns that stay (what the worker's `plan_turns` would have stored without them);
- the rejected evidence itself (the memory's, or the rejected proposal's), and the same lines in the
  evidence of the conversation's other memories and proposals within that reach; a memory whose
  evidence changes is embedded again from what stays, a proposal's embedding is dropped (approval
  embeds it again).

A person erasing their own memory (`erase_own`) clears their words the same way: the memory and its
open proposal are erased (as `erase` does), and the lines of their evidence that the person's own
stored turns say leave the evidence of the team's other memories and proposals; the turns stay, as
with a plain rejection.

The embeddings are computed before the transaction; if what was said changed in between (another
event of the conversation arrived), the plan is made again."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from store.core.base import StoreBase
from store.errors import StoreError
from store.model import NIL_UUID, Memory, Rejection, Revision
from store.rules.evidence import SaidLine, evidence_lines
from store.rules.forgetting import StoredTurn, TurnReading, cites, reread_beside, without_lines
from store.rules.keys import embedding_text
from store.rules.policy import check_may_decide, plan_reject

# plans made again when what was said changes between embedding and writing, before giving up
_ATTEMPTS = 3


def folded(first: Sequence[float], second: Sequence[float]) -> list[float]:
    """The unit direction of two vectors each scaled to length 1 (how the worker folds a turn's own
    text with its text in context, and a fact with its evidence)."""
    pair = np.asarray([first, second], dtype=np.float64)
    norms = np.linalg.norm(pair, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    total = (pair / norms).sum(axis=0)
    length = float(np.linalg.norm(total)) or 1.0
    result: list[float] = (total / length).tolist()
    return result


@dataclass(frozen=True, kw_only=True, slots=True)
class _Rejecting:
    """What a rejection decides: the memory, whether it is archived, and the open proposal rejected
    with it (None: none), with the proposal's conversation. `erase`: both are erased instead, so
    their own evidence needs no change and the conversation's turns stay."""

    memory: Memory
    archive: bool
    revision: Revision | None
    revision_channel: uuid.UUID | None
    erase: bool = False

    def rejected_evidence(self) -> list[tuple[uuid.UUID | None, str | None]]:
        """(conversation, evidence) of what is rejected: the archived memory's, the proposal's."""
        found: list[tuple[uuid.UUID | None, str | None]] = []
        if self.archive:
            found.append((self.memory.source_channel_id, self.memory.evidence))
        if self.revision is not None:
            channel = self.revision_channel or self.memory.source_channel_id
            found.append((channel, self.revision.evidence))
        return found


@dataclass(frozen=True, kw_only=True, slots=True)
class _MemoryChange:
    evidence: str | None
    fact: str  # the memory's embedded text (`embedding_text`)

    def texts(self) -> list[str]:
        if self.evidence is None:
            return [self.fact]
        return [self.fact, f"{self.evidence}\n{self.fact}"]


@dataclass(kw_only=True, slots=True)
class _ForgetPlan:
    """Everything forgetting writes: turns erased, turns read again (and whether each has an
    embedding to compute again), memories' new evidence, proposals' new evidence."""

    erase: list[uuid.UUID] = field(default_factory=list)
    reread: dict[uuid.UUID, tuple[TurnReading, bool]] = field(default_factory=dict)
    memories: dict[uuid.UUID, _MemoryChange] = field(default_factory=dict)
    revisions: dict[uuid.UUID, str | None] = field(default_factory=dict)

    def texts(self) -> list[str]:
        """The texts to embed, each once."""
        wanted: list[str] = []
        for reading, embedded in self.reread.values():
            if embedded:
                wanted += [reading.own, reading.around]
        for change in self.memories.values():
            wanted += change.texts()
        return list(dict.fromkeys(wanted))


class RejectAndForget(StoreBase):
    """`reject_memory`: a reviewer's or a person's rejection, optionally forgetting what was said."""

    async def reject_memory(
        self,
        memory_id: uuid.UUID,
        *,
        actor: str,
        forget: bool = False,
        person: uuid.UUID | None = None,
    ) -> Rejection | None:
        """Reject a memory, and with `forget` erase what was said that it comes from (the module
        docstring); None when there is no such memory or nothing to reject.

        A reviewer (`person` None) decides as `reject` does: a pending memory is archived, an open
        proposal discarded. A person rejecting their own memory (`person`: who they are; the caller
        checks the memory is about them) archives it whatever its status, with any open proposal,
        and forgets only their own turns. Audited as `reject`, by `actor`."""
        check_may_decide(actor)
        vectors: dict[str, list[float]] = {}
        for _ in range(_ATTEMPTS):
            if forget:
                async with self._backend.reading() as conn:
                    peek = await self._rejecting(conn, memory_id, person, lock=False)
                    if peek is None:
                        return None
                    wanted = (await self._forget_plan(conn, peek, person)).texts()
                await self._embed_into(vectors, [text for text in wanted if text not in vectors])
            async with self._backend.transaction() as conn:
                rejecting = await self._rejecting(conn, memory_id, person, lock=True)
                if rejecting is None:
                    return None
                plan = await self._forget_plan(conn, rejecting, person) if forget else _ForgetPlan()
                if any(text not in vectors for text in plan.texts()):
                    continue  # another event of the conversation came meanwhile: plan again
                await self._forget(conn, plan, vectors)
                await self._reject_in(conn, rejecting, actor)
                memory = await self._memory_in(conn, memory_id)
            if memory is None:  # pragma: no cover - the row is locked above
                return None
            return Rejection(memory=memory, forgotten_turns=len(plan.erase))
        raise StoreError(f"what was said changed while forgetting memory {memory_id}; try again")

    async def erase_own(self, memory_id: uuid.UUID, *, actor: str, person: uuid.UUID) -> bool:
        """Erase a person's own memory (the caller checks it is about them) as `erase` does, and
        their words it quotes from the evidence of the team's other memories and proposals (the
        module docstring); False when there is no such memory."""
        vectors: dict[str, list[float]] = {}
        for _ in range(_ATTEMPTS):
            async with self._backend.reading() as conn:
                peek = await self._erasing(conn, memory_id, lock=False)
                if peek is None:
                    return False
                wanted = (await self._forget_plan(conn, peek, person)).texts()
            await self._embed_into(vectors, [text for text in wanted if text not in vectors])
            async with self._backend.transaction() as conn:
                erasing = await self._erasing(conn, memory_id, lock=True)
                if erasing is None:
                    return False
                plan = await self._forget_plan(conn, erasing, person)
                if any(text not in vectors for text in plan.texts()):
                    continue  # another event of the conversation came meanwhile: plan again
                await self._forget(conn, plan, vectors)
                await self._erase_rows(conn, [erasing.memory], actor=actor)
            return True
        raise StoreError(f"what was said changed while erasing memory {memory_id}; try again")

    async def _erasing(self, conn: AsyncConnection, memory_id: uuid.UUID, *, lock: bool) -> _Rejecting | None:
        """The memory to erase with its open proposal (any status), or None when there is none."""
        memory = await self._memory_in(conn, memory_id, lock=lock)
        if memory is None:
            return None
        open_rev = await self._open_revision(conn, memory_id, lock=lock)
        revision = open_rev[0] if open_rev is not None else None
        channel = await self._revision_channel(conn, revision)
        return _Rejecting(
            memory=memory, archive=True, revision=revision, revision_channel=channel, erase=True
        )

    async def _revision_channel(self, conn: AsyncConnection, revision: Revision | None) -> uuid.UUID | None:
        """The conversation a proposal was drawn from (None: none, or no proposal)."""
        if revision is None:
            return None
        r = self._schema.revisions
        channel: uuid.UUID | None = (
            await conn.execute(select(r.c.source_channel_id).where(r.c.id == revision.id))
        ).scalar_one_or_none()
        return channel

    async def _embed_into(self, vectors: dict[str, list[float]], texts: Sequence[str]) -> None:
        if not texts:
            return
        found = await self._embedder.embed(list(texts))
        for text, vector in zip(texts, found, strict=True):
            vectors[text] = self._check_dim(vector, "embedding")

    async def _rejecting(
        self, conn: AsyncConnection, memory_id: uuid.UUID, person: uuid.UUID | None, *, lock: bool
    ) -> _Rejecting | None:
        memory = await self._memory_in(conn, memory_id, lock=lock)
        if memory is None:
            return None
        open_rev = await self._open_revision(conn, memory_id, lock=lock)
        revision = open_rev[0] if open_rev is not None else None
        if person is None:
            kind = plan_reject(memory, revision)
            if kind == "nothing":
                return None
            archive = kind == "archive"
            revision = revision if kind == "discard_revision" else None
        else:
            if memory.status == "archived":
                return None
            archive = True
        channel = await self._revision_channel(conn, revision)
        return _Rejecting(memory=memory, archive=archive, revision=revision, revision_channel=channel)

    async def _reject_in(self, conn: AsyncConnection, rejecting: _Rejecting, actor: str) -> None:
        """The rejection itself, audited as `reject` does."""
        memory, revision = rejecting.memory, rejecting.revision
        if not rejecting.archive:
            if revision is not None:
                await self._close_revision(conn, revision, memory, status="rejected", actor=actor, audit=True)
            return
        if revision is not None:
            # a proposal for an archived memory would resurrect it on approval
            await self._close_revision(conn, revision, memory, status="rejected", actor=actor, audit=False)
        await self._set_archived(conn, memory, action="reject", actor=actor)

    # -- the plan -------------------------------------------------------------------------------

    def _turns_within(self, memory: Memory, person: uuid.UUID | None) -> ColumnElement[bool]:
        """The turns a rejection may erase: the memory's team's (a person: their own)."""
        t = self._schema.turns
        if person is not None:
            return t.c.user_id == person
        return func.coalesce(t.c.team_id, self._backend.nil()) == (memory.team_id or NIL_UUID)

    def _memories_within(self, memory: Memory) -> ColumnElement[bool]:
        """The memories whose evidence a rejection may change: every one of the memory's team (a
        person's words leave a persona's memory that quotes them too)."""
        m = self._schema.memories
        return func.coalesce(m.c.team_id, self._backend.nil()) == (memory.team_id or NIL_UUID)

    async def _forget_plan(
        self, conn: AsyncConnection, rejecting: _Rejecting, person: uuid.UUID | None
    ) -> _ForgetPlan:
        plan = _ForgetPlan()
        memory = rejecting.memory
        said: dict[uuid.UUID, list[SaidLine]] = defaultdict(list)
        forgotten: set[str] = set()
        for channel, evidence in rejecting.rejected_evidence():
            lines = evidence_lines(evidence)
            forgotten.update(line.line for line in lines)
            if channel is not None:
                said[channel] += lines
        if rejecting.archive and memory.evidence is not None and not rejecting.erase:
            plan.memories[memory.id] = _MemoryChange(
                evidence=None, fact=embedding_text(memory.key, memory.value)
            )
        if rejecting.revision is not None and rejecting.revision.evidence is not None and not rejecting.erase:
            plan.revisions[rejecting.revision.id] = None
        if not said:
            return plan
        within = self._turns_within(memory, person)
        cited = await self._plan_turns(conn, plan, said, within, keep=rejecting.erase)
        if person is not None:
            # a person forgets their own words only: the lines of the turns erased, not what
            # others said in the same conversation
            forgotten = {
                line.line
                for channel, lines in said.items()
                for line in lines
                if any(
                    cites([line], role, text) for turn_channel, role, text in cited if turn_channel == channel
                )
            }
            if not forgotten:
                return plan
        erased = {memory.id} if rejecting.erase else set()
        erased_revisions = {rejecting.revision.id} if rejecting.erase and rejecting.revision else set()
        await self._plan_evidence(
            conn,
            plan,
            set(said),
            forgotten,
            self._memories_within(memory),
            skip=erased | erased_revisions,
        )
        return plan

    async def _plan_turns(
        self,
        conn: AsyncConnection,
        plan: _ForgetPlan,
        said: Mapping[uuid.UUID, Sequence[SaidLine]],
        within: ColumnElement[bool],
        *,
        keep: bool = False,
    ) -> list[tuple[uuid.UUID, str, str]]:
        """The cited turns to erase, and their neighbours to read again; answers the cited turns'
        (channel, role, text). With `keep` the turns stay: only the cited ones are answered."""
        t = self._schema.turns
        rows = (
            await conn.execute(
                select(t.c.id, t.c.event_id, t.c.channel_id, t.c.role, t.c.text).where(
                    t.c.channel_id.in_(sorted(said)), within
                )
            )
        ).all()
        cited = [row for row in rows if cites(said[row.channel_id], row.role, row.text)]
        if not cited or keep:
            return [(row.channel_id, row.role, row.text) for row in cited]
        plan.erase = sorted({row.id for row in cited})
        stmt = select(
            t.c.id,
            t.c.event_id,
            t.c.position,
            t.c.role,
            t.c.speaker,
            t.c.text,
            t.c.search_text.is_not(None).label("has_search_text"),
            t.c.embedding.is_not(None).label("has_embedding"),
        ).where(t.c.event_id.in_(sorted({row.event_id for row in cited})))
        by_event: dict[uuid.UUID, list[StoredTurn]] = defaultdict(list)
        embedded: dict[uuid.UUID, bool] = {}
        for row in (await conn.execute(stmt)).all():
            by_event[row.event_id].append(
                StoredTurn(
                    id=row.id,
                    position=row.position,
                    role=row.role,
                    speaker=row.speaker,
                    text=row.text,
                    has_search_text=bool(row.has_search_text),
                    has_embedding=bool(row.has_embedding),
                )
            )
            embedded[row.id] = bool(row.has_embedding)
        erased = set(plan.erase)
        for turns in by_event.values():
            for turn_id, reading in reread_beside(turns, erased).items():
                plan.reread[turn_id] = (reading, embedded[turn_id])
        return [(row.channel_id, row.role, row.text) for row in cited]

    async def _plan_evidence(
        self,
        conn: AsyncConnection,
        plan: _ForgetPlan,
        channels: set[uuid.UUID],
        forgotten: set[str],
        within: ColumnElement[bool],
        *,
        skip: set[uuid.UUID],
    ) -> None:
        """The conversation's other memories and proposals quoting a forgotten line: their evidence
        without it (`skip`: ids being erased, left as they are)."""
        m, r = self._schema.memories, self._schema.revisions
        ordered = sorted(channels)
        approved_from = select(r.c.memory_id).where(
            r.c.status == "approved", r.c.source_channel_id.in_(ordered)
        )
        quoting = (
            await conn.execute(
                select(m.c.id, m.c.key, m.c.value, m.c.evidence).where(
                    m.c.evidence.is_not(None),
                    or_(m.c.source_channel_id.in_(ordered), m.c.id.in_(approved_from)),
                    within,
                )
            )
        ).all()
        for row in quoting:
            if row.id in plan.memories or row.id in skip:
                continue
            kept = without_lines(row.evidence, forgotten)
            if kept != row.evidence:
                plan.memories[row.id] = _MemoryChange(evidence=kept, fact=embedding_text(row.key, row.value))
        proposals = (
            await conn.execute(
                select(r.c.id, r.c.evidence)
                .join(m, m.c.id == r.c.memory_id)
                .where(and_(r.c.evidence.is_not(None), r.c.source_channel_id.in_(ordered), within))
            )
        ).all()
        for proposal in proposals:
            if proposal.id in plan.revisions or proposal.id in skip:
                continue
            kept = without_lines(proposal.evidence, forgotten)
            if kept != proposal.evidence:
                plan.revisions[proposal.id] = kept

    # -- writing it -----------------------------------------------------------------------------

    async def _forget(
        self, conn: AsyncConnection, plan: _ForgetPlan, vectors: Mapping[str, Sequence[float]]
    ) -> None:
        t, m, r = self._schema.turns, self._schema.memories, self._schema.revisions
        if plan.erase:
            await conn.execute(delete(t).where(t.c.id.in_(plan.erase)))
        for turn_id, (reading, embedded) in plan.reread.items():
            values: dict[str, Any] = {"search_text": reading.search_text}
            if embedded:
                values["embedding"] = folded(vectors[reading.own], vectors[reading.around])
            await conn.execute(update(t).where(t.c.id == turn_id).values(**values))
        for memory_id, change in plan.memories.items():
            texts = change.texts()
            vector = (
                list(vectors[texts[0]]) if len(texts) == 1 else folded(vectors[texts[0]], vectors[texts[1]])
            )
            await conn.execute(
                update(m).where(m.c.id == memory_id).values(evidence=change.evidence, embedding=vector)
            )
        for revision_id, evidence in plan.revisions.items():
            await conn.execute(
                update(r).where(r.c.id == revision_id).values(evidence=evidence, embedding=None)
            )
