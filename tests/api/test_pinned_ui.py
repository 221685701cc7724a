"""The Pin buttons of the web UI: a reviewer pins on a memory's page, the person unpins on "My
memories"; both pages mark a pinned memory."""

from __future__ import annotations

from tests.api.test_the_gate_at_every_door import Gated, csrf, gated
from tests.factories import user_fact

__all__ = ["gated"]


async def test_the_pin_forms_of_the_memory_page_and_my_memories(gated: Gated) -> None:
    g = gated
    await g.fresh()
    memory_id = (
        await g.store.writes.upsert(user_fact(g.user, "allergy", "Is allergic to shellfish", status="active"))
    ).memory_id
    page = f"/ui/memories/{memory_id}"
    form = {"csrf_token": await csrf(g.admin_ui, page), "pinned": "yes", "from": "memory"}
    posted = await g.admin_ui.post(f"/ui/memories/{memory_id}/pin", data=form)
    assert posted.status_code == 303 and posted.headers["location"].startswith(page)
    shown = (await g.admin_ui.get(page)).text
    assert "data-pinned" in shown and ">Unpin<" in shown
    stored = await g.store.listing.get_by_id(memory_id)
    assert stored is not None and stored.pinned

    mine = (await g.user_ui.get("/ui/me")).text
    assert "data-pinned" in mine and ">Unpin<" in mine
    form = {"csrf_token": await csrf(g.user_ui, "/ui/me"), "pinned": "no"}
    posted = await g.user_ui.post(f"/ui/me/memories/{memory_id}/pin", data=form)
    assert posted.status_code == 303
    assert "data-pinned" not in (await g.user_ui.get("/ui/me")).text
    stored = await g.store.listing.get_by_id(memory_id)
    assert stored is not None and not stored.pinned
