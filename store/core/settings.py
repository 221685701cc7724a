"""Memory settings rows (global / team / persona) and their merge into the effective policy
(`effective_settings`, which retention and the turns' expiry read it through)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select

from store.core.base import StoreBase
from store.model import MemorySettings, SettingsLevel, SettingsRow
from store.rules.admission import admit
from store.rules.policy import check_settings_row, merge_settings, storable_confidence

_SETTINGS_LEVEL_ORDER = {"global": 0, "team": 1, "persona": 2}


async def rows_that_apply(
    store: StoreBase, team_id: uuid.UUID | None, persona_id: uuid.UUID | None
) -> list[dict[str, Any]]:
    """The global, team and persona rows of `store` that apply, least specific first."""
    s = store._schema.settings
    levels: list[ColumnElement[bool]] = [s.c.level == "global"]
    if team_id is not None:
        levels.append(and_(s.c.level == "team", s.c.target_id == team_id))
    if persona_id is not None:
        levels.append(and_(s.c.level == "persona", s.c.target_id == persona_id))
    async with store._backend.reading() as conn:
        rows = (await conn.execute(select(s).where(or_(*levels)))).all()
    ordered = sorted((dict(row._mapping) for row in rows), key=lambda r: _SETTINGS_LEVEL_ORDER[r["level"]])
    return ordered


async def effective_settings(
    store: StoreBase, team_id: uuid.UUID | None, persona_id: uuid.UUID | None
) -> MemorySettings:
    """The effective settings in `store` for a team and persona: its defaults, then the global, team
    and persona rows (most specific wins)."""
    return merge_settings(await rows_that_apply(store, team_id, persona_id), store._settings_defaults)


class SettingsRows(StoreBase):
    """Read and write settings rows."""

    # -- settings -------------------------------------------------------------------------------

    async def settings_for(self, team_id: uuid.UUID | None, persona_id: uuid.UUID | None) -> MemorySettings:
        """Effective settings: defaults, then global, team and persona rows (most specific wins)."""
        return await effective_settings(self, team_id, persona_id)

    async def put_settings(
        self,
        *,
        level: SettingsLevel,
        target_id: uuid.UUID | None,
        enabled: bool | None = None,
        persona_learning: bool | None = None,
        extraction_prompt: str | None = None,
        min_confidence: float | None = None,
    ) -> None:
        """Set fields of one settings row (created if missing); None leaves a field as it is."""
        if level not in _SETTINGS_LEVEL_ORDER:
            raise ValueError(f"settings level must be global, team or persona, got {level!r}")
        if (level == "global") != (target_id is None):
            raise ValueError(
                "global settings take no target_id; team and persona settings need the team or persona id"
            )
        if min_confidence is not None and not 0.0 <= min_confidence <= 1.0:
            raise ValueError(f"min_confidence must be within 0..1, got {min_confidence}")
        if extraction_prompt is not None:
            extraction_prompt = admit(extraction_prompt).text  # the gate for stored text
        s = self._schema.settings
        values = {
            "enabled": enabled,
            "persona_learning": persona_learning,
            "extraction_prompt": extraction_prompt,
            "min_confidence": None if min_confidence is None else storable_confidence(min_confidence),
        }
        stmt = self._insert(s).values(
            level=level, target_id=target_id, updated_at=self._backend.now(), **values
        )
        excluded = stmt.excluded
        stmt = stmt.on_conflict_do_update(
            index_elements=[s.c.level, func.coalesce(s.c.target_id, self._backend.nil())],
            set_={
                **{name: func.coalesce(getattr(excluded, name), getattr(s.c, name)) for name in values},
                "updated_at": excluded.updated_at,
            },
        )
        async with self._backend.transaction() as conn:
            await conn.execute(stmt)

    @property
    def settings_defaults(self) -> MemorySettings:
        """What the merge starts from: the deployment's defaults (PMEM_MIN_CONFIDENCE, retention)."""
        return self._settings_defaults

    async def settings_row(self, level: SettingsLevel, target_id: uuid.UUID | None) -> SettingsRow:
        """One level's own row (every field None when the level has no row: all inherited)."""
        s = self._schema.settings
        target = s.c.target_id.is_(None) if target_id is None else s.c.target_id == target_id
        async with self._backend.reading() as conn:
            row = (await conn.execute(select(s).where(s.c.level == level, target))).first()
        if row is None:
            return SettingsRow(level=level, target_id=target_id)
        data = row._mapping
        return SettingsRow(
            level=level,
            target_id=target_id,
            enabled=data["enabled"],
            persona_learning=data["persona_learning"],
            extraction_prompt=data["extraction_prompt"],
            min_confidence=None
            if data["min_confidence"] is None
            else storable_confidence(data["min_confidence"]),
            pending_days=data["pending_days"],
            archived_days=data["archived_days"],
            history=data.get("history"),
            history_days=data.get("history_days"),
            review_tool_saves=data["review_tool_saves"],
            known_personas_only=data.get("known_personas_only"),
        )

    async def replace_settings(self, row: SettingsRow) -> None:
        """Write one level's row as given (the extraction prompt admitted: `store.rules.admission`):
        a None field inherits from the level above."""
        if row.extraction_prompt is not None:
            row = replace(row, extraction_prompt=admit(row.extraction_prompt).text)
        check_settings_row(row)
        s = self._schema.settings
        values = {
            "enabled": row.enabled,
            "persona_learning": row.persona_learning,
            "extraction_prompt": row.extraction_prompt,
            "min_confidence": None if row.min_confidence is None else storable_confidence(row.min_confidence),
            "pending_days": row.pending_days,
            "archived_days": row.archived_days,
            "history": row.history,
            "history_days": row.history_days,
            "review_tool_saves": row.review_tool_saves,
            "known_personas_only": row.known_personas_only,
        }
        stmt = self._insert(s).values(
            level=row.level, target_id=row.target_id, updated_at=self._backend.now(), **values
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=[s.c.level, func.coalesce(s.c.target_id, self._backend.nil())],
            set_={**values, "updated_at": stmt.excluded.updated_at},
        )
        async with self._backend.transaction() as conn:
            await conn.execute(stmt)
