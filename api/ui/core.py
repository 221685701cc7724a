"""The web UI's decisions, free of I/O: sessions and CSRF tokens, who sees which page, parsing the
filter and settings forms, and the view models the templates render. `api/ui/` is the shell
around it (HTTP, templates, the calls into `api/operations.py`, which holds the rules)."""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, cast
from urllib.parse import urlencode

from store.model import ReviewQuery, Scope

SESSION_COOKIE: Final = "pmem_session"
CSRF_FIELD: Final = "csrf_token"
COOKIE_PATH: Final = "/ui"
SCOPES: Final = ("user", "persona", "persona_user")
REVIEWERS: Final = frozenset({"admin", "team_admin"})

# The Content-Security-Policy of every UI response: the server's own origin only, no inline code.
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # /ui/login?token=… must never leak in a Referer
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


# --- sessions ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionCookie:
    """The `pmem_session` cookie's attributes (the value is a random session token, never a JWT);
    the fields are named as Starlette's `Response.set_cookie` keywords."""

    value: str
    max_age: int
    secure: bool
    path: str = COOKIE_PATH
    httponly: bool = True
    samesite: Literal["strict"] = "strict"


def session_cookie(token: str, *, expires_at: float, now: float, scheme: str) -> SessionCookie | None:
    """The cookie of a new session: it lives as long as the session; Secure over https. None when
    `expires_at` has passed."""
    max_age = math.floor(expires_at - now)
    if max_age <= 0:
        return None
    return SessionCookie(value=token, max_age=max_age, secure=scheme == "https")


def landing_path(role: str) -> str:
    """Where a person lands after signing in: reviewers on the queue, everyone else on their memories."""
    return "/ui/review" if role in REVIEWERS else "/ui/me"


def safe_next(candidate: str | None, role: str) -> str:
    """A post-sign-in destination inside the UI (never an open redirect), else the role's landing page."""
    inside = candidate is not None and candidate.startswith("/ui/") and "\\" not in candidate
    if candidate and inside:
        if candidate.startswith(("/ui/review", "/ui/settings", "/ui/memories")) and role not in REVIEWERS:
            return landing_path(role)
        return candidate
    return landing_path(role)


@dataclass(frozen=True, slots=True)
class NavLink:
    href: str
    label: str
    current: bool


def nav_links(role: str, path: str) -> tuple[NavLink, ...]:
    """The navigation a role sees: what it may not use is not shown (the server refuses it anyway)."""
    links = []
    if role in REVIEWERS:
        links.append(("/ui/review", "Review queue"))
    links.append(("/ui/me", "My memories"))
    if role in REVIEWERS:
        links.append(("/ui/settings", "Settings"))
    return tuple(NavLink(href, label, path == href or path.startswith(href + "/")) for href, label in links)


# --- parsing ------------------------------------------------------------------------------------


def parse_uuid(raw: str | None) -> uuid.UUID | None:
    """A UUID, or None when blank; ValueError names what was wrong."""
    if raw is None or not raw.strip():
        return None
    try:
        return uuid.UUID(raw.strip())
    except ValueError:
        raise ValueError("not a valid id (expected a UUID like 6d43c50b-3849-…)") from None


def parse_confidence(raw: str | None) -> float | None:
    """A confidence between 0 and 1, or None when blank."""
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError("enter a number between 0 and 1, like 0.7") from None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError("enter a number between 0 and 1, like 0.7")
    return value


@dataclass(frozen=True, slots=True)
class ReviewFilters:
    """The review queue's filters, as the page's GET form sends them."""

    team_id: uuid.UUID | None = None
    scope: Scope | None = None
    persona_id: uuid.UUID | None = None
    user_id: uuid.UUID | None = None
    min_confidence: float | None = None
    cursor: str | None = None

    @property
    def active(self) -> bool:
        """Whether any filter (not the page position) narrows the queue."""
        narrowing = (self.team_id, self.scope, self.persona_id, self.user_id, self.min_confidence)
        return any(v is not None for v in narrowing)

    def summary(self) -> str:
        """The active filters in a few words (shown while the filter form is folded)."""
        parts = []
        if self.team_id:
            parts.append(f"team {short_id(self.team_id)}")
        if self.scope:
            parts.append(SCOPE_CHOICES[self.scope].lower())
        if self.persona_id:
            parts.append(f"persona {short_id(self.persona_id)}")
        if self.user_id:
            parts.append(f"user {short_id(self.user_id)}")
        if self.min_confidence is not None:
            parts.append(f"confidence ≥ {self.min_confidence:g}")
        return ", ".join(parts) if parts else "none: showing everything you may review"

    def query(self, *, cursor: str | None = None) -> str:
        """The query string of these filters at `cursor` (the first page when None)."""
        pairs = {
            "team_id": self.team_id,
            "scope": self.scope,
            "persona_id": self.persona_id,
            "user_id": self.user_id,
            "min_confidence": None if self.min_confidence is None else f"{self.min_confidence:g}",
            "cursor": cursor,
        }
        return urlencode({k: str(v) for k, v in pairs.items() if v is not None})

    def review_query(self, *, limit: int) -> ReviewQuery:
        """The store's query of these filters, `limit` items a page."""
        return ReviewQuery(limit=limit, **{field.name: getattr(self, field.name) for field in FILTER_FIELDS})


