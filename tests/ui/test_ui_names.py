"""Names people recognise: the names `conversation.ended` events carry show in the review queue, on
My memories and in the settings picker (ids on hover); a later event's name replaces the earlier
one, and erasing a user removes their name. Real nats-server, `pmem worker`, `pmem serve`,
Postgres and Chromium."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from cli.embedded import EmbeddedNats
from store.migrate import migrate
from tests.api.worker_harness import WorkerNames, running_worker, wait_until
from tests.ui import harness as h
from tests.ui.browser import HOW_TO_INSTALL

expect = pytest.importorskip("playwright.sync_api", reason=HOW_TO_INSTALL).expect

pytestmark = pytest.mark.slow
PUBLISH = Path(__file__).resolve().parents[2] / "examples" / "publish_event.py"


@pytest.fixture(scope="module")
def database(new_database: Callable[[], str]) -> str:
    url = new_database()
    migrate(url, 384)
    return url


@pytest.fixture(scope="module")
def names() -> WorkerNames:
    return WorkerNames.fresh()


@pytest.fixture(scope="module")
def base_url(database: str, nats_server: EmbeddedNats, names: WorkerNames) -> Iterator[str]:
    with running_worker(database, nats_server.url, names), h.serving(database) as base:
        yield base


def publish(nats_server: EmbeddedNats, names: WorkerNames, **fields: str) -> None:
    """One event for Alice with the persona Chef in team A, through the example publisher."""
    env = {
        "PATH": "/usr/bin:/bin",
        "PMEM_NATS_URL": nats_server.url,
        "PMEM_SUBJECT": names.subject,
        "PMEM_USER_ID": str(h.ALICE),
        "PMEM_PERSONA_ID": str(h.CHEF),
        "PMEM_TEAM_ID": str(h.TEAM_A),
        **fields,
    }
    done = subprocess.run([sys.executable, str(PUBLISH)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def directory(database: str) -> dict[str, str]:
    with psycopg.connect(database) as conn:
        return {str(kind): str(name) for kind, name in conn.execute("SELECT kind, name FROM directory")}


def pending_of_alice(database: str) -> int:
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT count(*) FROM memories "
            "WHERE (owner_id = %s OR user_id = %s) AND status = 'pending_review'",
            (h.ALICE, h.ALICE),
        ).fetchone()
    return int(row[0]) if row else 0


def sign_in(page: Any, base_url: str, token: str) -> None:
    page.goto(f"{base_url}/ui/login?token={token}")
    page.wait_for_url(re.compile(r"/ui/(review|me)$"))


def test_names_from_events_replace_ids_and_go_with_the_user(
    page: Any, base_url: str, database: str, nats_server: EmbeddedNats, names: WorkerNames
) -> None:
    publish(
        nats_server,
        names,
        PMEM_USER_NAME="Alice Martin",
        PMEM_PERSONA_NAME="Chef Remy",
        PMEM_TEAM_NAME="Acme support",
    )
    wait_until(lambda: pending_of_alice(database) > 0, "the worker to write Alice's memories")
    assert directory(database) == {"user": "Alice Martin", "persona": "Chef Remy", "team": "Acme support"}
    # something Alice told the persona (a tool save), so My memories has a persona group
    alice = {"Authorization": f"Bearer {h.token(h.ALICE, 'user', (h.TEAM_A,), sign_in=False)}"}
    saved = httpx.post(
        f"{base_url}/v1/tools/call",
        json={
            "name": "memory_save",
            "arguments": {"key": "favourite dish", "value": "Loves risotto"},
            "persona_id": str(h.CHEF),
            "team_id": str(h.TEAM_A),
        },
        headers=alice,
        timeout=10,
    )
    assert saved.status_code == 200, saved.text

    # the review queue: the user's and the team's names, their ids on hover
    sign_in(page, base_url, h.admin_token())
    user_link = page.locator('a[data-name="user"]').first
    expect(user_link).to_have_text("Alice Martin")
    assert str(h.ALICE) in (user_link.get_attribute("title") or "")
    expect(page.locator('a[data-name="team"]').first).to_have_text("Acme support")
    assert str(h.ALICE)[:8] not in page.locator("main").inner_text()
    # whose each memory is, in words and by name; who is signed in (this admin has no name)
    words = {"user": "about Alice Martin", "persona_user": "Alice Martin, with Chef Remy"}
    badges = page.locator("[data-row-id] .badge[data-scope]")
    expect(badges.first).to_be_visible()
    for badge in badges.all():
        assert badge.inner_text() == words[badge.get_attribute("data-scope") or ""]
    expect(page.locator("[data-signed-in]")).to_have_text(f"Signed in as admin {str(h.ADMIN)[:8]}")

    # settings: pick the persona by name instead of typing its id
    page.goto(f"{base_url}/ui/settings/global")
    picker = page.get_by_label("Team or persona")
    assert picker.locator("option").all_inner_texts() == ["Acme support", "Chef Remy"]
    picker.select_option(label="Chef Remy")
    page.get_by_role("button", name="Open").first.click()
    page.wait_for_url(f"{base_url}/ui/settings/personas/{h.CHEF}")
    expect(page.get_by_role("heading", name="Persona Chef Remy")).to_be_visible()

    # My memories: the persona's name, not "persona 356511b6"
    page.context.clear_cookies()
    sign_in(page, base_url, h.alice_token())
    expect(page.get_by_role("heading", name="You, with Chef Remy")).to_be_visible()
    expect(page.locator("[data-signed-in]")).to_have_text("Signed in as Alice Martin")

    # a later event with a new name: the new one shows
    publish(
        nats_server,
        names,
        PMEM_USER_NAME="Alice Silva",
        PMEM_PERSONA_NAME="Chef Remy",
        PMEM_TEAM_NAME="Acme support",
    )
    wait_until(lambda: directory(database).get("user") == "Alice Silva", "the worker to store the new name")
    page.context.clear_cookies()
    sign_in(page, base_url, h.admin_token())
    expect(page.locator('a[data-name="user"]').first).to_have_text("Alice Silva")

    # erasing the user removes their name; the team's and persona's stay
    erased = httpx.delete(
        f"{base_url}/v1/users/{h.ALICE}/memories",
        headers={"Authorization": f"Bearer {h.token(h.ADMIN, 'admin', sign_in=False)}"},
        timeout=10,
    )
    assert erased.status_code == 200, erased.text
    assert directory(database) == {"persona": "Chef Remy", "team": "Acme support"}
    publish(nats_server, names)  # Alice again, this time without names
    wait_until(lambda: pending_of_alice(database) > 0, "the worker to write Alice's new memories")
    page.reload()
    expect(page.locator('a[data-name="user"]').first).to_have_text(str(h.ALICE)[:8])
    assert "Alice Silva" not in page.content() and "Alice Martin" not in page.content()
