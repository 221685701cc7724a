"""A memory's identity and its embedded text (pure): the ONE key normaliser and the ONE embedding
text, shared by extraction (validation, dedup), the worker (what it embeds), the store (the key it
writes, so the unique index on `key` is an index on the normalised key) and recall (merging the
same key across scopes)."""

from __future__ import annotations

import functools
import re
import unicodedata

__all__ = ["embedding_text", "is_invisible", "normalize_key", "storable_text", "storable_value"]

# Unicode's Default_Ignorable_Code_Point set (DerivedCoreProperties.txt): code points a renderer
# shows as nothing. Most are format characters (category Cf, caught below by category, so new ones
# are too); these are the rest, which carry other categories: the combining grapheme joiner,
# Hangul fillers, Khmer inherent vowels, Mongolian and other variation selectors, and the
# reserved ignorables, including all of plane 14 (the tag block U+E0000–U+E007F and the
# variation selectors supplement).
_IGNORABLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2065\u3164\ufe00-\ufe0f\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
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


def is_invisible(char: str) -> bool:
    """Whether a person reading the text cannot see `char`, though a model reading it does: control
    characters other than tab, newline and carriage return (category Cc), format characters (Cf:
    zero-width spaces and joiners, bidi controls, the tag block), lone surrogates (Cs, which no
    store can keep either) and the other default-ignorable code points."""
    if char in "\t\n\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf", "Cs") or _IGNORABLE.match(char) is not None


def storable_text(text: str) -> str:
    """`text` without the characters a reviewer cannot see (`is_invisible`; NUL and lone surrogates,
    which no database stores, are among them): what is stored is what a person reviewing it saw.
    Every visible character stays, in order; tabs and newlines stay."""
    # most text holds none: `isprintable` rules out the control, format and surrogate categories
    # at C speed (and fails on separators other than the space, which `_visible` keeps)
    if _IGNORABLE.search(text) is not None:
        text = _IGNORABLE.sub("", text)
    if text.translate(_LAYOUT).isprintable():
        return text
    return "".join(char for char in text if char.isprintable() or _visible(char))


# tab, newline and carriage return read as spaces for `str.isprintable`
_LAYOUT = str.maketrans("\t\n\r", "   ")


def _visible(char: str) -> bool:
    """`not is_invisible(char)` for a character that is not a default-ignorable one."""
    return char in "\t\n\r" or unicodedata.category(char) not in ("Cc", "Cf", "Cs")


def storable_value(text: str) -> str:
    """A memory's value (or key) as stored and shown everywhere: `storable_text` on one line, runs
    of whitespace as one space, trimmed. The hint sends exactly this."""
    return " ".join(storable_text(text).split())
