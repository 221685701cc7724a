"""Who is acting: derived from the credential only, never from the request body."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Literal

Role = Literal["user", "team_admin", "admin", "service"]
PERSON_ROLES: tuple[Role, ...] = ("user", "team_admin", "admin")


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """An authenticated caller: a person (JWT) or a service (API key)."""

    role: Role
    subject: uuid.UUID | None = None  # the person's UUID (`sub`); None for a service
    teams: frozenset[uuid.UUID] = field(default_factory=frozenset)
    service_name: str | None = None

    @property
    def is_person(self) -> bool:
        """Whether this is a person (any role but service)."""
        return self.role != "service"

    @property
    def actor(self) -> str:
        """How audit rows name this caller."""
        if self.role == "service":
            return f"service:{self.service_name}"
        return f"{self.role}:{self.subject}"
