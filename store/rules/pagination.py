"""Opaque cursors for newest-first lists: a position (created_at, id) encoded as URL-safe text."""

from __future__ import annotations

import base64
import binascii
import uuid
from datetime import UTC, datetime
from typing import TypeVar

from store.model import Page

T = TypeVar("T")


class BadCursor(ValueError):
    """A cursor that this service did not issue (or that was altered)."""


def encode_cursor(created_at: datetime, item_id: uuid.UUID) -> str:
    """The cursor that continues after the item at (created_at, item_id)."""
    raw = f"{created_at.isoformat()}|{item_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """The position a cursor encodes; raises BadCursor when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, item = raw.partition("|")
        moment = datetime.fromisoformat(at)
        if moment.tzinfo is None:
            raise ValueError("naive timestamp")
        # in UTC here, where a shift past year 1 or 9999 is a bad cursor, not a crash later
        return moment.astimezone(UTC), uuid.UUID(item)
    except (ValueError, OverflowError, UnicodeDecodeError, binascii.Error) as exc:
        raise BadCursor("cursor is not valid; pass the next_cursor of the previous page unchanged") from exc


def newest_first_page(items: list[tuple[datetime, uuid.UUID, T]], limit: int) -> Page[T]:
    """Sort (created_at, id, item) newest first: the page of the first `limit`, and the cursor after
    the last kept when more follow."""
    ordered = sorted(items, key=lambda entry: (entry[0], entry[1]), reverse=True)
    kept = ordered[:limit]
    more = len(ordered) > limit
    cursor = encode_cursor(kept[-1][0], kept[-1][1]) if more and kept else None
    return Page(items=tuple(item for _, _, item in kept), next_cursor=cursor)
