"""Conversation memory: the turns of past conversations, written with their event, recalled only in
the context they were said in, listed, deleted and erased for the person they belong to.

A turn's context is (user, persona or none, team or none), matched exactly: a turn said to one
persona is never recalled for another persona or for none, one said in a team never outside it, and
no turn is ever recalled for another user or in `persona` scope. Recall ranks the context's most
recent `TURN_WINDOW` turns (`store.rules.turn_recall`; vector and full text, through
`ix_conversation_turns_context`), so a recall for a user with a hundred thousand turns reads what
one for a user with a few thousand reads.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import ColumnElement, Table, and_, delete, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from store.core.backend import Backend, FocusedVector, TurnRecall
from store.core.base import StoreBase, replica_read, texts_vector
from store.core.rows import turn_columns, turn_from_row
from store.core.settings import effective_settings
from store.model import NIL_UUID, Conversation, ConversationQuery, NewTurn, Page, Turn, TurnHit
from store.rules.cues import query_words
from store.rules.pagination import newest_first_page
from store.rules.recall import candidate_count, embedding_queries, query_cues
from store.rules.terms import query_terms
from store.rules.turn_recall import TURN_FUSION


def turn_context(
    turns: Table,
    nil: ColumnElement[Any],
    user_id: uuid.UUID,
    persona_id: uuid.UUID | None,
    team_id: uuid.UUID | None,
) -> list[ColumnElement[bool]]:
    """SQL for "said in this context" (the exact user, persona or none, team or none), in the
    context index's expressions (`nil`: the backend's nil uuid literal)."""
    return [
        turns.c.user_id == user_id,
        func.coalesce(turns.c.persona_id, nil) == (persona_id or NIL_UUID),
        func.coalesce(turns.c.team_id, nil) == (team_id or NIL_UUID),
    ]


# Other parts of the store reach turns through these functions of the store (the event write stores
# them, erasure and retention remove them, the export lists them): each part inherits only
# `StoreBase`, none another part.


async def insert_turns(
    backend: Backend, conn: AsyncConnection, event_id: uuid.UUID, turns: Sequence[NewTurn]
) -> None:
    """Store an event's turns in the caller's transaction; a turn already stored is kept."""
    if turns:
        await backend.insert_turns(conn, event_id, turns)


async def delete_user_turns(
    store: StoreBase,
    user_id: uuid.UUID,
    *,
    teams: frozenset[uuid.UUID] | None = None,
    where: Sequence[ColumnElement[bool]] = (),
) -> int:
    """Erase this user's stored turns: every one, or those `where` also holds (of `teams` only, when
    given); how many were erased."""
    t = store._schema.turns
    conditions = [t.c.user_id == user_id, *where]
    if teams is not None:
        conditions.append(t.c.team_id.in_(sorted(teams)))
    async with store._backend.transaction() as conn:
        result = await conn.execute(delete(t).where(*conditions))
    return int(result.rowcount or 0)


def conversation_conditions(turns: Table, query: ConversationQuery) -> list[ColumnElement[bool]]:
    """The turns a listing of a person's conversations reads: theirs, said with `query`'s persona
    and in its team when it names them."""
    conditions: list[ColumnElement[bool]] = [turns.c.user_id == query.user_id]
    if query.persona_id is not None:
        conditions.append(turns.c.persona_id == query.persona_id)
    if query.team_id is not None:
        conditions.append(turns.c.team_id == query.team_id)
    return conditions


async def user_turns(store: StoreBase, user_id: uuid.UUID) -> tuple[Turn, ...]:
    """Every stored turn of this user, oldest first."""
    t = store._schema.turns
    stmt = select(*turn_columns(t)).where(t.c.user_id == user_id).order_by(t.c.at, t.c.event_id, t.c.position)
    async with store._backend.reading() as conn:
        return tuple(turn_from_row(row) for row in (await conn.execute(stmt)).all())


async def _turn_contexts(store: StoreBase) -> list[tuple[uuid.UUID | None, uuid.UUID | None]]:
    """Distinct (team, persona) pairs among stored turns: each has its own `history_days`."""
    t = store._schema.turns
    async with store._backend.reading() as conn:
        rows = (await conn.execute(select(t.c.team_id, t.c.persona_id).distinct())).all()
    return sorted({(row.team_id, row.persona_id) for row in rows}, key=lambda p: (str(p[0]), str(p[1])))


async def expire_old_turns(store: StoreBase, *, now: datetime, batch: int = 5000) -> int:
    """Erase turns said more than `history_days` before `now` (per team and persona settings), in
    batches; how many were erased."""
    t = store._schema.turns
    erased = 0
    for team_id, persona_id in await _turn_contexts(store):
        policy = await effective_settings(store, team_id, persona_id)
        if policy.history_days is None:
            continue
        cutoff = now - timedelta(days=policy.history_days)
        team = t.c.team_id.is_(None) if team_id is None else t.c.team_id == team_id
        persona = t.c.persona_id.is_(None) if persona_id is None else t.c.persona_id == persona_id
        while True:
            ids = select(t.c.id).where(team, persona, t.c.at < cutoff).limit(batch).scalar_subquery()
            async with store._backend.transaction() as conn:
                result = await conn.execute(delete(t).where(t.c.id.in_(ids)))
            count = int(result.rowcount or 0)
            erased += count
            if count < batch:
                break
    return erased


TurnContext = tuple[uuid.UUID, uuid.UUID | None, uuid.UUID | None]  # user, persona, team


class KnownShares:
    """The query words' shares of each context's recent turns as its last recalls counted them,
    for the most recently recalled `max_contexts` contexts, `max_words` words each: a guess of the
    words a recall's query vector leaves out, which the recall's own count confirms or corrects.
    A word is kept as its hash (salted per process), so the cache holds no text of anyone's."""

    def __init__(self, *, max_contexts: int = 1024, max_words: int = 64) -> None:
        self.max_contexts = max_contexts
        self.max_words = max_words
        self._contexts: OrderedDict[TurnContext, dict[int, float]] = OrderedDict()

    def guess(self, context: TurnContext, words: Iterable[str]) -> dict[str, float]:
        """The shares last counted in this context of these words (empty: none known)."""
        known = self._contexts.get(context)
        if not known:
            return {}
        return {word: share for word in words if (share := known.get(hash(word))) is not None}

    def remember(self, context: TurnContext, word_share: Mapping[str, float]) -> None:
        """Keep these counted shares (the newest of a word wins); the context becomes the most
        recent, the least recent context and words go past the bounds."""
        known = self._contexts.pop(context, {})
        for word, share in word_share.items():
            key = hash(word)
            known.pop(key, None)
            known[key] = share
        while len(known) > self.max_words:
            del known[next(iter(known))]
        self._contexts[context] = known
        while len(self._contexts) > self.max_contexts:
            self._contexts.popitem(last=False)


