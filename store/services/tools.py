"""LLM function tools over the memory store: OpenAI function-tool JSON schemas plus async handlers
bound to one conversation's context (user, optional persona, store).

The tools:

* `memory_save(key, value, confidence=1.0)` — an explicit save: `active` at once, or
  `pending_review` where the setting `review_tool_saves` is on (a model, not the user, decided to
  call the tool). Scope follows whether a persona is active: `persona_user` (owner = persona,
  user_id = user), else `user`.
* `memory_recall(query="", max_results=20)` — hybrid recall over every scope the user may read.
* `conversation_search(query, max_results=5)` — the user's own earlier messages (and the replies)
  said in this context (same persona or none, same team), when conversation memory is on.

Bot-plan tools (`remember` / `recall` / `forget`, facts keyed by subject) map onto the same rows:

* The subject becomes part of the key. A subject naming the user ("me", "user", "I", "myself", the
  user's id, or empty) adds nothing: `remember("me", "diet", "vegan")` is `memory_save("diet",
  "vegan")`. Any other subject prefixes the key: `remember("Alice", "birthday", "3 March")` stores
  key `Alice / birthday`. The hint then reads `- Alice / birthday: 3 March`.
* Facts are saved where `memory_save` saves (never `persona` scope: what one user tells a bot must
  not become visible to the persona's other users).
* `recall(subject, key)` looks the exact key up across the readable scopes (most specific wins);
  without a key it lists the subject's facts; when nothing matches exactly it returns related
  memories from hybrid recall so the model can still answer.
* `forget(subject, key)` hard-deletes the key from the scopes the user owns (persona_user and
  user), whatever its status, with the user's turns its evidence cites and those lines wherever
  the team's other memories quote them; the audit trail keeps a record of the deletion.

The context's team bounds every tool: a save carries the team, lookups and recall see only memories
of no team or of that team, and `forget` deletes only what the user owns there. Where memory is off
for the team or persona, nothing is saved or recalled.

Handlers return JSON-serialisable dicts. `MemoryTools.handle_tool_call(name, arguments_json)`
dispatches a model's tool call and raises `ToolCallError` (message fit to send back to the model)
for an unknown tool or bad arguments.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from store.core.store import CoreStore
from store.model import SCOPE_PRIORITY, Memory, MemoryFilter, NewMemory, OwnerRef, RecallHit, Status, Turn
from store.rules.admission import admit, refusal, secret_key_refusal
from store.rules.recall import normalize_key, resolve_scopes, writable_owner
from store.services.context_recall import recall_in_context
from store.services.json_shapes import memory_json, turn_json

log = logging.getLogger("pmem.tools")

MAX_KEY_CHARS = 120
MAX_VALUE_CHARS = 2000
MAX_RESULTS = 100
SUBJECT_SEPARATOR = " / "
_SELF_SUBJECTS = frozenset({"", "me", "i", "myself", "self", "user", "the user"})


class ToolCallError(ValueError):
    """A tool call that cannot run (unknown tool, malformed or invalid arguments)."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class MemorySaveArgs(_Args):
    """Arguments of `memory_save`."""

    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS)
    value: str = Field(min_length=1, max_length=MAX_VALUE_CHARS)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)


class MemoryRecallArgs(_Args):
    """Arguments of `memory_recall`."""

    query: str = Field(default="", max_length=2000)
    max_results: int = Field(default=20, ge=1, le=MAX_RESULTS)


class ConversationSearchArgs(_Args):
    """Arguments of `conversation_search`."""

    query: str = Field(min_length=1, max_length=2000)
    max_results: int = Field(default=5, ge=1, le=MAX_RESULTS)


class RememberArgs(_Args):
    """Arguments of `remember`."""

    subject: str = Field(default="", max_length=MAX_KEY_CHARS)
    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS)
    value: str = Field(min_length=1, max_length=MAX_VALUE_CHARS)


