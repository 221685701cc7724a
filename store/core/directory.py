"""Display names of teams, personas and users: the latest name the platform gave each id (from an
event's `team_name` / `persona_name` / `user_name`, or `PUT /v1/directory/...`). The web UI shows
them instead of UUIDs; a user's name is erased with the user."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from sqlalchemy import select

from store.core.base import StoreBase
from store.model import DirectoryEntry, DirectoryKind
from store.rules.directory import clean_name


class DirectoryNames(StoreBase):
    """Read and write display names."""

    async def set_names(self, entries: Sequence[DirectoryEntry]) -> None:
        """Store each entry's name (the latest write wins), as `clean_name` gives it; an entry
        without a usable name is left out."""
        entries = [
            DirectoryEntry(kind=entry.kind, id=entry.id, name=name)
            for entry in entries
            if (name := clean_name(entry.name)) is not None
        ]
        if not entries:
            return
        d = self._schema.directory
        async with self._backend.transaction() as conn:
            for entry in entries:
                stmt = self._insert(d).values(
                    kind=entry.kind, id=entry.id, name=entry.name, updated_at=self._backend.now()
                )
                stmt = stmt.on_conflict_do_update(
                    index_elements=[d.c.kind, d.c.id],
                    set_={"name": stmt.excluded.name, "updated_at": stmt.excluded.updated_at},
                )
                await conn.execute(stmt)

    async def names(self, kind: DirectoryKind, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
        """The known names of these ids (ids without a name are absent)."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        d = self._schema.directory
        async with self._backend.reading() as conn:
            rows = (
                await conn.execute(select(d.c.id, d.c.name).where(d.c.kind == kind, d.c.id.in_(wanted)))
            ).all()
        return {row.id: row.name for row in rows}

    async def directory(self, kind: DirectoryKind, *, limit: int = 500) -> list[DirectoryEntry]:
        """Every known entry of a kind, by name (for pickers)."""
        d = self._schema.directory
        async with self._backend.reading() as conn:
            rows = (
                await conn.execute(
                    select(d.c.id, d.c.name).where(d.c.kind == kind).order_by(d.c.name, d.c.id).limit(limit)
                )
            ).all()
        return [DirectoryEntry(kind=kind, id=row.id, name=row.name) for row in rows]
