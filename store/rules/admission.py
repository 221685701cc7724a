"""The one gate for text (pure): every text the product stores or shows passes `admit`, whichever
door it comes through — memory keys, values and evidence (the store's `upsert`, `write_event` and
`edit`), conversation turns (their text, search text and speaker), tool saves (Python, HTTP, MCP),
people's and reviewers' edits (API and web UI), display names, and extraction prompt overrides.

`admit`, in this order:

1. removes the characters a reader cannot see (`store.rules.keys.is_invisible`: control
   characters, zero-width and bidi controls, the tag block U+E0000–U+E007F, the other
   default-ignorable code points) — first, so an invisible character inside a secret cannot hide
   it from the next step;
2. for a one-line text (a key, a value, a name), folds runs of whitespace into one space and
   trims — before redaction, so a card number typed with double spaces is still one number;
3. redacts secrets (`store.rules.secrets.redact`, which reads full-width and look-alike letters
   as the Latin ones): each becomes `[REDACTED:<kind>]`.

It answers the admitted text and what it removed (how many invisible characters, which kinds of
secret), for the door to log and count. Admitting admitted text changes nothing.

`has_content` is the rule for text that carries nothing: once redaction markers are removed, no
letter, digit or emoji (category So, but not the blank braille pattern U+2800, which shows as
nothing) is left — only whitespace, punctuation or marks. Lenient on
purpose: "ok", "thanks", "5" and "👍" have content; "", "...", "?!" and "[REDACTED:password]" do
not. A memory key or value without content is refused (`refusal` names the problem and the fix);
so is a memory whose key names a secret ("my password", "card number": `secret_key_refusal`),
whatever its value; a conversation turn without content is not stored (`admit_turns`).
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from store.model import NewMemory, NewTurn
from store.rules.keys import storable_text
from store.rules.secrets import MARKER_RE, is_secret_key, redact

__all__ = [
    "Admitted",
    "Regated",
    "admit",
    "admit_memory",
    "admit_turns",
    "has_content",
    "refusal",
    "regate_memory",
    "regate_name",
    "regate_turn",
    "secret_key_refusal",
]

# symbols that show as nothing
_BLANK_SYMBOLS = frozenset("\u2800")


@dataclass(frozen=True, kw_only=True, slots=True)
class Admitted:
    """A text as admitted, and what admission removed from it."""

    text: str
    # the kinds of the secrets redacted, in order of appearance (e.g. ("api_key", "jwt"))
    secrets: tuple[str, ...] = ()
    # how many invisible characters were removed
    invisible: int = 0

    @property
    def removed(self) -> bool:
        """Whether admission removed anything (an invisible character or a secret)."""
        return bool(self.secrets) or self.invisible > 0


def admit(text: str, *, one_line: bool = False) -> Admitted:
    """`text` as the product may store and show it (see the module docstring): invisible
    characters removed, secrets redacted, and with `one_line` whitespace runs folded and trimmed."""
    visible = storable_text(text)
    folded = " ".join(visible.split()) if one_line else visible
    redacted, findings = redact(folded)
    return Admitted(
        text=redacted,
        secrets=tuple(finding.kind for finding in findings),
        invisible=len(text) - len(visible),
    )


def has_content(text: str) -> bool:
    """Whether `text` says anything: a letter, a digit or an emoji left once redaction markers are
    removed (see the module docstring)."""
    bare = MARKER_RE.sub(" ", text) if "[REDACTED:" in text else text
    return any(
        char.isalnum() or (unicodedata.category(char) == "So" and char not in _BLANK_SYMBOLS) for char in bare
    )


def refusal(field: str, admitted: Admitted, *, fix: str = "save the fact without it") -> str | None:
    """Why `admitted` cannot be stored as `field` (a key, a value, a name), naming the fix; None
    when it has content (`has_content`)."""
    if has_content(admitted.text):
        return None
    if MARKER_RE.search(admitted.text):
        kinds = ", ".join(dict.fromkeys(kind.replace("_", " ") for kind in admitted.secrets)) or "redacted"
        return f"{field}: holds only a secret ({kinds}); secrets are not stored — {fix}"
    return f"{field}: has no words (only invisible characters, whitespace or punctuation); write it in words"


def secret_key_refusal(key: str) -> str | None:
    """Why a memory under `key` cannot be stored when the key names a secret ("my password",
    "work api key", "card number"): whatever the value, it would be the secret. None otherwise."""
    # a redaction marker ("[REDACTED:api_key]") names a removed secret, not the fact's subject
    if not is_secret_key(MARKER_RE.sub(" ", key) if "[REDACTED:" in key else key):
        return None
    return (
        "key: names a secret (a password, key, token or card); secrets are not stored — "
        "save the fact without it"
    )


def admit_memory(memory: NewMemory) -> NewMemory:
    """A memory as the store writes it: key and value admitted on one line (a changed one loses its
    embedding, for the store to embed the admitted text), evidence admitted (None when nothing is
    left of it). Raises ValueError (`refusal`, `secret_key_refusal`) when the key or the value has
    no content or the key names a secret: a memory that holds a secret is never written."""
    key = admit(memory.key, one_line=True)
    named = secret_key_refusal(key.text)
    if named is not None:
        raise ValueError(named)
    value = admit(memory.value, one_line=True)
    for field, admitted in (("key", key), ("value", value)):
        problem = refusal(field, admitted)
        if problem is not None:
            raise ValueError(problem)
    evidence = memory.evidence
    if evidence is not None:
        evidence = admit(evidence).text.strip()
        evidence = evidence if has_content(evidence) else None
    if key.text == memory.key and value.text == memory.value:
        return memory if evidence == memory.evidence else dataclasses.replace(memory, evidence=evidence)
    # an embedding of the text as given is not one of the text as written: the store embeds again
    return dataclasses.replace(memory, key=key.text, value=value.text, evidence=evidence, embedding=None)


def admit_turns(turns: Sequence[NewTurn]) -> tuple[list[NewTurn], list[tuple[int, str]]]:
    """An event's turns as the store writes them: text and search text admitted, the speaker
    admitted on one line (None when nothing is left of it). A turn whose text has no content
    (`has_content`) is not kept: it comes back as (position, reason) beside the kept ones."""
    kept: list[NewTurn] = []
    refused: list[tuple[int, str]] = []
    for turn in turns:
        text = admit(turn.text).text.strip()
        if not has_content(text):
            refused.append((turn.position, "nothing but redacted secrets, whitespace or punctuation"))
            continue
        search = None if turn.search_text is None else admit(turn.search_text).text
        speaker = None if turn.speaker is None else admit(turn.speaker, one_line=True).text or None
        if text == turn.text and search == turn.search_text and speaker == turn.speaker:
            kept.append(turn)
        else:
            kept.append(dataclasses.replace(turn, text=text, search_text=search, speaker=speaker))
    return kept, refused


@dataclass(frozen=True, kw_only=True, slots=True)
class Regated:
    """What the gate makes of texts stored before it: kept as they are, rewritten (`texts`, in the
    order given), or refused (`reason`: the row goes)."""

    action: Literal["keep", "rewrite", "refuse"]
    texts: tuple[str | None, ...] = ()
    reason: str = ""


def regate_memory(key: str, value: str, evidence: str | None) -> Regated:
    """A stored memory through today's gate: refused when its key names or holds a secret or its
    key or value has no content once admitted (`admit_memory`); else its admitted key, value and
    evidence, when any changed."""
    named = secret_key_refusal(key)
    if named is not None:
        return Regated(action="refuse", reason=named)
    admitted_key = admit(key, one_line=True)
    if admitted_key.secrets:
        return Regated(action="refuse", reason="key: holds a secret")
    admitted_value = admit(value, one_line=True)
    for field, admitted in (("key", admitted_key), ("value", admitted_value)):
        problem = refusal(field, admitted)
        if problem is not None:
            return Regated(action="refuse", reason=problem)
    kept_evidence = None
    if evidence is not None:
        kept_evidence = admit(evidence).text.strip()
        kept_evidence = kept_evidence if has_content(kept_evidence) else None
    texts = (admitted_key.text, admitted_value.text, kept_evidence)
    return (
        Regated(action="keep") if texts == (key, value, evidence) else Regated(action="rewrite", texts=texts)
    )


def regate_turn(text: str, search_text: str | None, speaker: str | None) -> Regated:
    """A stored conversation turn through today's gate (`admit_turns`): refused when its text has
    no content once admitted; else its admitted text, search text and speaker, when any changed."""
    admitted = admit(text).text.strip()
    if not has_content(admitted):
        return Regated(action="refuse", reason="nothing but redacted secrets, whitespace or punctuation")
    search = None if search_text is None else admit(search_text).text
    said_by = None if speaker is None else admit(speaker, one_line=True).text or None
    texts = (admitted, search, said_by)
    return (
        Regated(action="keep")
        if texts == (text, search_text, speaker)
        else Regated(action="rewrite", texts=texts)
    )


def regate_name(name: str) -> Regated:
    """A stored display name through today's gate: refused without content, else admitted."""
    admitted = admit(name, one_line=True)
    problem = refusal("name", admitted)
    if problem is not None:
        return Regated(action="refuse", reason=problem)
    return (
        Regated(action="keep") if admitted.text == name else Regated(action="rewrite", texts=(admitted.text,))
    )
