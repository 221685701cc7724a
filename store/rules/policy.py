"""Pure write rules shared by both stores: what an upsert does to an existing row, what approve and
reject do, and how memory settings merge. No I/O; the stores execute the plans.

Upsert rules (same (scope, owner, user, key) is one row):

* no row yet → insert it (audit `add`).
* extraction (`pending_review`) meets an `active` row (a person saved or approved it):
  same value → unchanged; different value → a pending *revision* of that row (audit `propose`);
  at most one open revision per memory, a newer proposal replaces the older one.
* extraction meets a `pending_review` row → updated in place when the value differs.
* extraction meets an `archived` row: the same value was rejected or archived before, so it stays
  unchanged; a different value re-opens the row as `pending_review`.
* explicit writes (`active`, e.g. tool saves) update directly and close any open revision, which
  would otherwise later overwrite what the person just said.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from store.model import (
    AuditAction,
    Memory,
    MemorySettings,
    NewMemory,
    Revision,
    SettingsRow,
    Status,
    UpsertAction,
)

PlanKind = Literal["insert", "update", "propose", "unchanged"]


@dataclass(frozen=True, kw_only=True, slots=True)
class UpsertPlan:
    """What to do for one upsert, decided from the existing row, its open revision and the input."""

    kind: PlanKind
    action: UpsertAction
    audit: AuditAction | None
    status: Status | None = None  # the row's status after an insert/update
    close_revision: bool = False  # reject the open revision (explicit write supersedes it)
    replace_revision: bool = False  # an open revision exists and gets the new proposal


def same_value(a: str, b: str) -> bool:
    """Values are equal when they differ at most in surrounding or repeated whitespace."""
    return " ".join(a.split()) == " ".join(b.split())


def plan_upsert(existing: Memory | None, open_revision: Revision | None, new: NewMemory) -> UpsertPlan:
    """Decide an upsert (see the module docstring for the rules)."""
    if existing is None:
        return UpsertPlan(kind="insert", action="created", audit="add", status=new.status)
    if new.status == "pending_review":
        if existing.status == "active":
            if same_value(existing.value, new.value):
                return UpsertPlan(kind="unchanged", action="unchanged", audit=None)
            if open_revision is not None and same_value(open_revision.new_value, new.value):
                return UpsertPlan(kind="unchanged", action="unchanged", audit=None)
            return UpsertPlan(
                kind="propose",
                action="revision_proposed",
                audit="propose",
                replace_revision=open_revision is not None,
            )
        if same_value(existing.value, new.value):
            return UpsertPlan(kind="unchanged", action="unchanged", audit=None)
        return UpsertPlan(kind="update", action="updated", audit="update", status="pending_review")
    # explicit write (active or archived): the caller states the truth
    if existing.status == new.status and same_value(existing.value, new.value):
        return UpsertPlan(kind="unchanged", action="unchanged", audit=None)
    return UpsertPlan(
        kind="update",
        action="updated",
        audit="update",
        status=new.status,
        close_revision=open_revision is not None,
    )


ReviewKind = Literal["activate", "apply_revision", "archive", "discard_revision", "nothing"]


def plan_approve(memory: Memory, open_revision: Revision | None) -> ReviewKind:
    """Approve: apply the open revision of an active memory, or make a pending memory active."""
    if open_revision is not None:
        return "apply_revision"
    if memory.status == "pending_review":
        return "activate"
    return "nothing"


def plan_reject(memory: Memory, open_revision: Revision | None) -> ReviewKind:
    """Reject: discard the open revision, or archive a pending memory (kept so it is not re-proposed)."""
    if open_revision is not None:
        return "discard_revision"
    if memory.status == "pending_review":
        return "archive"
    return "nothing"


SETTINGS_FIELDS = (
    "enabled",
    "persona_learning",
    "extraction_prompt",
    "min_confidence",
    "pending_days",
    "archived_days",
    "history",
    "history_days",
    "review_tool_saves",
    "known_personas_only",
)


def merge_settings(
    rows: Iterable[Mapping[str, Any]], defaults: MemorySettings | None = None
) -> MemorySettings:
    """Merge settings rows from least to most specific (global, team, persona) over the defaults.

    A NULL field inherits; an empty extraction prompt clears an inherited override."""
    merged: dict[str, Any] = {}
    base = defaults or MemorySettings()
    for name in SETTINGS_FIELDS:
        merged[name] = getattr(base, name)
    for row in rows:
        for name in SETTINGS_FIELDS:
            value = row.get(name)
            if value is not None:
                merged[name] = value
    if merged["extraction_prompt"] is not None and not str(merged["extraction_prompt"]).strip():
        merged["extraction_prompt"] = None
    return MemorySettings(
        enabled=bool(merged["enabled"]),
        persona_learning=bool(merged["persona_learning"]),
        extraction_prompt=merged["extraction_prompt"],
        min_confidence=float(merged["min_confidence"]),
        pending_days=None if merged["pending_days"] is None else int(merged["pending_days"]),
        archived_days=None if merged["archived_days"] is None else int(merged["archived_days"]),
        history=bool(merged["history"]),
        history_days=None if merged["history_days"] is None else int(merged["history_days"]),
        review_tool_saves=bool(merged["review_tool_saves"]),
        known_personas_only=bool(merged["known_personas_only"]),
    )


WORKER_ACTOR = "worker"


def check_may_decide(actor: str) -> None:
    """Raise PermissionError when `actor` is the worker: extraction proposes, only people decide."""
    if actor == WORKER_ACTOR or actor.startswith(f"{WORKER_ACTOR}:"):
        raise PermissionError("the worker's identity cannot approve, reject or edit memories")


def storable_confidence(value: float) -> float:
    """A confidence rounded to 6 decimals: REAL keeps ~7 digits, so this is what it holds (written
    unrounded, tiny values underflow it; read back unrounded, 0.7 shows as 0.69999998)."""
    return round(float(value), 6)


def validate_new_memory(memory: NewMemory) -> None:
    """Raise ValueError naming the problem when a memory breaks the table's invariants."""
    if memory.scope == "persona_user" and memory.user_id is None:
        raise ValueError("a persona_user memory needs user_id (the user within the persona)")
    if memory.scope != "persona_user" and memory.user_id is not None:
        raise ValueError(f"a {memory.scope} memory must not carry user_id; only persona_user memories do")
    if not memory.key.strip():
        raise ValueError("memory key is empty; give a short label of 2-6 words")
    if not memory.value.strip():
        raise ValueError(f"memory value for key {memory.key!r} is empty")
    if not 0.0 <= memory.confidence <= 1.0:
        raise ValueError(f"confidence must be within 0..1, got {memory.confidence}")


EXTRACTION_PROMPT_MAX_CHARS = 20_000


def check_settings_row(row: SettingsRow) -> None:
    """Raise ValueError naming the field when a settings row is out of range or mis-targeted."""
    if row.level not in ("global", "team", "persona"):
        raise ValueError(f"settings level must be global, team or persona, got {row.level!r}")
    if (row.level == "global") != (row.target_id is None):
        raise ValueError("global settings take no target id; team and persona settings need one")
    if row.min_confidence is not None and not 0.0 <= row.min_confidence <= 1.0:
        raise ValueError(f"min_confidence must be within 0..1, got {row.min_confidence}")
    for name in ("pending_days", "archived_days", "history_days"):
        days = getattr(row, name)
        if days is not None and not 1 <= days <= 36_500:
            raise ValueError(f"{name} must be between 1 and 36500 days (or null to inherit), got {days}")
    if row.extraction_prompt is not None and len(row.extraction_prompt) > EXTRACTION_PROMPT_MAX_CHARS:
        raise ValueError(
            f"extraction_prompt is {len(row.extraction_prompt)} characters; the limit is "
            f"{EXTRACTION_PROMPT_MAX_CHARS}"
        )
