"""Plain data types shared by every store implementation, the worker and the tools (no I/O)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, Literal, TypeVar, get_args

Scope = Literal["user", "persona", "persona_user"]
Status = Literal["active", "pending_review", "archived"]
UpsertAction = Literal["created", "updated", "revision_proposed", "unchanged"]
SettingsLevel = Literal["global", "team", "persona"]
AuditAction = Literal[
    "add", "update", "propose", "approve", "reject", "edit", "archive", "delete", "erase", "pin", "unpin"
]
# Which recall branch to run: both fused (default), or one alone (evaluation, benchmarks).
Retriever = Literal["hybrid", "vector", "keyword"]

SCOPES: tuple[Scope, ...] = ("user", "persona", "persona_user")
AUDIT_ACTIONS: tuple[AuditAction, ...] = get_args(AuditAction)
STATUSES: tuple[Status, ...] = ("active", "pending_review", "archived")
# Recall merges the same key across scopes; the most specific scope wins.
SCOPE_PRIORITY: dict[Scope, int] = {"persona_user": 0, "persona": 1, "user": 2}
NIL_UUID = uuid.UUID(int=0)
DirectoryKind = Literal["team", "persona", "user"]
DIRECTORY_KINDS: tuple[DirectoryKind, ...] = ("team", "persona", "user")


@dataclass(frozen=True, kw_only=True, slots=True)
class DirectoryEntry:
    """One team's, persona's or user's display name."""

    kind: DirectoryKind
    id: uuid.UUID
    name: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Memory:
    """One row of the `memories` table, embedding excluded."""

    id: uuid.UUID
    scope: Scope
    owner_id: uuid.UUID
    user_id: uuid.UUID | None
    key: str
    value: str
    source_channel_id: uuid.UUID | None
    confidence: float
    status: Status
    created_at: datetime
    updated_at: datetime
    # the team of the conversation that wrote it (None: no team); part of the row's identity
    team_id: uuid.UUID | None = None
    # what was said that it comes from (redacted, with the speaker's role, capped; None: unknown)
    evidence: str | None = None
    # when it was said (the message's time, else the conversation's); None: unknown
    observed_at: datetime | None = None
    # a reviewer or the user pinned it: while active, it is in every hint of its context
    pinned: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class NewMemory:
    """What a writer hands to `store.writes.upsert`; the store assigns id and timestamps."""

    scope: Scope
    owner_id: uuid.UUID
    user_id: uuid.UUID | None
    key: str
    value: str
    confidence: float = 1.0
    status: Status = "pending_review"
    source_channel_id: uuid.UUID | None = None
    embedding: list[float] | None = None
    # when the conversation it came from happened; becomes created_at of a new row (default: now),
    # so recall can honour time cues ("what did I say in March?")
    observed_at: datetime | None = None
    team_id: uuid.UUID | None = None
    # the messages it comes from, as `Memory.evidence` (the writer redacts and caps it)
    evidence: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryFilter:
    """Criteria for `store.listing.list_memories`; unset fields do not filter."""

    scope: Scope | None = None
    owner_id: uuid.UUID | None = None
    user_id: uuid.UUID | None = None
    status: Status | None = None
    key: str | None = None
    source_channel_id: uuid.UUID | None = None
    key_prefix: str | None = None  # keys starting with this text (case-sensitive)
    # only rows visible in one team's context (rows of no team, or of `team_id`)
    team_context: bool = False
    team_id: uuid.UUID | None = None
    limit: int = 100
    offset: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class UpsertResult:
    """Outcome of one upsert: the memory's id, what happened, and the revision id if one was proposed."""

    memory_id: uuid.UUID
    action: UpsertAction
    revision_id: uuid.UUID | None = None
    # write_event's near-duplicate check found `memory_id` already saying it: nothing was written
    near_duplicate: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class RecallHit:
    """A recalled memory with its fused score (higher is better)."""

    memory: Memory
    score: float
    sources: tuple[str, ...] = field(default_factory=tuple)  # "vector", "text", "top"
    # the query's raw cosine with the memory's embedding (None: the vector branch did not find it);
    # unlike `score`, comparable across recalls, so memories and turns can be merged on it
    cosine: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextFacts:
    """A hint's facts of one context: the memories most relevant to the message, every fact by
    standing when they are fewer than asked for (None: they are not, or not asked for), the
    pinned ones (most recently changed first), and the open proposed change of each of them that
    has one."""

    relevant: list[RecallHit]
    standing: list[RecallHit] | None
    pinned: list[Memory]
    pending: dict[uuid.UUID, Revision]