class RecallArgs(_Args):
    """Arguments of `recall`."""

    subject: str = Field(default="", max_length=MAX_KEY_CHARS)
    key: str | None = Field(default=None, max_length=MAX_KEY_CHARS)


class ForgetArgs(_Args):
    """Arguments of `forget`."""

    subject: str = Field(default="", max_length=MAX_KEY_CHARS)
    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS)


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


_SUBJECT = {
    "type": "string",
    "description": 'Who or what the fact is about: "me" for the user you are talking to, or a name.',
}
TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "memory_save": _function(
        "memory_save",
        "Save a lasting fact about the user (a preference, detail or piece of context) so it is "
        "remembered in future conversations. Use a short key of 2-6 words.",
        {
            "key": {"type": "string", "description": "Short label of 2-6 words, e.g. 'preferred language'."},
            "value": {"type": "string", "description": "The fact itself, one sentence."},
            "confidence": {
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "description": "How sure you are, 0-1 (default 1.0).",
            },
        },
        ["key", "value"],
    ),
    "memory_recall": _function(
        "memory_recall",
        "Search what is remembered about the user. Without a query, returns the most important memories.",
        {
            "query": {"type": "string", "description": "What to look for, in natural language (optional)."},
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_RESULTS,
                "description": "Maximum number of memories (default 20).",
            },
        },
        [],
    ),
    "conversation_search": _function(
        "conversation_search",
        "Search what the user said in earlier conversations with you (their exact words, dated), "
        "for details no saved memory holds.",
        {
            "query": {"type": "string", "description": "What to look for, in natural language."},
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_RESULTS,
                "description": "Maximum number of messages (default 5).",
            },
        },
        ["query"],
    ),
    "remember": _function(
        "remember",
        "Remember a fact about someone or something for future conversations.",
        {
            "subject": _SUBJECT,
            "key": {"type": "string", "description": "What aspect, e.g. 'birthday' or 'favourite food'."},
            "value": {"type": "string", "description": "The fact."},
        },
        ["subject", "key", "value"],
    ),
    "recall": _function(
        "recall",
        "Look up remembered facts about someone or something; omit key to list all of them.",
        {
            "subject": _SUBJECT,
            "key": {"type": "string", "description": "The aspect to look up (optional)."},
        },
        ["subject"],
    ),
    "forget": _function(
        "forget",
        "Forget (delete) a remembered fact about someone or something.",
        {"subject": _SUBJECT, "key": {"type": "string", "description": "The aspect to forget."}},
        ["subject", "key"],
    ),
}
TOOL_NAMES: tuple[str, ...] = tuple(TOOL_SCHEMAS)


def tool_schemas(names: tuple[str, ...] = TOOL_NAMES) -> list[dict[str, Any]]:
    """OpenAI `tools=[…]` entries for the named tools (all of them by default)."""
    unknown = [n for n in names if n not in TOOL_SCHEMAS]
    if unknown:
        raise ToolCallError(f"unknown memory tool(s) {unknown}; available: {', '.join(TOOL_NAMES)}")
    return [json.loads(json.dumps(TOOL_SCHEMAS[n])) for n in names]


def is_self_subject(subject: str, user_id: uuid.UUID) -> bool:
    """Whether a subject names the user being talked to."""
    folded = " ".join(subject.lower().split())
    return folded in _SELF_SUBJECTS or folded == str(user_id)


def fact_key(subject: str, key: str, user_id: uuid.UUID) -> str:
    """The memories key for a bot-plan fact: the key itself for the user, `subject / key` otherwise
    (each admitted on one line, as the store keeps keys, so a lookup finds what a save stored)."""
    key = admit(key, one_line=True).text
    subject = admit(subject, one_line=True).text
    if is_self_subject(subject, user_id):
        return key
    return f"{subject}{SUBJECT_SEPARATOR}{key}"


