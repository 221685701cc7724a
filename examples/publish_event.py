"""Publish one `conversation.ended` event to NATS JetStream, as a chat platform does when a
conversation ends. The worker turns it into memories (pending review).

    pip install nats-py
    PMEM_NATS_URL=nats://127.0.0.1:4222 python examples/publish_event.py

Environment (the variables `pmem` reads, and those `pmem demo --keep-running` prints): PMEM_NATS_URL
(default nats://localhost:4222), PMEM_SUBJECT (default chat.conversation.ended), PMEM_USER_ID,
PMEM_PERSONA_ID, PMEM_TEAM_ID, PMEM_CHANNEL_ID (UUIDs; random when unset), PMEM_USER_NAME,
PMEM_PERSONA_NAME, PMEM_TEAM_NAME (optional display names). Prints the event id and the stream
sequence.

An event larger than the NATS server's `max_payload` (1 MB by default) is refused at publish
(`nats.errors.MaxPayloadError`) and never reaches the worker: raise `max_payload` in the server's
configuration for longer conversations.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from datetime import UTC, datetime

import nats


def env_uuid(name: str) -> str:
    """A UUID from the environment, or a fresh one."""
    return os.environ.get(name) or str(uuid.uuid4())


async def main() -> None:
    """Connect, publish one event with `Nats-Msg-Id` (JetStream drops duplicates), print the ack."""
    now = datetime.now(UTC).isoformat()
    event = {
        "event_id": str(uuid.uuid4()),
        "type": "conversation.ended",
        "occurred_at": now,
        "team_id": env_uuid("PMEM_TEAM_ID"),
        "channel_id": env_uuid("PMEM_CHANNEL_ID"),
        "user_id": env_uuid("PMEM_USER_ID"),
        "persona_id": env_uuid("PMEM_PERSONA_ID"),
        "messages": [
            {"role": "user", "content": "I am vegetarian and I live in Lisbon.", "at": now},
            {"role": "assistant", "content": "Noted! Any favourite dishes?"},
        ],
    }
    # optional display names: the web UI shows them instead of the ids (the latest one wins)
    for field, variable in (
        ("team_name", "PMEM_TEAM_NAME"),
        ("persona_name", "PMEM_PERSONA_NAME"),
        ("user_name", "PMEM_USER_NAME"),
    ):
        if os.environ.get(variable):
            event[field] = os.environ[variable]
    connection = await nats.connect(
        os.environ.get("PMEM_NATS_URL", "nats://localhost:4222"), connect_timeout=5
    )
    try:
        ack = await connection.jetstream().publish(
            os.environ.get("PMEM_SUBJECT", "chat.conversation.ended"),
            json.dumps(event).encode(),
            headers={"Nats-Msg-Id": event["event_id"]},
            timeout=10,
        )
    finally:
        await connection.close()
    print(json.dumps({"event_id": event["event_id"], "stream": ack.stream, "seq": ack.seq}))


if __name__ == "__main__":
    asyncio.run(main())
