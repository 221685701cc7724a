"""The README and docs/ hold together: every relative link resolves (to a file, and to a heading of
it when it names one), and every `pmem …` command they show exists."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from cli.main import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

# `[text](target)`: no nesting, one line; a target has no spaces or parentheses
LINK = re.compile(r"\[[^\]\n]*\]\(([^()\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"(?:^|[\s/])pmem[ \t]+([a-z][a-z-]*)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.strip().lower()
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings (outside code blocks)."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def relative_links(page: Path) -> Iterator[str]:
    """The links of a page that point into the repository (not a URL, not a mail address)."""
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if not re.match(r"[a-z][a-z0-9+.-]*:", target):
            yield target


def broken_links(page: Path) -> list[str]:
    """`page: target` for each relative link whose file or heading does not exist."""
    broken = []
    for target in relative_links(page):
        path_part, _, fragment = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{page.name}: {target}")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{page.name}: {target} (no such heading)")
    return broken


def shown_commands(text: str) -> set[str]:
    """The sub-commands of every `pmem …` shown as code: in fenced blocks and in code spans."""
    code = [block for block in FENCE.findall(text)]
    code.extend(CODE_SPAN.findall(FENCE.sub("", text)))
    return {name for snippet in code for name in COMMAND.findall(snippet)}


def test_every_relative_link_resolves() -> None:
    assert [hit for page in PAGES for hit in broken_links(page)] == []


def test_every_command_shown_exists() -> None:
    known = {name for name, _, _ in COMMANDS}
    shown = {name for page in PAGES for name in shown_commands(page.read_text(encoding="utf-8"))}
    assert shown, "the pages show no command at all"
    assert sorted(shown - known) == []


def test_the_readme_points_at_every_page_of_the_docs() -> None:
    readme_links = {target.partition("#")[0] for target in relative_links(ROOT / "README.md")}
    docs = {f"docs/{page.name}" for page in PAGES[1:]}
    assert sorted(docs - readme_links) == []


def test_the_checks_see_a_broken_link_and_an_unknown_command(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading, here\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#a-heading-here) [gone](missing.md) [no heading](there.md#elsewhere) "
        "[web](https://example.com)\n"
    )
    assert broken_links(page) == ["page.md: missing.md", "page.md: there.md#elsewhere (no such heading)"]
    assert shown_commands("run `pmem frobnicate --now` or\n```\n.venv/bin/pmem demo\n```\n") == {
        "frobnicate",
        "demo",
    }
