"""Default extraction prompt and per-persona examples (data shipped in the wheel).

- `extraction.md`: the system-message template. Placeholders `{{persona}}`, `{{instructions}}`,
  `{{scopes}}` and `{{existing}}` are filled by `extraction.prompt`.
- `extraction_instructions.md`: the default "what to keep" instructions; a persona's
  extraction-prompt override replaces exactly this part (the output contract stays ours).
- `personas/<name>.md`: example overrides (helpdesk, tutor) an admin can start from.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["list_persona_examples", "load_prompt"]


def load_prompt(name: str) -> str:
    """The text of prompt `name` (e.g. "extraction", "personas/helpdesk"); `.md` is implied.

    Raises FileNotFoundError naming the available prompts when there is no such file.
    """
    parts = [part for part in name.split("/") if part]
    if not parts or any(part in {".", ".."} for part in parts):
        raise FileNotFoundError(f"invalid prompt name {name!r}; use e.g. 'extraction' or 'personas/tutor'")
    if "." not in parts[-1]:
        parts[-1] += ".md"
    resource = resources.files(__name__).joinpath(*parts)
    if not resource.is_file():
        available = ", ".join(["extraction", *(f"personas/{p}" for p in list_persona_examples())])
        raise FileNotFoundError(f"no prompt named {name!r} in the prompts package; available: {available}")
    return resource.read_text(encoding="utf-8")


def list_persona_examples() -> list[str]:
    """Names of the bundled per-persona example prompts (e.g. ["helpdesk", "tutor"])."""
    folder = resources.files(__name__).joinpath("personas")
    return sorted(entry.name.removesuffix(".md") for entry in folder.iterdir() if entry.name.endswith(".md"))
