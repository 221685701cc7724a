"""Connect to persona-memory's MCP endpoint with the official MCP SDK and call `memory_recall`.

    pip install mcp
    PMEM_URL=http://127.0.0.1:8080 PMEM_API_KEY=pmem_sk_… \
        PMEM_USER_ID=… PMEM_TEAM_ID=… python examples/mcp_client.py "what do I like to eat"

The credential is PMEM_CREDENTIAL when set (a person's JWT: it acts for that person, leave
PMEM_USER_ID out), else the service key PMEM_API_KEY (it needs PMEM_USER_ID). PMEM_TEAM_ID and
PMEM_PERSONA_ID pick the conversation's context; a person's team must be in their token.
`pmem demo --keep-running` prints these variables as `export` lines.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from urllib.parse import urlencode

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def endpoint() -> str:
    """`/mcp` with the conversation's context in the query string."""
    context = {
        name: os.environ[f"PMEM_{name.upper()}"]
        for name in ("user_id", "persona_id", "team_id")
        if os.environ.get(f"PMEM_{name.upper()}")
    }
    return f"{os.environ.get('PMEM_URL', 'http://127.0.0.1:8080').rstrip('/')}/mcp?{urlencode(context)}"


async def main(query: str) -> None:
    """List the tools, then recall what is remembered for `query`."""
    credential = os.environ.get("PMEM_CREDENTIAL") or os.environ["PMEM_API_KEY"]
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {credential}"}, timeout=30)
    async with http, Client(streamable_http_client(endpoint(), http_client=http)) as client:
        tools = await client.list_tools()
        print("tools:", ", ".join(tool.name for tool in tools.tools))
        result = await client.call_tool("memory_recall", {"query": query, "max_results": 5})
    if result.is_error:
        raise SystemExit(f"memory_recall failed: {result.content}")
    print("memory_recall:", json.dumps(result.structured_content))


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "what do I like"))
