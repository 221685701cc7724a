"""Errors the store raises for its callers."""

from __future__ import annotations


class StoreError(RuntimeError):
    """A store operation failed for a reason the caller can fix; the message says how."""
