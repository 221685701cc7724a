"""A query's words: lower-cased word tokens, the stop words full text ignores, and the terms worth
matching. Recall, the worker's prompt and the extractor's grounding all split text this one way."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)
# Postgres' english configuration drops these; the in-process rankings drop them too so that
# "what does he like" does not match every row containing "he".
_STOPWORDS_TEXT = """
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will with
would you your yours yourself yourselves
"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


def query_terms(query: str) -> list[str]:
    """Lower-cased word tokens of a query, first occurrence order, without duplicates."""
    seen: dict[str, None] = {}
    for token in _WORD.findall(query.lower()):
        seen.setdefault(token, None)
    return list(seen)


def keyword_terms(query: str) -> list[str]:
    """Terms worth matching as substrings (stop words and 1-character tokens removed)."""
    return [t for t in query_terms(query) if t not in STOPWORDS and len(t) > 1]


def is_empty_query(query: str | None) -> bool:
    """True when the query has no word at all: recall then returns the top memories."""
    return not query or not query_terms(query)
