"""A chat platform's message handler in Python: the memory hint for the user's message, an
OpenAI-compatible chat completion with it, and at the end of the conversation a
`conversation.ended` event on NATS JetStream for the worker (with `Nats-Msg-Id`: JetStream drops a
duplicate publish).

    python examples/chat_handler.py "I'm vegetarian. What should I cook tonight?"

Environment: PMEM_URL, PMEM_API_KEY (a service key), PMEM_USER_ID, PMEM_PERSONA_ID, PMEM_TEAM_ID (as
`pmem demo --keep-running` prints them), PMEM_NATS_URL (default nats://localhost:4222), PMEM_SUBJECT
(default chat.conversation.ended), OPENAI_BASE_URL, OPENAI_API_KEY, CHAT_MODEL. Prints one JSON line:
the hint, the model's reply, the event id and its stream sequence.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from datetime import UTC, datetime

import httpx
import nats

from pmem_client import AsyncMemoryClient


async def main(message: str) -> None:
    """Hint, model, publish."""
    context = {
        "user_id": os.environ["PMEM_USER_ID"],
        "persona_id": os.environ.get("PMEM_PERSONA_ID") or None,
        "team_id": os.environ.get("PMEM_TEAM_ID") or None,
    }
    base = os.environ.get("PMEM_URL", "http://127.0.0.1:8080")
    async with AsyncMemoryClient(base, os.environ["PMEM_API_KEY"]) as memory:
        hint = await memory.hint(
            context["user_id"], persona_id=context["persona_id"], team_id=context["team_id"], query=message
        )
    system = "You are a helpful assistant." + (f"\n\nWhat you know about the user:\n{hint}" if hint else "")
    model_base = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/")
    async with httpx.AsyncClient(timeout=60) as http:
        completion = await http.post(
            f"{model_base}/chat/completions",
            headers={"Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}"},
            json={
                "model": os.environ.get("CHAT_MODEL", "gpt-4o-mini"),
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": message}],
            },
        )
        completion.raise_for_status()
    reply = completion.json()["choices"][0]["message"]["content"]
    now = datetime.now(UTC).isoformat()
    event = {
        "event_id": str(uuid.uuid4()),
        "type": "conversation.ended",
        "occurred_at": now,
        "team_id": context["team_id"],
        "channel_id": os.environ.get("PMEM_CHANNEL_ID") or str(uuid.uuid4()),
        "user_id": context["user_id"],
        "persona_id": context["persona_id"],
        "messages": [
            {"role": "user", "content": message, "at": now},
            {"role": "assistant", "content": reply},
        ],
    }
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
    print(
        json.dumps(
            {
                "hint": hint,
                "reply": reply,
                "event_id": event["event_id"],
                "stream": ack.stream,
                "seq": ack.seq,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(
        main(sys.argv[1] if len(sys.argv) > 1 else "I'm vegetarian and I live in Lisbon. What should I cook?")
    )
