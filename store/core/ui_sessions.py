"""Web-UI sessions: opened by one single-use sign-in token, looked up by the SHA-256 of the session
cookie, ended by sign-out. The cookie itself is never stored."""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from sqlalchemy import and_, delete, select, update

from store.core.base import StoreBase
from store.model import UiSession


class UiSessions(StoreBase):
    """Open, read and end web-UI sessions."""

    async def open_ui_session(
        self,
        *,
        digest: str,
        sign_in_id: str,
        sign_in_expires_at: datetime,
        session: UiSession,
    ) -> bool:
        """Store a new session; False (nothing stored) when this sign-in token opened one before.
        Sessions that ended or expired, and whose sign-in tokens expired too, are removed."""
        s = self._schema.ui_sessions
        now = self._backend.now()
        async with self._backend.transaction() as conn:
            await conn.execute(delete(s).where(and_(s.c.expires_at < now, s.c.sign_in_expires_at < now)))
            result = await conn.execute(
                self._insert(s)
                .values(
                    digest=digest,
                    sign_in_id=sign_in_id,
                    subject=session.subject,
                    role=session.role,
                    teams=json.dumps([str(team) for team in session.teams]),
                    created_at=now,
                    expires_at=session.expires_at,
                    sign_in_expires_at=sign_in_expires_at,
                )
                .on_conflict_do_nothing(index_elements=[s.c.sign_in_id])
                .returning(s.c.digest)
            )
            return result.first() is not None

    async def ui_session(self, digest: str) -> UiSession | None:
        """The open session with this cookie digest; None when unknown, ended or expired."""
        s = self._schema.ui_sessions
        async with self._backend.reading() as conn:
            row = (
                await conn.execute(
                    select(s).where(
                        s.c.digest == digest, s.c.ended_at.is_(None), s.c.expires_at > self._backend.now()
                    )
                )
            ).first()
        if row is None:
            return None
        return UiSession(
            subject=row.subject,
            role=row.role,
            teams=tuple(uuid.UUID(team) for team in json.loads(row.teams)),
            expires_at=row.expires_at,
        )

    async def end_ui_session(self, digest: str) -> None:
        """End a session (sign-out); its cookie opens nothing from now on."""
        s = self._schema.ui_sessions
        async with self._backend.transaction() as conn:
            await conn.execute(
                update(s)
                .where(s.c.digest == digest, s.c.ended_at.is_(None))
                .values(ended_at=self._backend.now())
            )
