"""LoCoMo units (observations, dialog turns) as the memories a run writes: their keys, the context
their keys carry, and their embeddings."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

from evaluation.cache import CachingEmbedder
from evaluation.locomo import Conversation, Unit, UnitKind, session_datetime
from evaluation.options import EvalOptions
from store.model import NewMemory
from store.rules.admission import secret_key_refusal
from store.rules.recall import mean_direction


def memory_key(kind: UnitKind, index: int) -> str:
    """A short, unique, content-free key per unit (`observation x00012`): the key is part of the
    full-text document, and a token like `x00012` matches no question, so keys add no signal."""
    return f"{kind} x{index + 1:05d}"


def context_key(kind: UnitKind, index: int, context: str = "") -> str:
    """A unit's memory key: its content-free `memory_key`, then `context` (what the unit came from or
    answers) when there is one. Both stores index a memory's key with its value for full text, so
    the keyword branch matches the context's words while the value, what recall returns and answer
    recall reads, stays the unit's text alone. The key stays unique per owner (the id comes first).
    A context whose words would make the key name a secret (a dialog about a "pin" or a "token")
    is left out: the store refuses such a key, and the unit is kept bare rather than lost."""
    key = memory_key(kind, index)
    if not context or secret_key_refusal(f"{key} {context}") is not None:
        return key
    return f"{key} {context}"


def unit_memories(
    units: Sequence[Unit],
    owner: uuid.UUID,
    embeddings: Sequence[list[float]],
    key_contexts: Sequence[str] | None = None,
) -> list[NewMemory]:
    """Active `user`-scope memories of one owner, one per unit, with precomputed embeddings; with
    `key_contexts` (one per unit, "" for none), each key carries its unit's context (`context_key`)."""
    contexts = [""] * len(units) if key_contexts is None else list(key_contexts)
    if len(contexts) != len(units):
        raise ValueError(f"{len(contexts)} key contexts for {len(units)} units")
    return [
        NewMemory(
            scope="user",
            owner_id=owner,
            user_id=None,
            key=context_key(unit.kind, index, contexts[index]),
            value=unit.text,
            confidence=1.0,
            status="active",
            embedding=embedding,
            # the session is the conversation a memory came from, its date when it was said:
            # what the worker records from a conversation.ended event
            source_channel_id=uuid.uuid5(owner, f"session {unit.session}"),
            observed_at=session_datetime(unit.session_date),
        )
        for index, (unit, embedding) in enumerate(zip(units, embeddings, strict=True))
    ]


async def _embed_units(
    embedder: CachingEmbedder, texts: Sequence[str], on_batch: Callable[[int], None]
) -> list[list[float]]:
    vectors: list[list[float]] = []
    for start in range(0, len(texts), embedder.batch_size):
        chunk = texts[start : start + embedder.batch_size]
        vectors.extend(await embedder.embed(chunk))
        on_batch(len(chunk))
    return vectors


async def unit_vectors(
    embedder: CachingEmbedder,
    conversation: Conversation,
    options: EvalOptions,
    on_batch: Callable[[int], None] = lambda _n: None,
) -> list[list[float]]:
    """The embedding of each unit (`options.unit`): its text's; for a dialog turn with
    `options.dialog_context` > 0, the mean direction of its text's and that of the turn with the
    turns before it (`Conversation.context_texts`), so a reply ("Yes, twice last year!") carries
    what it answers while the turn's own words keep their weight; for an observation with
    `options.observation_context` "source", the same with the dialog turns it cites
    (`Conversation.observation_context_texts`): the wording the fact was written from."""
    assert options.unit == "observation" or options.unit == "dialog"
    units = conversation.units(options.unit)
    vectors = await _embed_units(embedder, [u.text for u in units], on_batch)
    if options.unit == "dialog" and options.dialog_context > 0:
        texts = conversation.context_texts(options.unit, options.dialog_context)
    elif options.unit == "observation" and options.observation_context != "none":
        texts = conversation.observation_context_texts(options.observation_context)
    else:
        return vectors
    context = await embedder.embed(list(texts))
    return [mean_direction([own, around]) for own, around in zip(vectors, context, strict=True)]


def unit_key_contexts(conversation: Conversation, options: EvalOptions) -> tuple[str, ...] | None:
    """What each unit's memory key carries beside its id (`context_key`) when `options.key_context`:
    for a dialog turn, the up to `options.dialog_context` turns before it in the session
    (`Conversation.preceding_texts`), then the up to `options.dialog_key_after` turns after it
    (`Conversation.following_texts`: what the turn was answered with); for an observation with
    `options.observation_context` "source", the turns it cites, each after up to
    `options.source_context` turns before it (`Conversation.source_texts`). None: keys carry no
    context."""
    assert options.unit == "observation" or options.unit == "dialog"
    if not options.key_context:
        return None
    if options.unit == "dialog":
        before = conversation.preceding_texts(options.unit, options.dialog_context)
        after = conversation.following_texts(options.unit, options.dialog_key_after)
        return tuple("\n".join(part for part in pair if part) for pair in zip(before, after, strict=True))
    if options.observation_context == "source":
        return conversation.source_texts(options.source_context)
    return None