class ConversationTurns(StoreBase):
    """Writing, recalling, listing, deleting and erasing conversation turns (both backends)."""

    def __init__(self, **parts: Any) -> None:
        super().__init__(**parts)
        self._known_shares = KnownShares()

    # -- reads ----------------------------------------------------------------------------------

    _turn = staticmethod(turn_from_row)

    def _turn_columns(self) -> list[Any]:
        return turn_columns(self._schema.turns)

    @replica_read
    async def recall_turns(
        self,
        user_id: uuid.UUID,
        persona_id: uuid.UUID | None,
        query: str,
        limit: int = 10,
        *,
        team_id: uuid.UUID | None = None,
        query_embedding: Sequence[float] | None = None,
    ) -> list[TurnHit]:
        """The turns said in this context (the same user, persona or none, team or none) that best
        match the query, among the context's most recent `TURN_WINDOW`; an empty query finds none."""
        if limit <= 0 or not query_terms(query):
            return []
        # as the memory recall: the words naming a time are a cue, not words to match, and the
        # query is embedded also without the words most of the context's turns hold (the speakers'
        # names), so what the question is about steers the vector
        text = query_cues(query, now=datetime.now(UTC)).text
        focus: FocusedVector | None = None
        if query_embedding is not None:
            vector = self._check_dim(query_embedding, "query embedding")
        else:
            # the words' shares are counted in the statement that ranks the turns, after the
            # vector is chosen: the vector is the context's last known shares' guess, and the
            # backend asks again (`_refocused`) only when the counted shares choose other texts
            context = (user_id, persona_id, team_id)
            shares = self._known_shares.guess(context, query_words(text))
            guessed = embedding_queries(text, shares, TURN_FUSION)
            vector = await texts_vector(self._embedder, guessed, self._schema.embedding_dim)
            focus = partial(self._refocused, context, text, guessed)
        asked = TurnRecall(
            user_id=user_id,
            persona_id=persona_id,
            team_id=team_id,
            query=query,
            text=text,
            vector=vector,
            focus=focus,
            k=candidate_count(limit),
            limit=limit,
        )
        return await self._backend.recall_turns(asked)

    async def _refocused(
        self, context: TurnContext, text: str, guessed: Sequence[str], word_share: Mapping[str, float]
    ) -> list[float] | None:
        """The query vector for the words' shares a backend counted in the context's recent turns,
        when they choose other embedding texts than `guessed`; None when they choose the same."""
        self._known_shares.remember(context, word_share)
        texts = embedding_queries(text, word_share, TURN_FUSION)
        if texts == list(guessed):
            return None
        return await texts_vector(self._embedder, texts, self._schema.embedding_dim)

    @replica_read
    async def conversation(self, user_id: uuid.UUID, event_id: uuid.UUID) -> list[Turn]:
        """The turns of one of this user's remembered conversations, in order (empty: none of theirs)."""
        t = self._schema.turns
        stmt = (
            select(*self._turn_columns())
            .where(t.c.user_id == user_id, t.c.event_id == event_id)
            .order_by(t.c.position)
        )
        async with self._backend.reading() as conn:
            return [self._turn(row) for row in (await conn.execute(stmt)).all()]

    @replica_read
    async def list_conversations(self, query: ConversationQuery) -> Page[Conversation]:
        """A person's remembered conversations (one per event), newest first, one page: when it
        started, persona, team, its first turn's text and how many turns are kept."""
        t = self._schema.turns
        conditions = conversation_conditions(t, query)
        started = func.min(t.c.at).label("started_at")
        groups = (
            select(
                t.c.event_id,
                func.min(t.c.position).label("first_position"),
                started,
                func.count().label("turn_count"),
            )
            .where(*conditions)
            .group_by(t.c.event_id)
            .subquery()
        )
        stmt = select(groups).order_by(groups.c.started_at.desc(), groups.c.event_id.desc())
        stmt = stmt.where(*self._after(groups.c.started_at, groups.c.event_id, query.cursor))
        stmt = stmt.limit(query.limit + 1)
        async with self._backend.reading() as conn:
            heads = (await conn.execute(stmt)).all()
            firsts: dict[uuid.UUID, Turn] = {}
            if heads:
                pairs = [and_(t.c.event_id == h.event_id, t.c.position == h.first_position) for h in heads]
                first_rows = (await conn.execute(select(*self._turn_columns()).where(or_(*pairs)))).all()
                firsts = {row.event_id: self._turn(row) for row in first_rows}
        entries = []
        for head in heads:
            first = firsts.get(head.event_id)
            if first is None:
                continue  # deleted between the two reads
            entries.append(
                (
                    head.started_at,
                    head.event_id,
                    Conversation(
                        event_id=head.event_id,
                        channel_id=first.channel_id,
                        persona_id=first.persona_id,
                        team_id=first.team_id,
                        started_at=head.started_at,
                        first_line=first.text.strip().splitlines()[0] if first.text.strip() else "",
                        turn_count=int(head.turn_count),
                    ),
                )
            )
        return newest_first_page(entries, query.limit)

    # -- deletion, erasure, retention -----------------------------------------------------------

    async def delete_conversation(
        self, user_id: uuid.UUID, event_id: uuid.UUID, *, teams: frozenset[uuid.UUID] | None = None
    ) -> int:
        """Erase the turns of one of this user's conversations (of `teams` only, when given);
        how many were erased (0: none of theirs)."""
        conversation = self._schema.turns.c.event_id == event_id
        return await delete_user_turns(self, user_id, teams=teams, where=[conversation])

    async def delete_conversations(
        self, user_id: uuid.UUID, *, teams: frozenset[uuid.UUID] | None = None
    ) -> int:
        """Erase every remembered conversation of this user (of `teams` only, when given); how
        many turns were erased."""
        return await delete_user_turns(self, user_id, teams=teams)

    async def export_turns(self, user_id: uuid.UUID) -> tuple[Turn, ...]:
        """Every stored turn of this user, oldest first (for the export)."""
        return await user_turns(self, user_id)
