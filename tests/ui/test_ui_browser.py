"""The web UI in a real headless Chromium against `pmem serve` (a real process on loopback) over
a real Postgres: sign-in per role, the review queue's actions, a user's own memories, what a
role may not reach, the session cookie, CSRF, and axe + screenshots of every page."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.ui import harness as h
from tests.ui.browser import DESKTOP, HOW_TO_INSTALL, PHONE, axe_findings, screenshot

expect = pytest.importorskip("playwright.sync_api", reason=HOW_TO_INSTALL).expect

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def database(new_database: Callable[[], str]) -> str:
    url = new_database()
    h.seed(url)
    return url


@pytest.fixture(scope="module")
def base_url(database: str) -> Iterator[str]:
    with h.serving(database) as base:
        yield base


@pytest.fixture
def seeded(database: str, base_url: str) -> h.Seeded:
    """A freshly seeded database behind the running server."""
    return h.seed(database)


def sign_in(page: Any, base_url: str, token: str) -> None:
    page.goto(f"{base_url}/ui/login?token={token}")
    page.wait_for_url(re.compile(r"/ui/(review|me)$"))


def row(page: Any, memory_or_item: uuid.UUID) -> Any:
    return page.locator(f'[data-row-id="{memory_or_item}"]')


# --- sign-in ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "make_token", "landing", "nav"),
    [
        ("admin", h.admin_token, "/ui/review", ["Review queue", "My memories", "Settings"]),
        ("team_admin", h.team_admin_token, "/ui/review", ["Review queue", "My memories", "Settings"]),
        ("user", h.alice_token, "/ui/me", ["My memories"]),
    ],
)
def test_each_role_signs_in_with_a_link_and_lands_on_its_page(
    page: Any,
    base_url: str,
    seeded: h.Seeded,
    who: str,
    make_token: Callable[[], str],
    landing: str,
    nav: list[str],
) -> None:
    sign_in(page, base_url, make_token())
    assert page.url == f"{base_url}{landing}"
    links = page.get_by_role("navigation", name="Main").get_by_role("link")
    assert [re.sub(r"\s*\d+$", "", t.strip()) for t in links.all_inner_texts()] == nav


def test_a_sign_in_link_opened_from_the_platform_site_lands_signed_in(
    page: Any, base_url: str, seeded: h.Seeded
) -> None:
    # the platform is another site; a SameSite=Strict cookie set on a cross-site navigation must
    # still be sent on the way to the landing page (hence the continue page, not a redirect)
    link = f"{base_url}/ui/login?token={h.team_admin_token()}"
    page.route(
        "http://platform.example/**",
        lambda route: route.fulfill(
            content_type="text/html", body=f'<html lang="en"><a href="{link}">Memory review</a></html>'
        ),
    )
    page.goto("http://platform.example/chat")
    page.get_by_role("link", name="Memory review").click()
    page.wait_for_url(f"{base_url}/ui/review")
    assert page.get_by_role("heading", name="Review queue").is_visible()


def test_an_expired_or_forged_link_says_how_to_get_a_new_one(
    page: Any, base_url: str, seeded: h.Seeded
) -> None:
    for bad in (h.token(h.ALICE, ttl_s=-60), h.alice_token()[:-4] + "AAAA", "not-a-jwt"):
        response = page.goto(f"{base_url}/ui/login?token={bad}")
        assert response.status == 401
        assert page.get_by_role("heading", name="This sign-in link does not work").is_visible()
        assert page.context.cookies() == []


def test_session_cookie_is_httponly_samesite_strict_and_scoped_to_the_ui(
    page: Any, base_url: str, seeded: h.Seeded
) -> None:
    sign_in(page, base_url, h.alice_token())
    (cookie,) = page.context.cookies()
    assert cookie["name"] == "pmem_session"
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert cookie["secure"] is False  # plain http on loopback
    assert page.evaluate("document.cookie") == ""  # scripts cannot read it
    # behind a TLS-terminating proxy (X-Forwarded-Proto from a trusted address) it is Secure
    answer = httpx.get(
        f"{base_url}/ui/login", params={"token": h.alice_token()}, headers={"X-Forwarded-Proto": "https"}
    )
    set_cookie = answer.headers["set-cookie"].lower()
    assert "secure" in set_cookie and "httponly" in set_cookie and "samesite=strict" in set_cookie


def test_a_session_ends_when_it_expires_and_a_stale_cookie_is_cleared(
    page: Any, base_url: str, database: str, seeded: h.Seeded
) -> None:
    sign_in(page, base_url, h.alice_token())
    h.end_sessions_by_time(database)
    assert page.goto(f"{base_url}/ui/me").status == 401
    assert page.get_by_text("Your session has ended.").is_visible()
    assert page.context.cookies() == []
    # a cookie the server never issued (or a JWT, which the cookie no longer is) opens nothing
    stale = h.token(h.ALICE, "user", (h.TEAM_A,), sign_in=False)
    page.context.add_cookies([{"name": "pmem_session", "value": stale, "domain": "127.0.0.1", "path": "/ui"}])
    assert page.goto(f"{base_url}/ui/me").status == 401
    assert page.get_by_text("Your session has ended.").is_visible()
    assert page.context.cookies() == []


def test_signing_out_ends_the_session(page: Any, base_url: str, seeded: h.Seeded) -> None:
    sign_in(page, base_url, h.alice_token())
    page.get_by_role("button", name="Sign out").click()
    assert page.get_by_role("heading", name="Signed out").is_visible()
    assert page.context.cookies() == []
    assert page.goto(f"{base_url}/ui/me").status == 401


def test_a_sign_in_link_opens_a_session_of_its_own_once_and_sign_out_ends_it_on_the_server(
    chromium: Any, page: Any, base_url: str, seeded: h.Seeded
) -> None:
    link_token = h.alice_token()
    sign_in(page, base_url, link_token)
    (cookie,) = page.context.cookies()
    session = cookie["value"]
    assert session != link_token and session.count(".") != 2  # a random value, not the JWT
    # the session cookie is no API credential
    as_bearer = httpx.get(f"{base_url}/v1/me/memories", headers={"Authorization": f"Bearer {session}"})
    assert as_bearer.status_code == 401
    # the link works once: opened again (another browser, or the history) it signs no one in
    other = chromium.new_context()
    try:
        replay = other.new_page()
        assert replay.goto(f"{base_url}/ui/login?token={link_token}").status == 401
        assert replay.get_by_role("heading", name="This sign-in link does not work").is_visible()
        assert other.cookies() == []
    finally:
        other.close()
    # sign-out ends the session on the server: a copy of the cookie opens nothing afterwards
    page.get_by_role("button", name="Sign out").click()
    assert page.get_by_role("heading", name="Signed out").is_visible()
    thief = chromium.new_context()
    try:
        thief.add_cookies([{"name": "pmem_session", "value": session, "domain": "127.0.0.1", "path": "/ui"}])
        assert thief.new_page().goto(f"{base_url}/ui/me").status == 401
    finally:
        thief.close()


def test_an_api_token_or_a_long_lived_token_in_a_link_signs_no_one_in(
    page: Any, base_url: str, seeded: h.Seeded
) -> None:
    api_token = h.token(h.ALICE, "user", (h.TEAM_A,), sign_in=False)
    for bad in (api_token, h.token(h.ALICE, "user", (h.TEAM_A,), ttl_s=3600)):
        response = page.goto(f"{base_url}/ui/login?token={bad}")
        assert response.status == 401
        assert page.get_by_role("heading", name="This sign-in link does not work").is_visible()
        assert page.context.cookies() == []


def test_the_api_docs_render_from_the_servers_own_files_under_its_csp(page: Any, base_url: str) -> None:
    violations: list[str] = []
    outside: list[str] = []
    page.on(
        "console", lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None
    )
    page.on("request", lambda req: outside.append(req.url) if not req.url.startswith(base_url) else None)
    page.goto(f"{base_url}/docs")
    expect(page.get_by_text("/v1/review/{item_id}/approve").first).to_be_visible()
    assert violations == [] and outside == []


# --- review queue ------------------------------------------------------------------------------


def test_admin_approves_rejects_and_edits_in_place_and_the_database_follows(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.admin_token())
    count = page.locator("#waiting-count [data-count]")
    before = int(count.inner_text())

    row(page, seeded["city"]).get_by_role("button", name="Approve").click()
    row(page, seeded["city"]).wait_for(state="detached")
    assert h.status_of(database, seeded["city"]) == "active"
    assert page.get_by_role("status").inner_text() == "Approved."
    assert int(count.inner_text()) == before - 1

    row(page, seeded["job"]).get_by_role("button", name="Reject", exact=True).click()
    row(page, seeded["job"]).wait_for(state="detached")
    assert h.status_of(database, seeded["job"]) in ("archived", None)

    diet = row(page, seeded["diet"])
    diet.get_by_text("Edit", exact=True).click()
    diet.get_by_label("New value for “diet”").fill("Is vegetarian, eats fish on Fridays")
    diet.get_by_role("button", name="Save and approve").click()
    diet.wait_for(state="detached")
    assert h.status_of(database, seeded["diet"]) == "active"
    assert h.value_of(database, seeded["diet"]) == "Is vegetarian, eats fish on Fridays"
    assert int(count.inner_text()) == before - 3
    # every decision is audited with the person from the credential
    assert ("approve", f"admin:{h.ADMIN}") in h.audit_actors(database, seeded["city"])
    assert ("reject", f"admin:{h.ADMIN}") in h.audit_actors(database, seeded["job"])


def test_a_proposed_change_shows_old_and_new_side_by_side_and_approving_applies_it(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.admin_token())
    change = page.locator("[data-row-id]", has=page.get_by_text("Proposed change"))
    assert change.locator(".old").inner_text().endswith("Likes blue")
    assert change.locator(".new").inner_text().endswith("Likes green now")
    change.get_by_role("button", name="Approve").click()
    change.wait_for(state="detached")
    assert h.value_of(database, seeded["colour"]) == "Likes green now"
    assert h.pending_revisions(database, seeded["colour"]) == 0


def test_bulk_approve_decides_every_selected_item_at_once(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.admin_token())
    for name in ("city", "dish", "pets"):
        row(page, seeded[name]).get_by_role("checkbox").check()
    assert page.locator("[data-selected-count]").inner_text() == "3 selected"
    page.get_by_role("button", name="Approve selected").click()
    row(page, seeded["pets"]).wait_for(state="detached")
    assert [h.status_of(database, seeded[n]) for n in ("city", "dish", "pets")] == ["active"] * 3
    assert h.status_of(database, seeded["job"]) == "pending_review"  # not selected, untouched
    assert page.get_by_role("status").inner_text().startswith("Approved 3 items")


def test_the_queue_works_without_javascript(
    chromium: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    context = chromium.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{base_url}/ui/login?token={h.admin_token()}")
        page.wait_for_url(f"{base_url}/ui/review")  # the sign-in page continues by meta refresh
        row(page, seeded["city"]).get_by_role("button", name="Approve").click()
        page.wait_for_url(re.compile(r"notice=approved"))
        assert page.get_by_role("status").inner_text() == "Approved."
        assert h.status_of(database, seeded["city"]) == "active"
        page.get_by_role("button", name="Approve selected").click()  # nothing selected
        assert page.locator('[data-error-for="bulk"]').inner_text() == "Select at least one item first."
    finally:
        context.close()


def test_filters_narrow_the_queue_and_a_bad_filter_is_reported_next_to_its_field(
    page: Any, base_url: str, seeded: h.Seeded
) -> None:
    sign_in(page, base_url, h.admin_token())
    page.goto(f"{base_url}/ui/review?scope=persona")
    assert page.locator("[data-row-id]").count() == 1
    assert row(page, seeded["dish"]).is_visible()
    page.goto(f"{base_url}/ui/review?min_confidence=0.9")
    keys = page.locator("[data-row-id] h2").all_inner_texts()
    assert keys == ["diet"]  # 0.95; the others are below 0.9
    page.goto(f"{base_url}/ui/review?user_id=alice")
    field = page.get_by_label("User")
    assert field.get_attribute("aria-invalid") == "true"
    assert "UUID" in page.locator("#user_id-error").inner_text()


def test_the_queue_pages_newest_first_and_each_item_appears_once(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    h.add_pending(database, uuid.uuid4(), 30)  # newer than the 7 seeded items (6 memories, 1 change)
    sign_in(page, base_url, h.admin_token())
    assert page.locator("#waiting-count [data-count]").inner_text() == "37"
    first = page.locator("[data-row-id]").evaluate_all("rows => rows.map(r => r.dataset.rowId)")
    assert len(first) == 25
    assert page.locator("[data-row-id] h2").first.inner_text() == "fact number 29"  # newest first
    page.get_by_role("link", name="Next page").click()
    second = page.locator("[data-row-id]").evaluate_all("rows => rows.map(r => r.dataset.rowId)")
    assert len(second) == 12 and not set(first) & set(second)
    assert page.get_by_role("link", name="Next page").count() == 0
    page.get_by_role("link", name="First page").click()
    assert page.locator("[data-row-id]").count() == 25


def test_a_team_admin_sees_only_their_teams_items(page: Any, base_url: str, seeded: h.Seeded) -> None:
    sign_in(page, base_url, h.team_admin_token())
    assert row(page, seeded["city"]).is_visible()
    assert row(page, seeded["hobby"]).count() == 0  # team B
    response = page.goto(f"{base_url}/ui/memories/{seeded['hobby']}")
    assert response.status == 404


def test_details_and_history_are_one_click_away(page: Any, base_url: str, seeded: h.Seeded) -> None:
    sign_in(page, base_url, h.admin_token())
    row(page, seeded["city"]).get_by_role("link", name="Details and history").click()
    page.wait_for_url(f"{base_url}/ui/memories/{seeded['city']}")
    history = page.get_by_role("table")
    assert "Extracted" in history.inner_text() and "worker" in history.inner_text()


def test_a_proposed_change_can_be_decided_from_the_memory_page(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.admin_token())
    page.goto(f"{base_url}/ui/memories/{seeded['colour']}")
    proposal = page.get_by_role("region", name="A change waits for review")
    assert "Likes green now" in proposal.inner_text()
    page.get_by_role("button", name="Reject the change", exact=True).click()
    page.wait_for_url(re.compile(r"/ui/review\?.*notice=rejected"))
    assert h.value_of(database, seeded["colour"]) == "Likes blue"
    assert h.pending_revisions(database, seeded["colour"]) == 0


def test_a_reviewer_rejects_and_forgets_what_was_said(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.admin_token())
    said = "I stopped eating meat two years ago"  # the diet memory's evidence, one of Alice's turns
    assert said in h.turn_texts(database, h.ALICE)
    row(page, seeded["diet"]).get_by_role("button", name="Reject and forget what was said").click()
    row(page, seeded["diet"]).wait_for(state="detached")
    assert page.get_by_role("status").inner_text() == "Rejected, and what was said was erased."
    assert h.status_of(database, seeded["diet"]) == "archived"
    assert said not in h.turn_texts(database, h.ALICE)
    assert "Noted: vegetarian recipes." in h.turn_texts(database, h.ALICE)  # the rest stays
    assert h.turn_texts(database, h.BOB) == ["My two cats hate the vet"]
    assert ("reject", f"admin:{h.ADMIN}") in h.audit_actors(database, seeded["diet"])


# --- settings ---------------------------------------------------------------------------------


def test_an_admin_sets_a_teams_settings_and_sees_what_is_inherited(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.admin_token())
    page.goto(f"{base_url}/ui/settings/global")
    page.get_by_label("Minimum confidence").fill("0.6")
    page.get_by_role("button", name="Save global settings").click()
    page.get_by_role("status").filter(has_text="Saved").wait_for()

    page.goto(f"{base_url}/ui/settings/teams/{h.TEAM_A}")
    assert "inherited from the global settings" in page.locator("#min_confidence-inherit").inner_text()
    page.get_by_role("group", name="Persona learning").get_by_label("On").check()
    page.get_by_label("Reject pending after (days)").fill("0")
    page.locator("form[data-enhance=settings]").evaluate("f => f.noValidate = true")  # the server's check
    page.get_by_role("button", name="Save team settings").click()
    expect(page.locator("#pending_days-error")).to_contain_text("whole number of days")  # next to its field
    page.get_by_label("Reject pending after (days)").fill("14")
    page.get_by_label("Erase conversations after (days)").fill("30")
    page.get_by_role("button", name="Save team settings").click()
    page.get_by_role("status").filter(has_text="Saved").wait_for()
    assert page.locator("#pending_days-inherit").inner_text() == "In effect: 14 · set here"
    assert page.locator("#history_days-inherit").inner_text() == "In effect: 30 · set here"
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT persona_learning, pending_days, min_confidence, history, history_days"
            " FROM memory_settings WHERE level = 'team' AND target_id = %s",
            (h.TEAM_A,),
        ).fetchone()
    assert row == (True, 14, None, None, 30)


def test_a_team_admin_reads_a_personas_settings_but_cannot_change_them(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.team_admin_token())
    page.get_by_role("link", name="Settings").click()
    page.wait_for_url(f"{base_url}/ui/settings/teams/{h.TEAM_A}")
    assert page.get_by_role("navigation", name="Levels").get_by_role("link").all_inner_texts() == [
        f"Team {str(h.TEAM_A)[:8]}"
    ]
    page.goto(f"{base_url}/ui/settings/personas/{h.CHEF}")
    assert page.get_by_role("button", name="Save persona settings").count() == 0
    assert page.get_by_label("Minimum confidence").is_disabled()
    csrf = page.locator('input[name="csrf_token"]').first.get_attribute("value")
    answer = page.request.post(
        f"{base_url}/ui/settings/personas/{h.CHEF}",
        form={"csrf_token": csrf, "enabled": "off"},
        headers={"Accept": "application/json"},
    )
    assert answer.status == 403
    assert page.goto(f"{base_url}/ui/settings/teams/{h.TEAM_B}").status == 403
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(*) FROM memory_settings").fetchone() == (0,)


# --- my memories -------------------------------------------------------------------------------


def test_a_user_edits_and_deletes_a_memory_and_downloads_their_data(
    page: Any, base_url: str, seeded: h.Seeded, database: str, tmp_path: Path
) -> None:
    sign_in(page, base_url, h.alice_token())
    groups = page.locator("[data-group] h2").all_inner_texts()
    assert groups[0] == "About you" and any(g.startswith("You, with persona") for g in groups)
    assert row(page, seeded["city"]).get_by_text("not yet used").is_visible()
    assert row(page, seeded["language"]).get_by_text("not yet used").count() == 0
    assert row(page, seeded["pets"]).count() == 0  # Bob's

    city = row(page, seeded["city"])
    city.get_by_text("Edit", exact=True).click()
    city.get_by_label("Correct “home city”").fill("Lives in Porto")
    city.get_by_role("button", name="Save").click()
    page.get_by_role("status").filter(has_text="Saved").wait_for()
    assert city.locator("[data-value]").inner_text() == "Lives in Porto"
    assert city.get_by_text("not yet used").count() == 0  # my edit makes it active
    assert (h.value_of(database, seeded["city"]), h.status_of(database, seeded["city"])) == (
        "Lives in Porto",
        "active",
    )

    row(page, seeded["language"]).get_by_role("button", name="Delete").click()
    row(page, seeded["language"]).wait_for(state="detached")
    assert h.status_of(database, seeded["language"]) is None  # erased, not hidden

    with page.expect_download() as download:
        page.get_by_role("link", name="Download my data").click()
    saved = tmp_path / "mine.json"
    download.value.save_as(saved)
    exported = json.dumps(json.loads(saved.read_text()))
    assert "Lives in Porto" in exported and "Is vegetarian" in exported
    assert "Speaks Portuguese" not in exported and "Has two cats" not in exported


def test_a_user_sees_evidence_and_conversations_and_deletes_them(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.alice_token())
    diet = row(page, seeded["diet"])
    expect(diet.locator("blockquote")).to_have_text(h.DIET_EVIDENCE)
    expect(diet.locator("figcaption")).to_have_text("Said 28 Nov 2026, 19:05 UTC")
    section = page.get_by_role("region", name="Conversations remembered")
    items = section.locator("[data-row-id]")
    assert items.locator("h3").all_inner_texts() == [
        "Planning a trip to Porto in March",  # the newest first
        "I stopped eating meat two years ago",
    ]
    expect(items.nth(1)).to_contain_text(f"with persona {str(h.CHEF)[:8]}")
    expect(items.nth(0)).to_contain_text("29 Nov 2026, 19:05 UTC")
    assert "My two cats" not in section.inner_text()  # Bob's

    trip = section.locator(f'[data-row-id="conversation-{h.TRIP_CHANNEL}"]')
    trip.get_by_role("button", name="Delete conversation").click()
    trip.wait_for(state="detached")
    assert h.turn_texts(database, h.ALICE) == [
        "I stopped eating meat two years ago",
        "Noted: vegetarian recipes.",
    ]

    form = section.locator('form[action$="/conversations/delete-all"]')
    form.evaluate("f => f.noValidate = true")
    form.get_by_role("button", name="Delete all conversations").click()
    expect(page.locator("#confirm_conversations-error")).to_contain_text("nothing was deleted")
    assert len(h.turn_texts(database, h.ALICE)) == 2
    page.get_by_label("Yes, erase every remembered conversation (my memories stay)").check()
    page.get_by_role("button", name="Delete all conversations").click()
    page.wait_for_url(re.compile(r"notice=conversations_deleted"))
    expect(page.get_by_text("No conversation is remembered.")).to_be_visible()
    assert h.turn_texts(database, h.ALICE) == []
    assert h.turn_texts(database, h.BOB) == ["My two cats hate the vet"]
    assert h.status_of(database, seeded["diet"]) == "pending_review"  # memories stay


def test_a_user_rejects_a_memory_and_forgets_what_they_said(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.alice_token())
    said = "I stopped eating meat two years ago"
    row(page, seeded["diet"]).get_by_role("button", name="Reject and forget what was said").click()
    row(page, seeded["diet"]).wait_for(state="detached")
    assert "what you said there was erased" in page.get_by_role("status").inner_text()
    assert h.status_of(database, seeded["diet"]) == "archived"
    assert said not in h.turn_texts(database, h.ALICE)
    page.reload()  # the conversation's first line is now what followed it
    assert said not in page.get_by_role("region", name="Conversations remembered").inner_text()
    assert ("reject", f"user:{h.ALICE}") in h.audit_actors(database, seeded["diet"])


def test_reviewers_see_the_evidence_and_when_it_was_said(page: Any, base_url: str, seeded: h.Seeded) -> None:
    sign_in(page, base_url, h.admin_token())
    quote = row(page, seeded["diet"]).locator(".evidence")
    expect(quote.locator("blockquote")).to_have_text(h.DIET_EVIDENCE)
    expect(quote.locator("time")).to_have_attribute("datetime", h.SAID_AT.isoformat())
    page.goto(f"{base_url}/ui/memories/{seeded['diet']}")
    expect(page.locator(".evidence blockquote")).to_have_text(h.DIET_EVIDENCE)
    expect(page.locator(".evidence figcaption")).to_have_text("Said 28 Nov 2026, 19:05 UTC")
    # an admin's own page lists the admin's conversations, never a person's
    page.goto(f"{base_url}/ui/me")
    expect(page.get_by_text("No conversation is remembered.")).to_be_visible()
    assert "Planning a trip" not in page.content()


def test_deleting_everything_needs_the_confirmation(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.alice_token())
    form = page.locator("[data-delete-all] form")
    form.evaluate("f => f.noValidate = true")  # what a browser without validation would send
    form.get_by_role("button", name="Delete everything").click()
    expect(page.locator("#confirm-error")).to_contain_text("nothing was deleted")
    assert h.status_of(database, seeded["city"]) == "pending_review"
    page.get_by_label("Yes, erase all memories about me").check()
    page.get_by_role("button", name="Delete everything").click()
    page.wait_for_url(re.compile(r"notice=deleted_all"))
    assert page.get_by_role("heading", name="Nothing is remembered about you").is_visible()
    assert all(h.status_of(database, seeded[n]) is None for n in ("city", "job", "diet", "colour"))
    assert h.status_of(database, seeded["pets"]) == "pending_review"  # Bob's stay


# --- what a role may not do ----------------------------------------------------------------------


def test_a_user_cannot_reach_the_queue_or_settings_by_link_or_url(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.alice_token())
    assert page.get_by_role("link", name="Review queue").count() == 0
    assert page.get_by_role("link", name="Settings").count() == 0
    for path in ("/ui/review", "/ui/settings", "/ui/settings/global", f"/ui/settings/teams/{h.TEAM_A}"):
        assert page.goto(f"{base_url}{path}").status == 403, path
        assert page.get_by_role("heading", name="Not available to you").is_visible()
    assert page.goto(f"{base_url}/ui/memories/{seeded['city']}").status in (403, 404)
    # a forged form post with a valid CSRF token is refused by the server too
    page.goto(f"{base_url}/ui/me")
    csrf = page.locator('input[name="csrf_token"]').first.get_attribute("value")
    answer = page.request.post(
        f"{base_url}/ui/review/{seeded['pets']}/approve", form={"csrf_token": csrf}, max_redirects=0
    )
    assert answer.status in (403, 404)
    assert h.status_of(database, seeded["pets"]) == "pending_review"


def test_a_form_posted_without_its_csrf_token_is_refused(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.admin_token())
    approve = row(page, seeded["city"]).locator('form[action$="/approve"]')
    approve.evaluate("f => { f.querySelector('[name=csrf_token]').remove(); delete f.dataset.enhance; }")
    with page.expect_navigation():
        approve.get_by_role("button", name="Approve").click()
    assert page.get_by_role("heading", name="Form refused").is_visible()
    assert h.status_of(database, seeded["city"]) == "pending_review"
    # the same through fetch, and a token of another session
    wrong = page.request.post(
        f"{base_url}/ui/review/{seeded['city']}/approve",
        form={"csrf_token": "x" * 43},
        headers={"Accept": "application/json"},
    )
    assert wrong.status == 403
    assert h.status_of(database, seeded["city"]) == "pending_review"


def test_pages_send_a_same_origin_content_security_policy(page: Any, base_url: str, seeded: h.Seeded) -> None:
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    sign_in(page, base_url, h.admin_token())
    response = page.goto(f"{base_url}/ui/review")
    csp = response.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "unsafe-inline" not in csp
    assert violations == []


# --- every page: accessibility and screenshots ------------------------------------------------


def pages_of(seeded: h.Seeded) -> list[tuple[str, Callable[[], str], str]]:
    return [
        ("review-admin", h.admin_token, "/ui/review"),
        ("review-team-admin", h.team_admin_token, "/ui/review"),
        ("review-filtered-empty", h.admin_token, f"/ui/review?user_id={uuid.uuid4()}"),
        ("memory-detail", h.admin_token, f"/ui/memories/{seeded['colour']}"),
        ("memory-detail-evidence", h.admin_token, f"/ui/memories/{seeded['diet']}"),
        ("settings-global", h.admin_token, "/ui/settings/global"),
        ("settings-team", h.team_admin_token, f"/ui/settings/teams/{h.TEAM_A}"),
        ("settings-persona", h.admin_token, f"/ui/settings/personas/{h.CHEF}"),
        ("my-memories", h.alice_token, "/ui/me"),
        ("my-memories-empty", h.admin_token, "/ui/me"),
        ("refused-user-on-queue", h.alice_token, "/ui/review"),
        ("signed-out", lambda: "", "/ui/me"),
        ("sign-in-link-invalid", lambda: "", "/ui/login?token=expired-or-forged"),
    ]


def test_every_page_has_no_serious_accessibility_findings_at_desktop_and_phone_width(
    chromium: Any, base_url: str, seeded: h.Seeded
) -> None:
    findings: dict[str, list[str]] = {}
    for name, make_token, path in pages_of(seeded):
        for size_name, size in (("desktop", DESKTOP), ("360px", PHONE)):
            context = chromium.new_context(viewport=size)
            try:
                page = context.new_page()
                if make_token():
                    sign_in(page, base_url, make_token())
                page.goto(f"{base_url}{path}")
                screenshot(page, f"{name}-{size_name}")
                found = axe_findings(page)
                if found:
                    findings[f"{name} {size_name}"] = [str(f) for f in found]
                if size_name == "360px":  # nothing wider than the phone's screen
                    overflow = page.evaluate("document.documentElement.scrollWidth")
                    assert overflow <= 360, f"{name} is {overflow}px wide at 360px"
            finally:
                context.close()
    assert findings == {}


def test_keyboard_alone_can_approve_and_focus_is_visible(
    page: Any, base_url: str, seeded: h.Seeded, database: str
) -> None:
    sign_in(page, base_url, h.admin_token())
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent.trim()") == "Skip to content"
    approve = row(page, seeded["city"]).get_by_role("button", name="Approve")
    for _ in range(60):
        page.keyboard.press("Tab")
        if approve.evaluate("b => b === document.activeElement"):
            break
    else:
        pytest.fail("Approve never got the keyboard focus")
    outline = approve.evaluate(
        "b => getComputedStyle(b).outlineStyle + ' ' + getComputedStyle(b).outlineWidth"
    )
    assert outline.startswith("solid") and not outline.endswith(" 0px")
    page.keyboard.press("Enter")
    row(page, seeded["city"]).wait_for(state="detached")
    assert h.status_of(database, seeded["city"]) == "active"