# every filter of the page is a field of the store's query, under the same name
FILTER_FIELDS: Final = dataclasses.fields(ReviewFilters)


def parse_review_filters(params: Mapping[str, str]) -> tuple[ReviewFilters, dict[str, str]]:
    """The filters from the query string, and an error message per field that could not be read
    (that field is then ignored, and the page shows the message next to it)."""
    errors: dict[str, str] = {}
    values: dict[str, Any] = {}
    for name in ("team_id", "persona_id", "user_id"):
        try:
            values[name] = parse_uuid(params.get(name))
        except ValueError as exc:
            errors[name] = str(exc)
    raw_scope = (params.get("scope") or "").strip()
    scope: Scope | None = None
    if raw_scope in SCOPES:
        scope = cast(Scope, raw_scope)
    elif raw_scope:
        errors["scope"] = "choose whose memories to show from the list"
    try:
        values["min_confidence"] = parse_confidence(params.get("min_confidence"))
    except ValueError as exc:
        errors["min_confidence"] = str(exc)
    cursor = (params.get("cursor") or "").strip() or None
    return ReviewFilters(scope=scope, cursor=cursor, **values), errors


def parse_ids(raw: Iterable[str]) -> tuple[list[uuid.UUID], list[str]]:
    """The selected ids of a bulk form: (valid ids without duplicates, the strings that were not ids)."""
    ids: list[uuid.UUID] = []
    bad: list[str] = []
    for text in raw:
        try:
            value = uuid.UUID(text.strip())
        except ValueError:
            bad.append(text)
            continue
        if value not in ids:
            ids.append(value)
    return ids, bad


# --- settings -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SettingField:
    name: str
    label: str
    kind: Literal["switch", "text", "confidence", "days"]
    help: str


SETTING_FIELDS: Final = (
    SettingField("enabled", "Memory", "switch", "Off: nothing is extracted, recalled or hinted."),
    SettingField(
        "persona_learning",
        "Persona learning",
        "switch",
        "On: conversations may also teach a persona facts about itself (persona scope).",
    ),
    SettingField(
        "extraction_prompt",
        "Extraction prompt override",
        "text",
        "Replaces the “what to keep” part of the extraction prompt. Leave empty to inherit.",
    ),
    SettingField(
        "min_confidence",
        "Minimum confidence",
        "confidence",
        "Candidates below this (0–1) are dropped. Leave empty to inherit.",
    ),
    SettingField(
        "pending_days",
        "Reject pending after (days)",
        "days",
        "Pending memories older than this are rejected. Leave empty to inherit.",
    ),
    SettingField(
        "archived_days",
        "Erase archived after (days)",
        "days",
        "Archived memories older than this are erased. Leave empty to inherit.",
    ),
    SettingField(
        "history",
        "Conversation history",
        "switch",
        "On: what was said is kept, so recall can quote earlier conversations to the same person.",
    ),
    SettingField(
        "history_days",
        "Erase conversations after (days)",
        "days",
        "Remembered conversation turns older than this are erased. Leave empty to inherit.",
    ),
    SettingField(
        "review_tool_saves",
        "Review tool saves",
        "switch",
        "On: what a model saves through the memory tools waits for review instead of being active at once.",
    ),
    SettingField(
        "known_personas_only",
        "Known personas only",
        "switch",
        "On: an event for a persona the directory does not know goes to the dead letters instead of "
        "being remembered.",
    ),
)
SWITCH_CHOICES: Final = (("inherit", "Inherit"), ("on", "On"), ("off", "Off"))
MAX_DAYS: Final = 36500


