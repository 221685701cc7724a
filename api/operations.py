"""What each control-plane action does, for the JSON API and the web UI alike: authorization
(`api.access`) around store calls. The one place with these rules; routes only translate HTTP."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from api import access
from api.errors import BadInput, Conflict, NotFound
from api.principal import Principal
from extraction.errors import PromptBudgetError
from extraction.prompt import PromptBudget, render_prompts
from extraction.types import ExtractionRequest, TranscriptMessage
from store.core.store import CoreStore
from store.errors import NothingPending
from store.model import (
    AuditEntry,
    ChannelConversation,
    ConversationQuery,
    Memory,
    MemorySettings,
    Page,
    RecallItem,
    Rejection,
    ReviewItem,
    ReviewQuery,
    Revision,
    Scope,
    SettingsLevel,
    SettingsRow,
    Status,
    UserExport,
    UserMemoryQuery,
)
from store.rules.admission import admit, refusal
from store.rules.pagination import BadCursor
from store.rules.policy import SETTINGS_FIELDS, check_settings_row, merge_settings
from store.services.context_recall import ContextRecall, hint_in_context, items_in_context
from store.services.settings_cache import SettingsCache
from store.team_scope import platform_scope, team_scope

Decision = Literal["approve", "reject", "edit"]
MAX_BULK = 200
MAX_LIMIT = 200
MAX_VALUE_CHARS = 2000

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryDetail:
    """A memory with its open proposal and audit history."""

    memory: Memory
    pending_revision: Revision | None
    history: tuple[AuditEntry, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class BulkResult:
    """The outcome of one id in a bulk decision."""

    id: uuid.UUID
    status: Literal["done", "not_found", "nothing_pending"]
    # with reject-and-forget: how many conversation turns were erased
    forgotten_turns: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class SettingsView:
    """One level's own values, the effective values there, and where each effective value comes from."""

    own: SettingsRow
    effective: MemorySettings
    inherited_from: dict[str, str]


