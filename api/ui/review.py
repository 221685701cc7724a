"""The web UI's review pages: the queue of pending memories, approve / reject / edit one or many, and
one memory's detail with its history."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request, Response

from api import operations as ops
from api.errors import BadInput, Forbidden
from api.ui import core
from api.ui.common import (
    NOTICES,
    SecureRoute,
    back_to,
    changed,
    edit_refused_page,
    forbidden_page,
    id_or_not_found,
    json_response,
    message_page,
    names_of,
    queue_waiting,
    redirect_to,
    refusals_answered,
    refused_page,
    render_page,
    require_form,
    require_session,
    role_of,
    store_of,
    to_queue,
    wants_json,
)
from store.model import Page, ReviewItem

QUEUE_ERRORS = {"none_selected": "Select at least one item first."}

router = APIRouter(prefix="/ui", route_class=SecureRoute, include_in_schema=False)


@router.get("/review")
async def review(request: Request) -> Response:
    session = await require_session(request)
    raw = dict(request.query_params)
    filters, errors = core.parse_review_filters(raw)
    queue_error = QUEUE_ERRORS.get(raw.get("error", ""))
    if queue_error:
        errors["bulk"] = queue_error
    try:
        query = filters.review_query(limit=25)
        page: Page[ReviewItem] = await ops.review_page(store_of(request), session.principal, query)
        waiting = await queue_waiting(request, session)
    except Forbidden:
        return await forbidden_page(request, session)
    except BadInput as exc:
        errors["cursor" if "cursor" in str(exc) else "team_id"] = str(exc)
        page = Page(items=(), next_cursor=None)
        waiting = 0
    rows = [core.review_row(item) for item in core.field_of(page, "items", [])]
    teams = [str(t) for t in getattr(session.principal, "teams", ())]
    wanted = core.review_ids(rows)
    wanted["team"].update(teams)
    names = await names_of(request, wanted)
    return await render_page(
        request,
        session,
        "review.html",
        title="Review queue",
        notice=NOTICES.get(raw.get("notice", "")),
        rows=rows,
        next_cursor=core.field_of(page, "next_cursor"),
        filters=filters,
        errors=errors,
        raw=raw,
        back=filters.query(cursor=filters.cursor),
        waiting=waiting,
        team_choices=teams if role_of(session.principal) == "team_admin" else [],
        scope_choices=core.SCOPE_CHOICES,
        names=names,
    )


async def _decide(request: Request, item_id: str, action: ops.Decision) -> Response:
    session, form = await require_form(request)
    back = back_to(form)
    value = str(form.get("value") or "")
    forget = action == "reject" and form.get("forget") == "yes"
    try:
        async with refusals_answered(request, session):
            item = id_or_not_found(item_id)
            if forget:
                decided = (await ops.reject_and_forget(store_of(request), session.principal, item)).memory
            else:
                decided = await ops.decide(store_of(request), session.principal, item, action, value)
    except BadInput as exc:
        return await edit_refused_page(
            request,
            session,
            exc,
            title="Edit before approving",
            action=f"/ui/review/{item_id}/edit",
            value=value,
            back=back,
        )
    notice = (
        "forgotten" if forget else {"approve": "approved", "reject": "rejected", "edit": "edited"}[action]
    )
    back_page = to_queue(back, notice=notice)
    return changed(request, back_page, message=NOTICES[notice], done=[item_id], value=decided.value)


@router.post("/review/{item_id}/approve")
async def approve(request: Request, item_id: str) -> Response:
    return await _decide(request, item_id, "approve")


@router.post("/review/{item_id}/reject")
async def reject(request: Request, item_id: str) -> Response:
    return await _decide(request, item_id, "reject")


@router.post("/review/{item_id}/edit")
async def edit(request: Request, item_id: str) -> Response:
    return await _decide(request, item_id, "edit")


@router.post("/review/bulk")
async def bulk(request: Request) -> Response:
    session, form = await require_form(request)
    back = back_to(form)
    action = str(form.get("decision") or "")
    ids, _bad = core.parse_ids(form.get("ids") or [])
    if not ids or action not in ("approve", "reject"):
        message = QUEUE_ERRORS["none_selected"] if not ids else "Choose approve or reject."
        if wants_json(request):
            return json_response(422, error=message, field="bulk")
        return to_queue(back, error="none_selected")
    try:
        decision: Literal["approve", "reject"] = "approve" if action == "approve" else "reject"
        results = await ops.bulk_decide(store_of(request), session.principal, decision, ids)
    except Forbidden:
        return await refused_page(request, session, Forbidden("not allowed"))
    except BadInput as exc:
        if wants_json(request):
            return json_response(422, error=str(exc), field="bulk")
        return await message_page(request, session, title="Not done", lines=(str(exc),), status_code=422)
    done = [str(r.id) for r in results if r.status == "done"]
    failed = [str(r.id) for r in results if r.status != "done"]
    verb = "Approved" if action == "approve" else "Rejected"
    message = f"{verb} {core.plural(len(done), 'item')}."
    if failed:
        message += f" {core.plural(len(failed), 'item')} could not be decided (already decided or not yours)."
    return changed(request, to_queue(back, notice="bulk"), message=message, done=done, failed=failed)


@router.get("/memories/{memory_id}")
async def memory_detail(request: Request, memory_id: str) -> Response:
    session = await require_session(request)
    async with refusals_answered(request, session):
        detail = await ops.memory_detail(store_of(request), session.principal, id_or_not_found(memory_id))
    memory = detail.memory
    history = [
        {
            "when": core.show_time(entry.at),
            "action": core.AUDIT_ACTIONS.get(entry.action, entry.action),
            "actor": entry.actor,
            "old_value": entry.old_value,
            "new_value": entry.new_value,
        }
        for entry in detail.history
    ]
    view = {
        "id": str(memory.id),
        "key": memory.key,
        "value": memory.value,
        "status": memory.status,
        "scope": memory.scope,
        "confidence": core.show_confidence(memory.confidence),
        "created": core.show_time(memory.created_at),
        "updated": core.show_time(memory.updated_at),
        "channel_id": memory.source_channel_id,
        "owner_id": memory.owner_id,
        "user_id": memory.user_id,
        "team_id": memory.team_id,
        "pinned": memory.pinned,
        **core.said_fields(memory),
    }
    names = await names_of(
        request,
        {
            "team": [memory.team_id] if memory.team_id else [],
            "user": [memory.user_id or memory.owner_id] if memory.scope != "persona" else [],
            "persona": [memory.owner_id] if memory.scope != "user" else [],
        },
    )
    proposal = detail.pending_revision
    decide_id = (
        proposal.id if proposal is not None else (memory.id if memory.status == "pending_review" else None)
    )
    return await render_page(
        request,
        session,
        "memory.html",
        title=f"Memory “{view['key']}”",
        notice=NOTICES.get(request.query_params.get("notice", "")),
        memory=view,
        names=names,
        history=history,
        proposal=proposal
        and {
            "old_value": proposal.old_value,
            "new_value": proposal.new_value,
            "confidence": core.show_confidence(proposal.confidence),
            "created": core.show_time(proposal.created_at),
            **core.said_fields(proposal),
        },
        decide_id=decide_id,
    )


@router.post("/memories/{memory_id}/pin")
async def pin(request: Request, memory_id: str) -> Response:
    """A reviewer pins (`pinned=yes`) or unpins a memory; back to the queue, or to the memory's page
    when the form came from there (`from=memory`)."""
    session, form = await require_form(request)
    pinned = form.get("pinned") == "yes"
    async with refusals_answered(request, session):
        memory = id_or_not_found(memory_id)
        pinned_now = await ops.set_pinned(store_of(request), session.principal, memory, pinned)
    notice = "pinned" if pinned else "unpinned"
    if form.get("from") == "memory":
        back_page = redirect_to(f"/ui/memories/{pinned_now.id}", notice=notice)
    else:
        back_page = to_queue(back_to(form), notice=notice)
    return changed(request, back_page, message=NOTICES[notice], pinned=pinned_now.pinned)