# what a model is shown of a memory: its words and how sure, not the bookkeeping (fewer tokens)
MEMORY_VIEW_FIELDS = ("id", "key", "value", "scope", "confidence", "updated_at")


def memory_view(memory: Memory, score: float | None = None) -> dict[str, Any]:
    """What a tool returns for one memory: a few fields of its JSON (`memory_json`)."""
    shape = memory_json(memory)
    view: dict[str, Any] = {name: shape[name] for name in MEMORY_VIEW_FIELDS}
    view["confidence"] = round(memory.confidence, 3)
    if score is not None:
        view["score"] = round(score, 6)
    return view


def turn_view(turn: Turn, score: float | None = None) -> dict[str, Any]:
    """What a tool returns for one earlier message: who said it, when, and in which conversation
    (its channel, as the control plane names conversations), from its JSON (`turn_json`)."""
    shape = turn_json(turn)
    view: dict[str, Any] = {
        "conversation_id": shape["channel_id"],
        "role": shape["role"],
        "speaker": shape["speaker"],
        "text": shape["text"],
        "at": shape["at"],
    }
    if score is not None:
        view["score"] = round(score, 6)
    return view


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """Whose conversation the tools act for."""

    user_id: uuid.UUID
    persona_id: uuid.UUID | None
    store: CoreStore
    team_id: uuid.UUID | None = None  # the conversation's team: saves carry it, recall and search stay in it
    source_channel_id: uuid.UUID | None = None
    actor: str | None = None  # audit actor; default "user:<user_id>"

    @property
    def audit_actor(self) -> str:
        """The actor recorded in the audit trail."""
        return self.actor or f"user:{self.user_id}"


