"""The demo's sign-in links live as long as the docs say every sign-in link lives (the API's
default `PMEM_UI_SIGN_IN_MAX_S`, 10 minutes), not as long as the sessions they open."""

from __future__ import annotations

import inspect
import pathlib
import re

from api.app import create_app
from cli.commands.demo_ui import DEMO_LINK_S, DEMO_SESSION_S

SECURITY = pathlib.Path(__file__).resolve().parents[2] / "docs" / "security.md"


def test_demo_links_live_no_longer_than_any_sign_in_link() -> None:
    default_life = inspect.signature(create_app).parameters["sign_in_max_s"].default
    assert default_life >= DEMO_LINK_S
    documented = SECURITY.read_text(encoding="utf-8")
    said = re.search(r"`PMEM_UI_SIGN_IN_MAX_S` \(default (\d+)\s+minutes", documented)
    assert said is not None and int(said.group(1)) * 60 == default_life
    assert DEMO_SESSION_S > DEMO_LINK_S  # a session outlives the link that opened it