@dataclass(frozen=True, kw_only=True, slots=True)
class Revision:
    """A proposed change to a reviewed (active) memory, awaiting approve/reject."""

    id: uuid.UUID
    memory_id: uuid.UUID
    old_value: str
    new_value: str
    confidence: float
    source_event_id: uuid.UUID | None
    status: Literal["pending", "approved", "rejected"]
    created_at: datetime
    # what was said that the proposed value comes from, and when (as on `Memory`)
    evidence: str | None = None
    observed_at: datetime | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditEntry:
    """One row of the audit trail."""

    id: int
    memory_id: uuid.UUID | None
    action: AuditAction
    old_value: str | None
    new_value: str | None
    actor: str
    event_id: uuid.UUID | None
    at: datetime
    scope: Scope | None = None
    key: str | None = None
    revision_id: uuid.UUID | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class MemorySettings:
    """Effective memory policy for one (team, persona) after merging global/team/persona rows."""

    enabled: bool = True
    persona_learning: bool = False
    extraction_prompt: str | None = None
    min_confidence: float = 0.5
    # retention: pending memories are rejected after `pending_days`, archived ones erased after
    # `archived_days` (None: kept)
    pending_days: int | None = 30
    archived_days: int | None = 30
    # conversation memory: store the conversations' turns, and erase them after `history_days`
    history: bool = True
    history_days: int | None = 90
    # a model, not the user, decides to call a save tool: on, its saves wait for review
    review_tool_saves: bool = False
    # on: an event for a persona the directory does not know is dead-lettered (`unknown_persona`)
    known_personas_only: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class OwnerRef:
    """Identifies one memory owner: (scope, owner_id, user_id for persona_user)."""

    scope: Scope
    owner_id: uuid.UUID
    user_id: uuid.UUID | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class EventWrite:
    """What `write_event` did: nothing (duplicate event) or one result per memory."""

    duplicate: bool
    results: tuple[UpsertResult, ...] = ()
    # a duplicate: the content hash the event was first written with (None when not recorded)
    earlier_body_sha256: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class EventMemory:
    """One memory an event's `write_event` changed, read back from the audit trail (`event_writes`)."""

    memory_id: uuid.UUID
    action: UpsertAction  # never "unchanged": an unchanged memory leaves no audit row
    scope: Scope
    key: str


