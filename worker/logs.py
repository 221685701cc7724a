"""JSON logs on stderr. Every line logged while an event is processed carries its `event_id`
(set through a context variable, so it follows the asyncio task without being passed around)."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

_event_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("pmem_event_id", default=None)

# LogRecord attributes that are not user-supplied `extra=` fields.
_STANDARD_ATTRS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


@contextmanager
def event_context(event_id: str | None) -> Iterator[None]:
    """Within the block (and tasks started in it), log lines carry `event_id`."""
    token = _event_id.set(event_id)
    try:
        yield
    finally:
        _event_id.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, event_id, extras, exception."""

    def format(self, record: logging.LogRecord) -> str:
        """Render `record` as a single JSON line."""
        payload: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        event_id = getattr(record, "event_id", None) or _event_id.get()
        if event_id is not None:
            payload["event_id"] = event_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and key not in payload:
                payload[key] = value
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str, ensure_ascii=False)


class _EventIdFilter(logging.Filter):
    # for the plain-text format: expose event_id as a record attribute
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "event_id"):
            record.event_id = _event_id.get() or "-"
        return True


def configure_logging(level: str = "INFO", *, json_format: bool = True) -> None:
    """Send all logs to stderr, as JSON lines (default) or plain text; idempotent."""
    handler = logging.StreamHandler(sys.stderr)
    if json_format:
        handler.setFormatter(JsonFormatter())
    else:
        handler.addFilter(_EventIdFilter())
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(event_id)s] %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # FastStream logs every message at INFO; our own lines say more (outcome, event_id).
    logging.getLogger("faststream").setLevel(max(logging.WARNING, root.level))
    # the HTTP client of the openai SDK (httpx2 from openai 3, httpx before) logs every request at INFO
    for client in ("httpx2", "httpx"):
        logging.getLogger(client).setLevel(max(logging.WARNING, root.level))
    # alembic logs its plugin set-up at INFO whenever it is imported (`setup plugin …`): noise
    # before the lines an operator reads; `pmem migrate` reports what it did itself
    logging.getLogger("alembic").setLevel(max(logging.WARNING, root.level))
