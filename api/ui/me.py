"""The web UI's "My memories" page: a person's own memories and conversations, edited, rejected,
erased or downloaded."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request, Response

from api import operations as ops
from api.errors import BadInput
from api.principal import Principal
from api.schemas import export_json
from api.ui import core
from api.ui.common import (
    NOTICES,
    SecureRoute,
    Session,
    changed,
    edit_refused_page,
    id_or_not_found,
    names_of,
    redirect_to,
    refusals_answered,
    render_page,
    require_form,
    require_session,
    store_of,
)
from store.core.store import CoreStore
from store.model import Memory

MY_CONVERSATIONS = 200  # the newest shown on "My memories"; the download has every one
MY_PAGES = 10  # "My memories" shows up to 2000; the download has everything

router = APIRouter(prefix="/ui", route_class=SecureRoute, include_in_schema=False)


async def _my_page(
    request: Request, session: Session, *, errors: dict[str, str], notice: str | None
) -> Response:
    items: list[Memory] = []
    cursor: str | None = None
    for _ in range(MY_PAGES):
        page = await ops.my_memories(store_of(request), session.principal, limit=200, cursor=cursor)
        items.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    remembered = await ops.my_conversations(store_of(request), session.principal, limit=MY_CONVERSATIONS)
    personas = {str(item.owner_id) for item in items if item.scope == "persona_user"}
    for conversation in remembered.items:
        personas.update(str(p) for p in core.field_of(conversation, "persona_ids", ()) or () if p is not None)
    names = await names_of(request, {"persona": personas})
    groups = core.group_my_memories(items, names)
    total = sum(len(g.cards) for g in groups)
    conversations = [core.conversation_row(c, names) for c in remembered.items]
    return await render_page(
        request,
        session,
        "me.html",
        title="My memories",
        notice=notice,
        groups=groups,
        total=total,
        conversations=conversations,
        more_conversations=remembered.next_cursor is not None,
        errors=errors,
        status_code=422 if errors else 200,
    )


@router.get("/me")
async def me(request: Request) -> Response:
    session = await require_session(request)
    notice = NOTICES.get(request.query_params.get("notice", ""))
    return await _my_page(request, session, errors={}, notice=notice)


@router.post("/me/memories/{memory_id}/edit")
async def me_edit(request: Request, memory_id: str) -> Response:
    session, form = await require_form(request)
    value = str(form.get("value") or "")
    try:
        async with refusals_answered(request, session):
            memory = id_or_not_found(memory_id)
            edited = await ops.edit_mine(store_of(request), session.principal, memory, value)
    except BadInput as exc:
        return await edit_refused_page(
            request,
            session,
            exc,
            title="Correct a memory",
            action=f"/ui/me/memories/{memory_id}/edit",
            value=value,
            back="",
        )
    message = "Saved. Assistants use the corrected value from now on."
    return changed(request, redirect_to("/ui/me", notice="saved"), message=message, value=edited.value)


@router.post("/me/memories/{memory_id}/pin")
async def me_pin(request: Request, memory_id: str) -> Response:
    """The person pins (`pinned=yes`) or unpins one of their own memories."""
    session, form = await require_form(request)
    pinned = form.get("pinned") == "yes"
    async with refusals_answered(request, session):
        pinned_now = await ops.edit_mine(
            store_of(request), session.principal, id_or_not_found(memory_id), None, pinned=pinned
        )
    notice = "pinned" if pinned else "unpinned"
    back = redirect_to("/ui/me", notice=notice)
    return changed(request, back, message=NOTICES[notice], pinned=pinned_now.pinned)


async def _erase_mine(
    request: Request,
    raw_id: str,
    erase: Callable[[CoreStore, Principal, uuid.UUID], Awaitable[object]],
    *,
    message: str,
    notice: str,
) -> Response:
    """Erase one of the signed-in person's own things (`erase(store, principal, id)`)."""
    session, _ = await require_form(request)
    async with refusals_answered(request, session):
        await erase(store_of(request), session.principal, id_or_not_found(raw_id))
    return changed(request, redirect_to("/ui/me", notice=notice), message=message)


async def _erase_all_mine(
    request: Request,
    confirm: str,
    erase: Callable[[CoreStore, Principal], Awaitable[object]],
    *,
    notice: str,
) -> Response:
    """Erase all of the signed-in person's memories or conversations, once the `confirm` box is ticked."""
    session, form = await require_form(request)
    if form.get(confirm) != "yes":
        errors = {confirm: "Tick this box to confirm; nothing was deleted."}
        return await _my_page(request, session, errors=errors, notice=None)
    await erase(store_of(request), session.principal)
    return redirect_to("/ui/me", notice=notice)


@router.post("/me/memories/{memory_id}/reject")
async def me_reject(request: Request, memory_id: str) -> Response:
    """Reject one of the person's own memories; with `forget=yes`, and erase what they said there."""
    session, form = await require_form(request)
    forget = form.get("forget") == "yes"
    async with refusals_answered(request, session):
        await ops.reject_mine(store_of(request), session.principal, id_or_not_found(memory_id), forget=forget)
    notice = "forgotten_mine" if forget else "rejected"
    return changed(request, redirect_to("/ui/me", notice=notice), message=NOTICES[notice])


@router.post("/me/memories/{memory_id}/delete")
async def me_delete(request: Request, memory_id: str) -> Response:
    message = "Deleted. It is erased, not just hidden."
    return await _erase_mine(request, memory_id, ops.erase_mine, message=message, notice="deleted")


@router.post("/me/delete-all")
async def me_delete_all(request: Request) -> Response:
    return await _erase_all_mine(request, "confirm", ops.erase_all_mine, notice="deleted_all")


@router.post("/me/conversations/{channel_id}/delete")
async def me_delete_conversation(request: Request, channel_id: str) -> Response:
    message = NOTICES["conversation_deleted"]
    return await _erase_mine(
        request, channel_id, ops.erase_my_conversation, message=message, notice="conversation_deleted"
    )


@router.post("/me/conversations/delete-all")
async def me_delete_conversations(request: Request) -> Response:
    return await _erase_all_mine(
        request, "confirm_conversations", ops.erase_my_conversations, notice="conversations_deleted"
    )


@router.get("/me/export")
async def me_export(request: Request) -> Response:
    session = await require_session(request)
    data = export_json(await ops.export_mine(store_of(request), session.principal))
    body = json.dumps(data, indent=2, ensure_ascii=False)
    return Response(
        body,
        media_type="application/json",
        headers={"Content-Disposition": 'attachment; filename="my-memories.json"'},
    )


# --- settings ---------------------------------------------------------------------------------