ReviewKind = Literal["memory", "revision"]
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class ReviewItem:
    """One entry of the review queue: a pending memory, or a proposed change to a reviewed one.

    `id` is the memory's id (kind `memory`) or the revision's id (kind `revision`); `value` is set for
    a memory, `old_value`/`new_value` for a revision."""

    id: uuid.UUID
    kind: ReviewKind
    memory_id: uuid.UUID
    scope: Scope
    owner_id: uuid.UUID
    user_id: uuid.UUID | None
    team_id: uuid.UUID | None
    key: str
    value: str | None
    old_value: str | None
    new_value: str | None
    confidence: float
    source_channel_id: uuid.UUID | None
    created_at: datetime
    # the evidence and time of the memory (kind `memory`) or of the proposed value (`revision`)
    evidence: str | None = None
    observed_at: datetime | None = None
    # the memory is pinned: once active, in every hint of its context
    pinned: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class ReviewQuery:
    """What the review queue shows: filters, the caller's team limit, and the page position.

    `teams` limits the queue to memories of those teams (a team admin's); None shows every team and
    memories of no team (an admin)."""

    teams: frozenset[uuid.UUID] | None = None
    team_id: uuid.UUID | None = None
    scope: Scope | None = None
    persona_id: uuid.UUID | None = None
    user_id: uuid.UUID | None = None
    min_confidence: float | None = None
    limit: int = 50
    cursor: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RecallQuery:
    """One memory recall: the user's (and persona's) active memories visible in the team context
    (rows of no team and of that team), the best `limit` for `text` by `retriever`.
    `query_embedding` stands in for the embedder's vector of `text`."""

    user_id: uuid.UUID
    persona_id: uuid.UUID | None
    team_id: uuid.UUID | None
    text: str
    limit: int
    retriever: Retriever = "hybrid"
    query_embedding: Sequence[float] | None = None

    def __post_init__(self) -> None:
        retrievers = get_args(Retriever)
        if self.retriever not in retrievers:
            raise ValueError(f"retriever must be one of {', '.join(retrievers)}, got {self.retriever!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class UserMemoryQuery:
    """A person's own memories (`user` scope owned by them, `persona_user` about them), every status."""

    user_id: uuid.UUID
    scope: Scope | None = None
    persona_id: uuid.UUID | None = None
    status: Status | None = None
    team_id: uuid.UUID | None = None
    limit: int = 50
    cursor: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Page(Generic[T]):
    """One page of a list, newest first, and the cursor of the next page (None: this is the last)."""

    items: tuple[T, ...]
    next_cursor: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class UserExport:
    """Everything stored about one person: their memories, open and decided revisions, audit history."""

    memories: tuple[Memory, ...]
    revisions: tuple[Revision, ...]
    audit: tuple[AuditEntry, ...]
    turns: tuple[Turn, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiKey:
    """A service credential (the key itself is shown once at creation and stored only as a hash)."""

    id: uuid.UUID
    name: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class UiSession:
    """A web-UI session: who signed in (role and teams as their sign-in token named them) and until
    when it lasts."""

    subject: uuid.UUID
    role: str
    teams: tuple[uuid.UUID, ...]
    expires_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class SettingsRow:
    """One level's own settings (None = inherit from the level above)."""

    level: SettingsLevel
    target_id: uuid.UUID | None
    enabled: bool | None = None
    persona_learning: bool | None = None
    extraction_prompt: str | None = None
    min_confidence: float | None = None
    pending_days: int | None = None
    archived_days: int | None = None
    history: bool | None = None
    history_days: int | None = None
    review_tool_saves: bool | None = None
    known_personas_only: bool | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Rejection:
    """A rejected memory (or the memory whose proposed change was rejected), and how many
    conversation turns were erased with it (reject and forget what was said)."""

    memory: Memory
    forgotten_turns: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class RetentionReport:
    """What one retention run did."""

    rejected_memories: int = 0
    rejected_revisions: int = 0
    erased_memories: int = 0
    erased_turns: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class Neighbour:
    """A stored memory near a new one (same owner, active or pending, visible in the new memory's
    team context), and how near: the cosine similarity of their embeddings."""

    memory: Memory
    similarity: float


@dataclass(frozen=True, kw_only=True, slots=True)
class DedupVerdict:
    """What to do with a new memory given its neighbours: skip it because `duplicate_of` already
    says it, or write it (under `key` when set: the stored spelling of the same key)."""

    duplicate_of: uuid.UUID | None = None
    key: str | None = None


# Decides one new memory against its nearest stored neighbours (pure; see extraction.dedup).
DedupRule = Callable[["NewMemory", Sequence["Neighbour"]], DedupVerdict]


@dataclass(frozen=True, kw_only=True, slots=True)
class EmbeddingIdentity:
    """Which embedder made a vector: vectors of different identities are different spaces."""

    provider: str
    model: str
    dim: int

    def describe(self) -> str:
        """`provider model (N dimensions)`, for messages."""
        return f"{self.provider} {self.model} ({self.dim} dimensions)"


TurnRole = Literal["user", "assistant"]
RecallKind = Literal["memory", "turn"]
RecallInclude = Literal["memories", "turns"]
INCLUDE_ALL: tuple[RecallInclude, ...] = ("memories", "turns")


@dataclass(frozen=True, kw_only=True, slots=True)
class NewTurn:
    """One message of an event to store as conversation memory (`write_event(turns=…)`): text
    already redacted; the store assigns the id. `position` is the message's number in the event
    (from 1, as the prompt numbers them)."""

    channel_id: uuid.UUID
    user_id: uuid.UUID
    persona_id: uuid.UUID | None
    team_id: uuid.UUID | None
    role: TurnRole
    text: str
    at: datetime
    position: int
    embedding: list[float] | None = None
    # who said it, when the platform names them (`EventMessage.name`); None: only the role is known
    speaker: str | None = None
    # what full text matches the turn by: `Speaker said, "text"` with the turns around it (what it
    # answers and what answered it; rows stored before 2026-12-04 read `Speaker: text`); None: the
    # turn's text alone
    search_text: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Turn:
    """One stored message of a past conversation: recalled only in the context it was said in
    (the same user, the same persona or none, the same team or none)."""

    id: uuid.UUID
    channel_id: uuid.UUID
    event_id: uuid.UUID
    user_id: uuid.UUID
    persona_id: uuid.UUID | None
    team_id: uuid.UUID | None
    role: TurnRole
    text: str
    at: datetime
    position: int
    speaker: str | None = None  # who said it, when the platform named them

    @property
    def said_by(self) -> str:
        """Who said it as shown: the speaker's name when known, else the role."""
        return self.speaker or self.role


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnHit:
    """A recalled turn with its fused score (higher is better)."""

    turn: Turn
    score: float
    sources: tuple[str, ...] = field(default_factory=tuple)  # "vector", "text"
    cosine: float | None = None  # as `RecallHit.cosine`


@dataclass(frozen=True, kw_only=True, slots=True)
class RecallItem:
    """One entry of recall's list (memories first, then turns): a memory (`memory` set) or a turn
    (`turn` set)."""

    kind: RecallKind
    score: float
    memory: Memory | None = None
    turn: Turn | None = None
    sources: tuple[str, ...] = field(default_factory=tuple)
    cosine: float | None = None  # as `RecallHit.cosine`
    # a memory's change proposed and awaiting review (None: nothing pending, or a turn)
    pending_change: Revision | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Conversation:
    """One remembered conversation of a user (the turns of one event): when, with which persona
    and team, its first line and how many turns are kept."""

    event_id: uuid.UUID
    channel_id: uuid.UUID
    persona_id: uuid.UUID | None
    team_id: uuid.UUID | None
    started_at: datetime
    first_line: str
    turn_count: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ChannelConversation:
    """One channel's remembered turns of a person: when they were said (first and last), with which
    personas and in which teams (None: no persona / no team), the first line and how much is kept."""

    channel_id: uuid.UUID
    persona_ids: tuple[uuid.UUID | None, ...]
    team_ids: tuple[uuid.UUID | None, ...]
    started_at: datetime
    last_at: datetime
    first_line: str
    turn_count: int
    conversation_count: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ConversationQuery:
    """A person's remembered conversations, newest first, one page (`teams` limits them to those
    teams' conversations, as for a team-scoped caller; None: every one)."""

    user_id: uuid.UUID
    persona_id: uuid.UUID | None = None
    team_id: uuid.UUID | None = None
    limit: int = 50
    cursor: str | None = None