def _limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise BadInput(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    return limit


def _value(value: str) -> str:
    # stored as every reader sees it: admitted (no invisible characters, secrets redacted), one line
    # (what the hint sends)
    admitted = admit(value, one_line=True)
    cleaned = admitted.text
    if not cleaned:
        raise BadInput("value is empty (or only invisible characters); to remove a memory, delete it")
    problem = refusal("value", admitted, fix="save the value without it")
    if problem is not None:
        raise BadInput(problem)
    if len(cleaned) > MAX_VALUE_CHARS:
        raise BadInput(f"value is {len(cleaned)} characters; the limit is {MAX_VALUE_CHARS}")
    return cleaned


async def _page(read: Awaitable[Page[T]]) -> Page[T]:
    """One page the store reads; a cursor it cannot read is the caller's bad input."""
    try:
        return await read
    except BadCursor as exc:
        raise BadInput(str(exc)) from exc


# -- review -------------------------------------------------------------------------------------


async def review_page(store: CoreStore, principal: Principal, query: ReviewQuery) -> Page[ReviewItem]:
    """The review queue the caller may see, newest first: `query`'s filters and page, within the
    teams the caller reviews (its own `teams` are not read)."""
    teams = access.require_reviewer(principal)
    # `cursor=` (empty): the first page
    mine = replace(query, teams=teams, limit=_limit(query.limit), cursor=query.cursor or None)
    return await _page(store.review.review_queue(mine))


async def waiting_counts(store: CoreStore, principal: Principal) -> dict[str, int]:
    """How many items wait for this reviewer, by scope."""
    return await store.review.pending_counts(access.require_reviewer(principal))


async def decide(
    store: CoreStore,
    principal: Principal,
    item_id: uuid.UUID,
    decision: Decision,
    value: str | None = None,
) -> Memory:
    """Approve, reject or edit-and-approve one review item (a pending memory or an open revision)."""
    access.require_reviewer(principal)
    memory = access.reviewable(principal, await store.review.review_target(item_id))
    if decision == "edit":
        try:
            edited = await store.review.edit(
                memory.id, _value(value or ""), actor=principal.actor, activate=True, pending_only=True
            )
        except NothingPending as exc:
            raise Conflict(f"memory {memory.id} has nothing pending to edit") from exc
        except ValueError as exc:  # the store's gate refused it (a key that names a secret)
            raise BadInput(str(exc)) from exc
        if edited is None:
            raise NotFound("no such memory")
        return edited
    act = store.review.approve if decision == "approve" else store.review.reject
    result = await act(memory.id, actor=principal.actor)
    if result is None:
        raise Conflict(f"memory {memory.id} has nothing pending to {decision}")
    return result


async def set_pinned(store: CoreStore, principal: Principal, memory_id: uuid.UUID, pinned: bool) -> Memory:
    """A reviewer pins or unpins a memory they may review (the same teams as approve and reject)."""
    access.require_reviewer(principal)
    memory = access.reviewable(principal, await store.listing.get_by_id(memory_id))
    changed = await store.pinning.set_pinned(memory.id, pinned, actor=principal.actor)
    if changed is None:
        raise NotFound("no such memory")
    return changed


async def reject_and_forget(store: CoreStore, principal: Principal, item_id: uuid.UUID) -> Rejection:
    """Reject one review item as `decide` does, and erase what was said that it comes from (the
    conversation turns its evidence cites, within the memory's team)."""
    access.require_reviewer(principal)
    memory = access.reviewable(principal, await store.review.review_target(item_id))
    rejection = await store.forgetting.reject_memory(memory.id, actor=principal.actor, forget=True)
    if rejection is None:
        raise Conflict(f"memory {memory.id} has nothing pending to reject")
    return rejection


async def bulk_decide(
    store: CoreStore,
    principal: Principal,
    decision: Literal["approve", "reject"],
    ids: Sequence[uuid.UUID],
    *,
    forget: bool = False,
) -> list[BulkResult]:
    """Approve or reject many items; each id gets its own outcome. With `forget` each rejection
    erases what was said that it comes from, as `reject_and_forget` does (an approval erases
    nothing, so `forget` means nothing there)."""
    access.require_reviewer(principal)
    if not ids:
        raise BadInput("ids is empty")
    if len(ids) > MAX_BULK:
        raise BadInput(f"at most {MAX_BULK} ids per bulk request, got {len(ids)}")
    results: list[BulkResult] = []
    for item_id in dict.fromkeys(ids):
        try:
            if forget and decision == "reject":
                rejection = await reject_and_forget(store, principal, item_id)
                results.append(
                    BulkResult(id=item_id, status="done", forgotten_turns=rejection.forgotten_turns)
                )
                continue
            await decide(store, principal, item_id, decision)
            results.append(BulkResult(id=item_id, status="done"))
        except NotFound:
            results.append(BulkResult(id=item_id, status="not_found"))
        except Conflict:
            results.append(BulkResult(id=item_id, status="nothing_pending"))
    return results


async def memory_detail(store: CoreStore, principal: Principal, memory_id: uuid.UUID) -> MemoryDetail:
    """One memory a reviewer may see, with its open proposal and audit history."""
    memory = access.reviewable(principal, await store.listing.get_by_id(memory_id))
    revisions = await store.review.pending_revisions(memory.id)
    return MemoryDetail(
        memory=memory,
        pending_revision=revisions[0] if revisions else None,
        history=tuple(await store.review.audit_log(memory.id)),
    )


# -- a person's own memories ----------------------------------------------------------------------


async def my_memories(
    store: CoreStore,
    principal: Principal,
    *,
    scope: Scope | None = None,
    persona_id: uuid.UUID | None = None,
    status: Status | None = None,
    team_id: uuid.UUID | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page[Memory]:
    """The caller's own memories, every status, newest first."""
    person = access.require_person(principal)
    if scope == "persona":
        raise BadInput("scope must be user or persona_user: persona memories are not about a person")
    query = UserMemoryQuery(
        user_id=person,
        scope=scope,
        persona_id=persona_id,
        status=status,
        team_id=team_id,
        limit=_limit(limit),
        cursor=cursor or None,  # `cursor=` (empty): the first page
    )
    return await _page(store.listing.list_for_user(query))


async def edit_mine(
    store: CoreStore,
    principal: Principal,
    memory_id: uuid.UUID,
    value: str | None,
    *,
    pinned: bool | None = None,
) -> Memory:
    """A person's change to their own memory: a new `value` (it becomes `active`), and/or `pinned`."""
    memory = access.own(principal, await store.listing.get_by_id(memory_id))
    changed: Memory | None = memory
    if value is not None:
        try:
            changed = await store.review.edit(memory.id, _value(value), actor=principal.actor, activate=True)
        except ValueError as exc:  # the store's gate refused it (a key that names a secret)
            raise BadInput(str(exc)) from exc
    if pinned is not None and changed is not None:
        changed = await store.pinning.set_pinned(memory.id, pinned, actor=principal.actor)
    if changed is None:
        raise NotFound("no such memory")
    return changed


async def reject_mine(
    store: CoreStore, principal: Principal, memory_id: uuid.UUID, *, forget: bool
) -> Rejection:
    """A person rejects one of their own memories, whatever its status: no assistant uses it and
    extraction does not propose the same value again; with `forget`, their turns it comes from are
    erased too."""
    person = access.require_person(principal)
    memory = access.own(principal, await store.listing.get_by_id(memory_id))
    rejection = await store.forgetting.reject_memory(
        memory.id, actor=principal.actor, forget=forget, person=person
    )
    if rejection is None:
        raise Conflict(f"memory {memory.id} is already rejected")
    return rejection


async def erase_mine(store: CoreStore, principal: Principal, memory_id: uuid.UUID) -> None:
    """Erase one of the caller's own memories, and their words it quotes wherever the team's other
    memories quote them."""
    person = access.require_person(principal)
    memory = access.own(principal, await store.listing.get_by_id(memory_id))
    if not await store.forgetting.erase_own(memory.id, actor=principal.actor, person=person):
        raise NotFound("no such memory")


async def erase_all_mine(store: CoreStore, principal: Principal) -> int:
    """Erase everything about the caller; how many memories went."""
    person = access.require_person(principal)
    return await store.erasure.erase_user(person, actor=principal.actor)


async def export_mine(store: CoreStore, principal: Principal) -> UserExport:
    """Every memory, revision and audit row about the caller."""
    return await store.listing.export_user(access.require_person(principal))


async def erase_user(store: CoreStore, principal: Principal, user_id: uuid.UUID) -> int:
    """Erase everything about a user, remembered conversations included (the platform's service key
    or an admin: everywhere; a team admin: what was said in their teams); how many memories went."""
    teams = access.require_eraser(principal)
    if teams is None:
        with platform_scope(f"erase user {user_id} by {principal.actor}"):
            return await store.erasure.erase_user(user_id, actor=principal.actor, teams=teams)
    return await store.erasure.erase_user(user_id, actor=principal.actor, teams=teams)


# -- a person's remembered conversations ----------------------------------------------------------


async def my_conversations(
    store: CoreStore,
    principal: Principal,
    *,
    persona_id: uuid.UUID | None = None,
    team_id: uuid.UUID | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page[ChannelConversation]:
    """The caller's remembered conversations, one per channel, latest first. Only the person
    reads them: no admin role browses another person's turns."""
    query = ConversationQuery(
        user_id=access.require_person(principal),
        persona_id=persona_id,
        team_id=team_id,
        limit=_limit(limit),
        cursor=cursor or None,  # `cursor=` (empty): the first page
    )
    return await _page(store.channels.list_channel_conversations(query))


async def erase_my_conversation(store: CoreStore, principal: Principal, channel_id: uuid.UUID) -> int:
    """Erase the caller's remembered turns of one channel; 404 when none of theirs is kept there."""
    erased = await store.channels.delete_channel_conversation(access.require_person(principal), channel_id)
    if erased == 0:
        raise NotFound("no such conversation")
    return erased


async def erase_my_conversations(store: CoreStore, principal: Principal) -> int:
    """Erase every remembered conversation of the caller (their memories stay); how many turns went."""
    return await store.turns.delete_conversations(access.require_person(principal))


# -- settings -------------------------------------------------------------------------------------


def _levels_above(level: SettingsLevel) -> tuple[SettingsLevel, ...]:
    return () if level == "global" else ("global",)


async def settings_view(
    store: CoreStore, principal: Principal, level: SettingsLevel, target: uuid.UUID | None
) -> SettingsView:
    """A level's own row, its effective values, and the source of each (this level, an upper
    level, or the deployment default). A persona's effective values are shown without a team."""
    access.check_settings_access(principal, level, target, write=False)
    own = await store.settings.settings_row(level, target)
    upper = [await store.settings.settings_row(above, None) for above in _levels_above(level)]
    rows = [*upper, own]
    effective = merge_settings([_row_mapping(row) for row in rows], store.settings.settings_defaults)
    inherited_from: dict[str, str] = {}
    for name in SETTINGS_FIELDS:
        source = "default"
        for row in rows:
            if getattr(row, name) is not None:
                source = row.level
        inherited_from[name] = source
    return SettingsView(own=own, effective=effective, inherited_from=inherited_from)


def _row_mapping(row: SettingsRow) -> dict[str, object]:
    return {name: getattr(row, name) for name in SETTINGS_FIELDS}


def check_prompt_override(prompt: str, *, max_input_tokens: int) -> None:
    """Render the override once with a sample conversation; BadInput naming the problem if it fails."""
    if "\x00" in prompt:
        raise BadInput("extraction_prompt contains a NUL character")
    request = ExtractionRequest(
        messages=(TranscriptMessage(role="user", content="I moved to Lisbon last month."),),
        allowed_scopes=("user", "persona", "persona_user"),
        prompt_override=prompt,
    )
    try:
        render_prompts(request, budget=PromptBudget(max_input_tokens=max_input_tokens))
    except PromptBudgetError as exc:
        raise BadInput(f"extraction_prompt does not fit the prompt budget: {exc}") from exc


async def put_settings(
    store: CoreStore,
    principal: Principal,
    level: SettingsLevel,
    target: uuid.UUID | None,
    values: SettingsRow,
    *,
    max_input_tokens: int,
    settings_cache: SettingsCache,
) -> SettingsView:
    """Replace a level's row (null fields inherit) after validating it; this process's
    `settings_cache` forgets what it kept, so its recall sees the change at once (other processes
    within PMEM_SETTINGS_CACHE_S)."""
    access.check_settings_access(principal, level, target, write=True)
    row = replace(values, level=level, target_id=target)
    if row.extraction_prompt is not None:
        # checked and stored as admitted: invisible characters removed, secrets redacted
        row = replace(row, extraction_prompt=admit(row.extraction_prompt).text)
    try:
        check_settings_row(row)
    except ValueError as exc:
        raise BadInput(str(exc)) from exc
    if row.extraction_prompt is not None and row.extraction_prompt.strip():
        check_prompt_override(row.extraction_prompt, max_input_tokens=max_input_tokens)
    await store.settings.replace_settings(row)
    settings_cache.forget()
    return await settings_view(store, principal, level, target)


# -- the platform ---------------------------------------------------------------------------------


async def platform_recall(
    store: CoreStore, principal: Principal, asked: ContextRecall, settings: SettingsCache
) -> list[RecallItem]:
    """Recall (memories, then turns, as `include` says) for the user a service acts for (same as
    `pmem recall --json`), with the context's settings from `settings`."""
    access.require_service(principal)
    with team_scope(access.request_scope(principal, asked.team_id)):
        return await items_in_context(store, replace(asked, limit=_limit(asked.limit)), settings=settings)


async def platform_hint(
    store: CoreStore,
    principal: Principal,
    asked: ContextRecall,
    settings: SettingsCache,
    *,
    max_tokens: int | None,
    most_tokens: int,
) -> str:
    """The prompt hint for the next message (`hint_in_context`) within `max_tokens`, at most
    `most_tokens` (PMEM_HINT_MAX_TOKENS; None: that)."""
    access.require_service(principal)
    budget = most_tokens if max_tokens is None else min(max_tokens, most_tokens)
    asked = replace(asked, limit=_limit(asked.limit))
    with team_scope(access.request_scope(principal, asked.team_id)):
        return await hint_in_context(store, asked, max_tokens=budget, settings=settings)
