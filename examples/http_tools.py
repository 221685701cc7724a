"""The memory tools and recall over plain HTTP + JSON, the way a Go or TypeScript backend calls
them (only Python's standard library here; `http_tools.sh` shows the same with curl).

    PMEM_URL=http://127.0.0.1:8080 PMEM_API_KEY=pmem_sk_… PMEM_USER_ID=… python examples/http_tools.py

(`pmem demo --keep-running` prints these as `export` lines, with PMEM_PERSONA_ID and PMEM_TEAM_ID.)

1. `GET /v1/tools`: the OpenAI function schemas to pass as `tools=[…]` to the chat model.
2. `POST /v1/tools/call`: run the tool call the model made, in the user's context.
3. `POST /v1/recall`: what is remembered, for the prompt.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

BASE = os.environ.get("PMEM_URL", "http://127.0.0.1:8080").rstrip("/")
KEY = os.environ["PMEM_API_KEY"]  # a service key from `pmem keys create NAME`
CONTEXT = {
    "user_id": os.environ["PMEM_USER_ID"],
    "persona_id": os.environ.get("PMEM_PERSONA_ID") or None,
    "team_id": os.environ.get("PMEM_TEAM_ID") or None,
}


def call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One JSON request with the service key; the decoded answer (errors carry `{"error": …}`)."""
    request = urllib.request.Request(
        BASE + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        # 4xx answers are JSON too: a tool error (422) is meant to go back to the model as is
        return {"status": error.code, **json.load(error)}


def main() -> None:
    """List the tools, save a fact as the model would, then recall."""
    tools = call("GET", "/v1/tools")["tools"]
    print("tools:", ", ".join(tool["function"]["name"] for tool in tools))
    # what a chat completion's tool call carries: a name and a JSON string of arguments
    tool_call = {
        "name": "memory_save",
        "arguments": json.dumps({"key": "favourite dish", "value": "Loves risotto"}),
    }
    saved = call("POST", "/v1/tools/call", {**tool_call, **CONTEXT})
    print("memory_save:", json.dumps(saved))
    found = call(
        "POST", "/v1/tools/call", {"name": "memory_recall", "arguments": {"query": "food"}, **CONTEXT}
    )
    print("memory_recall:", json.dumps(found))
    recalled = call(
        "POST", "/v1/recall", {**CONTEXT, "query": "what do they like to eat", "limit": 5, "turn_limit": 3}
    )
    # one ranked list: reviewed facts (kind "memory") and earlier conversations' turns (kind "turn")
    shown = [item["value"] if item["kind"] == "memory" else item["text"] for item in recalled["items"]]
    print("recall:", json.dumps(shown))


if __name__ == "__main__":
    main()