def parse_settings_form(form: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings form as values (None = inherit) and an error per field that could not be read."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for field in SETTING_FIELDS:
        raw = (form.get(field.name) or "").strip()
        if field.kind == "switch":
            if raw in ("", "inherit"):
                values[field.name] = None
            elif raw in ("on", "off"):
                values[field.name] = raw == "on"
            else:
                errors[field.name] = "choose inherit, on or off"
        elif field.kind == "text":
            values[field.name] = raw or None
        elif field.kind == "confidence":
            try:
                values[field.name] = parse_confidence(raw)
            except ValueError as exc:
                errors[field.name] = str(exc)
        else:
            if not raw:
                values[field.name] = None
            elif raw.isdigit() and 1 <= int(raw) <= MAX_DAYS:
                values[field.name] = int(raw)
            else:
                errors[field.name] = f"enter a whole number of days from 1 to {MAX_DAYS}"
    return values, errors


def form_value(field: SettingField, value: Any) -> str:
    """A stored setting as its form control's value (switches: inherit / on / off)."""
    if field.kind == "switch":
        return switch_choice(value)
    if value is None:
        return ""
    return f"{value:g}" if isinstance(value, float) else str(value)


LEVEL_NAMES: Final = {
    "global": "the global settings",
    "team": "the team's settings",
    "persona": "the persona's settings",
}
AUDIT_ACTIONS: Final = {
    "add": "Extracted",
    "update": "Updated by the worker",
    "propose": "Change proposed",
    "approve": "Approved",
    "reject": "Rejected",
    "edit": "Edited",
    "archive": "Archived",
    "delete": "Erased",
    "erase": "Erased",
    "pin": "Pinned",
    "unpin": "Unpinned",
}


@dataclass(frozen=True, slots=True)
class Effect:
    """What is in effect at a level, and where it comes from."""

    value: str
    source: str

    def __str__(self) -> str:
        return f"In effect: {self.value} · {self.source}"


def effect_of(level: str, source: str, effective: Any, field: str = "") -> Effect:
    """`source` is the level that set the effective value, or `default` (the deployment's)."""
    if source == level:
        where = "set here"
    elif source == "default":
        where = "the deployment default (no level sets it)"
    else:
        where = f"inherited from {LEVEL_NAMES.get(source, source)}"
    return Effect(show_setting(effective, field), where)


def field_named(message: str) -> str:
    """The settings field an error message is about (its name appears in it), else `form`."""
    for field in SETTING_FIELDS:
        if field.name in message:
            return field.name
    return "form"


def show_setting(value: Any, field: str = "") -> str:
    """A setting's value as the page shows it."""
    if value is None:
        if field == "extraction_prompt":
            return "the built-in prompt"
        if field.endswith("_days"):
            return "never"
        return "not set"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return f"custom ({len(value)} characters)"
    return str(value)


def switch_choice(value: Any) -> str:
    """The radio choice for a stored switch value."""
    if value is None:
        return "inherit"
    return "on" if value else "off"


# --- view models ------------------------------------------------------------------------------


def field_of(item: Any, name: str, default: Any = None) -> Any:
    """`item[name]` for a mapping, else `item.name` (operations may answer either)."""
    if isinstance(item, Mapping):
        return item.get(name, default)
    return getattr(item, name, default)


def as_datetime(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    text = str(value)
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def show_time(value: Any) -> str:
    """A timestamp as people read it, in UTC: `29 Nov 2026, 18:00 UTC`."""
    moment = as_datetime(value)
    if moment is None:
        return "unknown time"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%-d %b %Y, %H:%M UTC")


def show_confidence(value: Any) -> str:
    return "—" if value is None else f"{float(value):.2f}"


def short_id(value: Any) -> str:
    return "—" if value is None else str(value)[:8]


@dataclass(frozen=True, slots=True)
class Names:
    """Display names of the teams, personas and users a page shows, by id (as text)."""

    teams: Mapping[str, str] = dataclasses.field(default_factory=dict)
    personas: Mapping[str, str] = dataclasses.field(default_factory=dict)
    users: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def name(self, kind: str, value: Any) -> str | None:
        """The known name of a team, persona or user id, else None."""
        if value is None:
            return None
        table = {"team": self.teams, "persona": self.personas, "user": self.users}[kind]
        return table.get(str(value))

    def label(self, kind: str, value: Any) -> str:
        """The name where known, else the id's first eight characters."""
        return self.name(kind, value) or short_id(value)

    def called(self, kind: str, value: Any) -> str:
        """The name where known, else the kind and the id's first eight characters (`persona 356511b6`)."""
        return self.name(kind, value) or f"{kind} {short_id(value)}"

    def scope_words(self, scope: str, owner_id: Any, user_id: Any = None) -> str:
        """`scope_words` for a memory as a reviewer reads it: whose it is, by name."""
        if scope == "user":
            return scope_words(scope, user=self.called("user", owner_id))
        persona = self.called("persona", owner_id)
        return scope_words(scope, persona=persona, user=self.called("user", user_id) if user_id else None)


NO_NAMES: Final = Names()


def review_ids(rows: Iterable[Any]) -> dict[str, set[str]]:
    """The team, persona and user ids review rows show, by kind (to look their names up)."""
    ids: dict[str, set[str]] = {"team": set(), "persona": set(), "user": set()}
    for row in rows:
        if row.team_id:
            ids["team"].add(row.team_id)
        if row.scope == "user":
            ids["user"].add(row.owner_id)
        else:
            ids["persona"].add(row.owner_id)
        if row.user_id:
            ids["user"].add(row.user_id)
    return ids


ROLE_NAMES: Final = {"admin": "admin", "team_admin": "team admin", "user": "user", "service": "service"}


def signed_in_as(role: str, name: str | None, subject: Any) -> str:
    """Who is signed in, as the page header says it: `Signed in as Alice Martin`, a reviewer's
    role after the name (`Signed in as Priya Raman, admin`); without a known name the role and the
    id's first eight characters."""
    role_name = ROLE_NAMES.get(role, role)
    if name is None:
        return f"Signed in as {role_name} {short_id(subject)}"
    if role == "user":
        return f"Signed in as {name}"
    return f"Signed in as {name}, {role_name}"


def possessive(name: str) -> str:
    """`Chef` → `Chef's`, `James` → `James'`."""
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def scope_words(scope: str, *, persona: str | None = None, user: str | None = None) -> str:
    """Whose a memory of `scope` is, in the words a person uses: `user` → "about you", `persona` →
    "Chef's own", `persona_user` → "you, with Chef". `user` names the person when someone else
    reads it (a reviewer: "about Alice"); without `persona` it is "the persona"."""
    who = user or "you"
    assistant = persona or "the persona"
    if scope == "user":
        return f"about {who}"
    if scope == "persona":
        return f"{possessive(assistant)} own"
    if scope == "persona_user":
        return f"{who}, with {assistant}"
    return scope


def capitalized(text: str) -> str:
    """The text with its first letter in upper case (a heading, a menu option)."""
    return text[:1].upper() + text[1:]


# the review filter's choices: whose memories, of anyone's
SCOPE_CHOICES: Final = {
    scope: capitalized(scope_words(scope, persona="a persona", user="a user")) for scope in SCOPES
}


@dataclass(frozen=True, slots=True)
class ReviewRow:
    """One review item (a pending memory or a proposed change), ready to render."""

    id: str
    kind: str
    memory_id: str
    scope: str
    owner_id: str
    user_id: str | None
    team_id: str | None
    key: str
    value: str
    old_value: str | None
    new_value: str | None
    confidence: str
    channel_id: str | None
    created: str
    created_iso: str
    evidence: str | None = None
    said: str | None = None  # when the evidence was said, as people read it
    said_iso: str = ""
    pinned: bool = False

    @property
    def is_change(self) -> bool:
        return self.kind == "revision"

    @property
    def proposed(self) -> str:
        """The value approving would make active."""
        return self.new_value if self.is_change and self.new_value is not None else self.value


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def review_row(item: Any) -> ReviewRow:
    kind = str(field_of(item, "kind", "memory"))
    created = as_datetime(field_of(item, "created_at"))
    value = field_of(item, "value")
    new_value = field_of(item, "new_value")
    return ReviewRow(
        id=str(field_of(item, "id")),
        kind=kind,
        memory_id=str(field_of(item, "memory_id") or field_of(item, "id")),
        scope=str(field_of(item, "scope")),
        owner_id=str(field_of(item, "owner_id")),
        user_id=_str_or_none(field_of(item, "user_id")),
        team_id=_str_or_none(field_of(item, "team_id")),
        key=str(field_of(item, "key")),
        value=str(value if value is not None else new_value or ""),
        old_value=_str_or_none(field_of(item, "old_value")),
        new_value=_str_or_none(new_value),
        confidence=show_confidence(field_of(item, "confidence")),
        channel_id=_str_or_none(field_of(item, "source_channel_id")),
        created=show_time(created),
        created_iso=created.isoformat() if created else "",
        pinned=bool(field_of(item, "pinned", False)),
        **said_fields(item),
    )


def said_fields(item: Any) -> dict[str, Any]:
    """The evidence quote of a memory, revision or review item and when it was said (None: unknown)."""
    evidence = field_of(item, "evidence")
    observed = as_datetime(field_of(item, "observed_at"))
    return {
        "evidence": evidence.strip() if isinstance(evidence, str) and evidence.strip() else None,
        "said": None if observed is None else show_time(observed),
        "said_iso": "" if observed is None else observed.isoformat(),
    }


@dataclass(frozen=True, slots=True)
class MemoryCard:
    """One of my memories, ready to render."""

    id: str
    scope: str
    key: str
    value: str
    status: str
    confidence: str
    created: str
    updated: str
    evidence: str | None = None
    said: str | None = None
    said_iso: str = ""
    pinned: bool = False

    @property
    def pending(self) -> bool:
        return self.status == "pending_review"


@dataclass(frozen=True, slots=True)
class MemoryGroup:
    """My memories of one scope (and persona)."""

    heading: str
    description: str
    persona_id: str | None
    cards: tuple[MemoryCard, ...]

    @property
    def anchor(self) -> str:
        return f"group-{self.persona_id or 'user'}"


def memory_card(item: Any) -> MemoryCard:
    return MemoryCard(
        id=str(field_of(item, "id")),
        scope=str(field_of(item, "scope")),
        key=str(field_of(item, "key")),
        value=str(field_of(item, "value")),
        status=str(field_of(item, "status")),
        confidence=show_confidence(field_of(item, "confidence")),
        created=show_time(field_of(item, "created_at")),
        updated=show_time(field_of(item, "updated_at") or field_of(item, "created_at")),
        pinned=bool(field_of(item, "pinned", False)),
        **said_fields(item),
    )


def group_my_memories(items: Iterable[Any], names: Names = NO_NAMES) -> list[MemoryGroup]:
    """My memories grouped by scope and persona: what every assistant may know about me first, then
    one group per persona (a `persona_user` memory's owner is the persona). Archived ones are not
    shown (they are not used and not mine to edit); within a group, by key."""
    general: list[MemoryCard] = []
    by_persona: dict[str, list[MemoryCard]] = {}
    for item in items:
        card = memory_card(item)
        if card.status == "archived":
            continue
        if card.scope == "persona_user":
            by_persona.setdefault(str(field_of(item, "owner_id")), []).append(card)
        else:
            general.append(card)
    groups: list[MemoryGroup] = []
    if general:
        groups.append(
            MemoryGroup(
                heading=capitalized(scope_words("user")),
                description="Any assistant you talk to may use these.",
                persona_id=None,
                cards=tuple(sorted(general, key=lambda c: c.key)),
            )
        )
    for persona_id in sorted(by_persona):
        groups.append(
            MemoryGroup(
                heading=capitalized(scope_words("persona_user", persona=names.called("persona", persona_id))),
                description="Only this persona uses these, in its conversations with you.",
                persona_id=persona_id,
                cards=tuple(sorted(by_persona[persona_id], key=lambda c: c.key)),
            )
        )
    return groups


@dataclass(frozen=True, slots=True)
class ConversationRow:
    """One remembered conversation (a channel's turns of mine), ready to render."""

    channel_id: str
    when: str
    when_iso: str
    with_whom: str
    first_line: str
    turns: str


def personas_label(persona_ids: Iterable[Any], names: Names = NO_NAMES) -> str:
    """Who the conversation was with: `Chef` (or `persona 356511b6` unnamed), several, or `no persona`."""
    named = [names.called("persona", p) for p in persona_ids if p is not None]
    if not named:
        return "no persona"
    return ", ".join(named)


def conversation_row(item: Any, names: Names = NO_NAMES) -> ConversationRow:
    """A remembered conversation as the page shows it: its latest date, personas, first line."""
    last = as_datetime(field_of(item, "last_at"))
    count = int(field_of(item, "turn_count", 0) or 0)
    return ConversationRow(
        channel_id=str(field_of(item, "channel_id")),
        when=show_time(last),
        when_iso=last.isoformat() if last else "",
        with_whom=personas_label(field_of(item, "persona_ids", ()) or (), names),
        first_line=str(field_of(item, "first_line", "") or "") or "(no text)",
        turns=plural(count, "message"),
    )


def plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"
