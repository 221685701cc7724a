"""Postgres's shared buffers against what hints read (docs/operations.md, "Postgres memory").

A hint reads its context's recent turns from the turns' context index (a 1,000-turn context's
window is ~250 of its pages: each entry carries the turn's vector) and the owner's memories. When
those relations together outgrow `shared_buffers`, most hints copy their pages in from the
operating system's cache first: measured, up to ~1 ms of Postgres CPU more a hint (~10 %) at
100,000 and at 1,000,000 turns (bench/README.md, "Platform load"). At start-up `pmem serve`
reads the sizes once and logs one WARNING naming them and the setting to raise. Like the
connection budget's, the check never fails a start-up: the server may have no memory to spare,
and hints stay correct, only dearer."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from sqlalchemy import text

from store.postgres.store import PostgresMemoryStore

log = logging.getLogger("pmem.store.buffers")

MB = 2**20
# the suggested setting leaves this much room to grow and is rounded up to whole steps
HEADROOM = 1.25
SUGGESTION_STEP = 128 * MB

# the server's setting and the relations a hint reads (the index as `store.postgres.schema` names
# it; the memories with all their indexes), in bytes; 0 for a relation not there
HOT_SET_SQL = (
    "SELECT pg_size_bytes(current_setting('shared_buffers')) AS shared_buffers, "
    "coalesce(pg_relation_size(to_regclass('ix_conversation_turns_context')), 0) AS turn_window_index, "
    "coalesce(pg_total_relation_size(to_regclass('memories')), 0) AS memories"
)


@dataclass(frozen=True, kw_only=True)
class HotSet:
    """`shared_buffers` and the sizes of what hints read, in bytes."""

    shared_buffers: int
    turn_window_index: int
    memories: int

    @property
    def needed(self) -> int:
        """The bytes hints read from: the turns' context index and the memories."""
        return self.turn_window_index + self.memories


def suggested_shared_buffers(needed: int) -> int:
    """A `shared_buffers` that holds `needed` bytes with room to grow (`HEADROOM`), in whole
    `SUGGESTION_STEP`s."""
    return max(1, math.ceil(needed * HEADROOM / SUGGESTION_STEP)) * SUGGESTION_STEP


def buffers_warning(hot: HotSet, *, process: str) -> str | None:
    """The one-line warning when what hints read does not fit in `shared_buffers`, else None."""
    if hot.needed <= hot.shared_buffers:
        return None
    suggested = suggested_shared_buffers(hot.needed) // MB
    return (
        f"{process}: Postgres's shared_buffers ({_mb(hot.shared_buffers)}) is smaller than what hints "
        f"read: the turns' context index ({_mb(hot.turn_window_index)}) and the memories "
        f"({_mb(hot.memories)}), {_mb(hot.needed)} together; most hints then copy their pages in "
        "from the operating system's cache, up to about 1 ms more Postgres CPU each. If the database "
        f"server has the memory: ALTER SYSTEM SET shared_buffers = '{suggested}MB', then restart "
        "Postgres (docs/operations.md: Postgres memory)"
    )


def _mb(size: int) -> str:
    """`size` bytes in MB, as the warning shows it."""
    return f"{size / MB:,.1f} MB" if size < 10 * MB else f"{size / MB:,.0f} MB"


async def read_hot_set(store: PostgresMemoryStore) -> HotSet:
    """The server's `shared_buffers` and the relations' sizes, as the store's reads see them."""
    async with store.connections.reading() as conn:
        row = (await conn.execute(text(HOT_SET_SQL))).one()
    return HotSet(
        shared_buffers=int(row.shared_buffers),
        turn_window_index=int(row.turn_window_index),
        memories=int(row.memories),
    )


async def warn_if_buffers_too_small(store: object, *, process: str) -> str | None:
    """Read the sizes once and log the warning (returned too) when what hints read outgrows
    `shared_buffers`. Postgres only; any failure to read is logged at INFO and ignored."""
    if not isinstance(store, PostgresMemoryStore):
        return None
    try:
        hot = await read_hot_set(store)
    except Exception as exc:
        log.info("could not read Postgres's shared_buffers (%s): not checked", type(exc).__name__)
        return None
    warning = buffers_warning(hot, process=process)
    if warning is not None:
        log.warning("%s", warning)
    return warning
