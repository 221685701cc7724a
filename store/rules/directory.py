"""Display names as stored: one line, admitted, capped; the directory entries an event's (id,
name) pairs give (`store.core.directory` stores them)."""

from __future__ import annotations

import logging
import uuid

from store.model import DirectoryEntry, DirectoryKind
from store.rules.admission import admit, has_content

MAX_NAME_CHARS = 200

log = logging.getLogger("pmem.store.directory")


def clean_name(name: str | None) -> str | None:
    """A display name as stored: admitted on one line (`store.rules.admission`: invisible
    characters removed, secrets redacted, whitespace folded), capped; None when nothing is left
    with content (such a name is ignored, never an error)."""
    if name is None:
        return None
    folded = admit(name, one_line=True).text
    if not has_content(folded):
        return None
    if len(folded) > MAX_NAME_CHARS:
        log.info("display name cut to %d characters (was %d)", MAX_NAME_CHARS, len(folded))
        folded = folded[:MAX_NAME_CHARS].rstrip()
    return folded


def directory_entries(
    *,
    team: tuple[uuid.UUID | None, str | None],
    persona: tuple[uuid.UUID | None, str | None],
    user: tuple[uuid.UUID | None, str | None],
) -> list[DirectoryEntry]:
    """The entries an event's (id, name) pairs give: one per id that has a usable name."""
    entries: list[DirectoryEntry] = []
    pairs: tuple[tuple[DirectoryKind, tuple[uuid.UUID | None, str | None]], ...] = (
        ("team", team),
        ("persona", persona),
        ("user", user),
    )
    for kind, (item_id, raw) in pairs:
        name = clean_name(raw)
        if item_id is not None and name is not None:
            entries.append(DirectoryEntry(kind=kind, id=item_id, name=name))
    return entries
