"""The browser side of the UI tests: Debian's Chromium driven by Playwright, axe-core, screenshots.

Playwright's own browser download does not work in closed networks, so the tests use the system
Chromium (`apt-get install -y chromium`) through `executable_path`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
AXE_JS = HERE / "vendor" / "axe.min.js"
SCREENSHOTS = HERE / "screenshots"

CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

HOW_TO_INSTALL = (
    "the browser tests need Debian's Chromium and Playwright for Python: "
    "`sudo apt-get install -y chromium` and `.venv/bin/pip install -e '.[dev]'` "
    "(or set PMEM_CHROMIUM to another Chromium binary)"
)

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 360, "height": 740}


def chromium_path() -> str | None:
    """The Chromium binary to drive: PMEM_CHROMIUM, else `chromium` on PATH; None when absent."""
    configured = os.environ.get("PMEM_CHROMIUM")
    if configured:
        return configured if Path(configured).exists() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass(frozen=True, slots=True)
class AxeFinding:
    rule: str
    impact: str
    help: str
    targets: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.impact}: {self.rule} ({self.help}) at {', '.join(self.targets)}"


def axe_findings(page: Any, *, impacts: tuple[str, ...] = ("serious", "critical")) -> list[AxeFinding]:
    """Run axe-core (WCAG 2 A/AA rules and best practices) in the page; the findings of `impacts`.

    axe is evaluated through the DevTools protocol, which the page's own Content-Security-Policy
    does not govern (a script element would be refused by it), so the check sees the page exactly
    as served, CSP included."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(AXE_JS.read_text(encoding="utf-8") + "\n;undefined")
    result = page.evaluate(
        """async () => {
            const r = await axe.run(document, {resultTypes: ['violations']});
            return r.violations.map(v => ({
                rule: v.id, impact: v.impact || 'minor', help: v.help,
                targets: v.nodes.map(n => n.target.join(' ')),
            }));
        }"""
    )
    return [
        AxeFinding(rule=v["rule"], impact=v["impact"], help=v["help"], targets=tuple(v["targets"]))
        for v in result
        if v["impact"] in impacts
    ]


def screenshot(page: Any, name: str) -> Path:
    """Full-page screenshot `tests/ui/screenshots/<name>.png` (the folder the README names)."""
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
