"""A memory's identity and its embedded text (pure): the ONE key normaliser and the ONE embedding
text, shared by extraction (validation, dedup), the worker (what it embeds), the store (the key it
writes, so the unique index on `key` is an index on the normalised key) and recall (merging the
same key across scopes)."""

from __future__ import annotations

import functools
import re

__all__ = ["embedding_text", "normalize_key", "storable_text"]

# What no store can keep: NUL (Postgres text refuses it) and lone UTF-16 surrogates (a JSON
# "\\ud800" decodes to one; UTF-8 cannot encode it), plus the other C0 controls, which are noise.
_UNSTORABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
_SEPARATORS = re.compile(r"[\s_]+")
_EDGE_PUNCTUATION = " \t\n\"'`“”‘’.,;:!?*#-"


# recall merges every candidate by key: the same few thousand keys, normalised again and again
@functools.lru_cache(maxsize=16_384)
def normalize_key(key: str) -> str:
    """Key identity: lowercase, underscores to spaces, whitespace runs collapsed, quotes and
    punctuation stripped at the ends. Idempotent: `normalize_key(normalize_key(k)) == normalize_key(k)`."""
    return _SEPARATORS.sub(" ", key.lower()).strip(_EDGE_PUNCTUATION).strip()


def embedding_text(key: str, value: str) -> str:
    """The text embedded for a memory (candidate and stored side alike): key and value together."""
    return f"{key}: {value}"


def storable_text(text: str) -> str:
    """`text` without the characters a database cannot store (NUL, lone surrogates) or that are
    invisible noise (other control characters); tabs and newlines stay."""
    return _UNSTORABLE.sub("", text)
