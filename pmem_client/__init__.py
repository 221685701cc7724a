"""persona-memory's Python client: `MemoryClient` (sync) and `AsyncMemoryClient` over httpx, typed
answers (`pmem_client.models`), one error type (`MemoryApiError`), `Retry-After` honoured on 429 and
503 within a `RetryPolicy`."""

from __future__ import annotations

__version__ = "0.1.0"

from pmem_client.client import AsyncMemoryClient, MemoryClient
from pmem_client.errors import MemoryApiError
from pmem_client.retry import RetryPolicy

__all__ = ["AsyncMemoryClient", "MemoryApiError", "MemoryClient", "RetryPolicy", "__version__"]