class MemoryTools:
    """The memory tools bound to one context."""

    def __init__(self, context: ToolContext) -> None:
        self.context = context
        self._handlers: dict[str, tuple[type[_Args], Callable[[Any], Awaitable[dict[str, Any]]]]] = {
            "memory_save": (MemorySaveArgs, self._memory_save),
            "memory_recall": (MemoryRecallArgs, self._memory_recall),
            "conversation_search": (ConversationSearchArgs, self._conversation_search),
            "remember": (RememberArgs, self._remember),
            "recall": (RecallArgs, self._recall),
            "forget": (ForgetArgs, self._forget),
        }

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI tool schemas of every tool this object handles."""
        return tool_schemas()

    async def handle_tool_call(self, name: str, arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """Run a model's tool call (`arguments` as the JSON string the API returns, or a dict)."""
        if name not in self._handlers:
            raise ToolCallError(f"unknown tool {name!r}; memory tools are: {', '.join(self._handlers)}")
        if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
            raw: Any = {}
        elif isinstance(arguments, str):
            try:
                raw = json.loads(arguments)
            except json.JSONDecodeError as exc:
                raise ToolCallError(
                    f"arguments for {name} are not valid JSON: {exc.msg} at {exc.pos}"
                ) from exc
        else:
            raw = dict(arguments)
        if not isinstance(raw, dict):
            raise ToolCallError(f"arguments for {name} must be a JSON object, got {type(raw).__name__}")
        model, handler = self._handlers[name]
        try:
            args = model.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in exc.errors()
            )
            raise ToolCallError(f"bad arguments for {name}: {problems}") from exc
        return await handler(args)

    # -- memory tools --------------------------------------------------------------------------------

    async def memory_save(self, key: str, value: str, confidence: float = 1.0) -> dict[str, Any]:
        """Save an explicit (active) fact about the user in the persona_user or user scope."""
        return await self.handle_tool_call(
            "memory_save", {"key": key, "value": value, "confidence": confidence}
        )

    async def memory_recall(self, query: str = "", max_results: int = 20) -> dict[str, Any]:
        """Hybrid recall over every scope the user can read."""
        return await self.handle_tool_call("memory_recall", {"query": query, "max_results": max_results})

    async def conversation_search(self, query: str, max_results: int = 5) -> dict[str, Any]:
        """Earlier turns of this user's conversations in this context that match the query."""
        return await self.handle_tool_call(
            "conversation_search", {"query": query, "max_results": max_results}
        )

    # -- subject tools -------------------------------------------------------------------------------

    async def remember(self, subject: str, key: str, value: str) -> dict[str, Any]:
        """Save a fact about a subject (see the module docstring for the key mapping)."""
        return await self.handle_tool_call("remember", {"subject": subject, "key": key, "value": value})

    async def recall(self, subject: str, key: str | None = None) -> dict[str, Any]:
        """Look up facts about a subject."""
        return await self.handle_tool_call("recall", {"subject": subject, "key": key})

    async def forget(self, subject: str, key: str) -> dict[str, Any]:
        """Delete a fact about a subject from the user's own scopes."""
        return await self.handle_tool_call("forget", {"subject": subject, "key": key})

    # -- handlers -------------------------------------------------------------------------------

    async def _save(self, key: str, value: str, confidence: float) -> dict[str, Any]:
        ctx = self.context
        # the gate for stored text, before anything is written: a key or value holding nothing but
        # a secret is refused with the fix, one holding a secret among words is saved redacted
        admitted = {"key": admit(key, one_line=True), "value": admit(value, one_line=True)}
        for field, text in admitted.items():
            if not text.text:
                raise ToolCallError("key and value need visible characters; say the fact in words")
            problem = refusal(field, text)
            if problem is not None:
                raise ToolCallError(problem)
        named = secret_key_refusal(admitted["key"].text)
        if named is not None:
            raise ToolCallError(named)
        key, value = admitted["key"].text, admitted["value"].text
        redacted = [kind for text in admitted.values() for kind in text.secrets]
        if redacted:
            log.info(
                "tool save: %d secrets redacted (%s)",
                len(redacted),
                ", ".join(sorted(set(redacted))),
                extra={"redacted": len(redacted)},
            )
        policy = await ctx.store.settings.settings_for(ctx.team_id, ctx.persona_id)
        if not policy.enabled:
            return {
                "saved": False,
                "reason": "memory is turned off in this conversation's context",
                "key": key,
            }
        status: Status = "pending_review" if policy.review_tool_saves else "active"
        owner = writable_owner(ctx.user_id, ctx.persona_id)
        memory = NewMemory(
            scope=owner.scope,
            owner_id=owner.owner_id,
            user_id=owner.user_id,
            key=key,
            value=value,
            confidence=confidence,
            status=status,
            source_channel_id=ctx.source_channel_id,
            team_id=ctx.team_id,
        )
        try:
            result = await ctx.store.writes.upsert(memory, actor=ctx.audit_actor)
        except ValueError as exc:  # the store's own gate (`admit_memory`) refused it: say why
            raise ToolCallError(str(exc)) from exc
        saved = {
            "saved": True,
            "id": str(result.memory_id),
            "action": result.action,
            "scope": owner.scope,
            "status": status,
            "key": key,
        }
        if redacted:
            # tell the model: what it saved is not what it sent
            saved["redacted"] = sorted(set(redacted))
        return saved

    async def _memory_save(self, args: MemorySaveArgs) -> dict[str, Any]:
        return await self._save(" ".join(args.key.split()), args.value, args.confidence)

    async def _memory_recall(self, args: MemoryRecallArgs) -> dict[str, Any]:
        hits = await self._recall_hits(args.query, args.max_results)
        return {"count": len(hits), "memories": [memory_view(h.memory, h.score) for h in hits]}

    async def _conversation_search(self, args: ConversationSearchArgs) -> dict[str, Any]:
        ctx = self.context
        policy = await ctx.store.settings.settings_for(ctx.team_id, ctx.persona_id)
        if not (policy.enabled and policy.history):
            return {"count": 0, "messages": [], "note": "conversation memory is off here"}
        hits = await ctx.store.turns.recall_turns(
            ctx.user_id, ctx.persona_id, args.query, args.max_results, team_id=ctx.team_id
        )
        return {"count": len(hits), "messages": [turn_view(h.turn, h.score) for h in hits]}

    async def _recall_hits(self, query: str, limit: int) -> list[RecallHit]:
        ctx = self.context
        return await recall_in_context(
            ctx.store,
            user_id=ctx.user_id,
            persona_id=ctx.persona_id,
            team_id=ctx.team_id,
            query=query,
            limit=limit,
        )

    async def _remember(self, args: RememberArgs) -> dict[str, Any]:
        return await self._save(fact_key(args.subject, args.key, self.context.user_id), args.value, 1.0)

    async def _find(
        self, owners: tuple[OwnerRef, ...], *, key: str | None, prefix: str | None
    ) -> list[Memory]:
        found: list[Memory] = []
        for owner in owners:
            found += await self.context.store.listing.list_memories(
                MemoryFilter(
                    scope=owner.scope,
                    owner_id=owner.owner_id,
                    user_id=owner.user_id,
                    status="active",
                    key=key,
                    key_prefix=prefix,
                    limit=MAX_RESULTS,
                    team_context=True,
                    team_id=self.context.team_id,
                )
            )
        return found

    async def _recall(self, args: RecallArgs) -> dict[str, Any]:
        ctx = self.context
        owners = resolve_scopes(ctx.user_id, ctx.persona_id)
        if args.key:
            stored = fact_key(args.subject, args.key, ctx.user_id)
            matches = await self._find(owners, key=stored, prefix=None)
        elif is_self_subject(args.subject, ctx.user_id):
            hits = await self._recall_hits("", 20)
            matches = [h.memory for h in hits]
        else:
            prefix = f"{admit(args.subject, one_line=True).text}{SUBJECT_SEPARATOR}"
            matches = await self._find(owners, key=None, prefix=prefix)
        facts = _most_specific(matches)
        result: dict[str, Any] = {"found": bool(facts), "facts": [memory_view(m) for m in facts]}
        if not facts:
            query = " ".join(part for part in (args.subject, args.key or "") if part)
            related = await self._recall_hits(query, 5)
            result["related"] = [memory_view(h.memory, h.score) for h in related]
        return result

    async def _forget(self, args: ForgetArgs) -> dict[str, Any]:
        ctx = self.context
        stored = fact_key(args.subject, args.key, ctx.user_id)
        own = [writable_owner(ctx.user_id, ctx.persona_id)]
        if ctx.persona_id is not None:
            own.append(OwnerRef(scope="user", owner_id=ctx.user_id))
        deleted = 0
        for owner in own:
            rows = await ctx.store.listing.list_memories(
                MemoryFilter(
                    scope=owner.scope,
                    owner_id=owner.owner_id,
                    user_id=owner.user_id,
                    key=stored,
                    team_context=True,
                    team_id=ctx.team_id,
                )
            )
            for memory in rows:
                # the person's words it was drawn from go too: the turns of theirs its evidence
                # cites, and those lines wherever the team's other memories quote them
                await ctx.store.forgetting.reject_memory(
                    memory.id, actor=ctx.audit_actor, forget=True, person=ctx.user_id
                )
                deleted += int(await ctx.store.erasure.delete(memory.id, actor=ctx.audit_actor))
        return {"forgotten": deleted, "key": stored}


def _most_specific(memories: list[Memory]) -> list[Memory]:
    """One memory per key, the most specific scope first (persona_user > persona > user)."""
    best: dict[str, Memory] = {}
    for memory in memories:
        slot = normalize_key(memory.key)
        current = best.get(slot)
        if current is None or SCOPE_PRIORITY[memory.scope] < SCOPE_PRIORITY[current.scope]:
            best[slot] = memory
    return sorted(best.values(), key=lambda m: (m.key.lower(), SCOPE_PRIORITY[m.scope]))
