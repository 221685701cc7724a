"""Service credentials: API keys `pmem_sk_…`, shown once at creation and stored as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import secrets
import uuid

from sqlalchemy import select, update

from store.core.base import StoreBase
from store.errors import StoreError
from store.model import ApiKey
from store.rules.admission import admit

KEY_PREFIX = "pmem_sk_"


def hash_key(key: str) -> str:
    """The stored form of a key. Keys carry 256 random bits, so a fast hash cannot be brute-forced."""
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeys(StoreBase):
    """Create, list, revoke and verify API keys."""

    async def create_api_key(self, name: str) -> tuple[ApiKey, str]:
        """A new key named `name` (unique among active keys; admitted on one line, as every stored
        text: `store.rules.admission`): its record and the key, shown only now."""
        name = admit(name, one_line=True).text
        if not name or len(name) > 100:
            raise ValueError("an API key needs a name of 1-100 characters, e.g. the service using it")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        k = self._schema.api_keys
        record = ApiKey(
            id=uuid.uuid4(), name=name, prefix=key[: len(KEY_PREFIX) + 6], created_at=self._backend.now()
        )
        async with self._backend.transaction() as conn:
            taken = (
                await conn.execute(select(k.c.id).where(k.c.name == name, k.c.revoked_at.is_(None)))
            ).first()
            if taken is not None:
                raise StoreError(
                    f"an active API key named {name!r} exists; revoke it first or pick another name"
                )
            await conn.execute(
                self._insert(k).values(
                    id=record.id,
                    name=name,
                    key_hash=hash_key(key),
                    prefix=record.prefix,
                    created_at=record.created_at,
                )
            )
        return record, key

    async def list_api_keys(self) -> list[ApiKey]:
        """Every key, active and revoked, oldest first."""
        k = self._schema.api_keys
        async with self._backend.reading() as conn:
            rows = (await conn.execute(select(k).order_by(k.c.created_at, k.c.id))).all()
        return [
            ApiKey(id=r.id, name=r.name, prefix=r.prefix, created_at=r.created_at, revoked_at=r.revoked_at)
            for r in rows
        ]

    async def revoke_api_key(self, name_or_id: str) -> bool:
        """Revoke the active key with this name (or id); False when there is none."""
        k = self._schema.api_keys
        try:
            match = k.c.id == uuid.UUID(name_or_id)
        except ValueError:
            match = k.c.name == name_or_id
        async with self._backend.transaction() as conn:
            result = await conn.execute(
                update(k)
                .where(match, k.c.revoked_at.is_(None))
                .values(revoked_at=self._backend.now())
                .returning(k.c.id)
            )
            return result.first() is not None

    async def verify_api_key(self, key: str) -> ApiKey | None:
        """The active key record for a presented key; None when unknown or revoked."""
        if not key.startswith(KEY_PREFIX):
            return None
        k = self._schema.api_keys
        async with self._backend.reading() as conn:
            row = (
                await conn.execute(select(k).where(k.c.key_hash == hash_key(key), k.c.revoked_at.is_(None)))
            ).first()
        if row is None:
            return None
        return ApiKey(id=row.id, name=row.name, prefix=row.prefix, created_at=row.created_at)
