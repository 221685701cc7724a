"""Display names the platform sets for its teams, personas and users (events may carry them too)."""

from __future__ import annotations

import uuid
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from api.access import request_scope
from api.deps import Caller, State
from api.errors import BadInput, Forbidden
from store.model import DirectoryEntry, DirectoryKind
from store.rules.admission import admit, refusal
from store.rules.directory import MAX_NAME_CHARS, clean_name
from store.team_scope import team_scope

router = APIRouter(prefix="/v1/directory", tags=["directory"])

DirectoryPath = Literal["teams", "personas", "users"]
_KIND: dict[str, DirectoryKind] = {"teams": "team", "personas": "persona", "users": "user"}


class NameBody(BaseModel):
    """A display name."""

    model_config = ConfigDict(extra="forbid")

    # "a letter, digit or emoji of any script" has no pattern that means the same in the
    # document's regular expressions (ECMA-262, where \w is ASCII) and here: the rule is said in
    # words, checked by `clean_name`, and its refusal is a documented 422
    name: str = Field(
        min_length=1,
        max_length=MAX_NAME_CHARS,
        description="The display name: it needs a letter, digit or emoji (any script); a name of "
        "only punctuation, whitespace or invisible characters is refused with 422.",
    )


@router.put("/{kind}/{item_id}")
async def put_name(
    kind: DirectoryPath, item_id: uuid.UUID, body: NameBody, principal: Caller, state: State
) -> dict[str, str]:
    """Set the name the web UI shows for a team, persona or user (a service key or an admin)."""
    if principal.role not in ("service", "admin"):
        raise Forbidden("display names are set by the platform's service key or an admin")
    name = clean_name(body.name)
    if name is None:
        problem = refusal("name", admit(body.name, one_line=True), fix="give the name without it")
        raise BadInput(problem or "name: has no printable characters")
    with team_scope(request_scope(principal, item_id if kind == "teams" else None)):
        await state.store.directory.set_names([DirectoryEntry(kind=_KIND[kind], id=item_id, name=name)])
    return {"kind": kind, "id": str(item_id), "name": name}
