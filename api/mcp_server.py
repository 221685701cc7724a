"""The memory tools over the Model Context Protocol (the official `mcp` SDK, streamable HTTP),
mounted in `pmem serve` at `/mcp`.

Authentication is the API's: `Authorization: Bearer` with a person's JWT (acting for themselves) or
a service key acting for the user named in the query string. The conversation context comes from
the query string, `?user_id=&persona_id=&team_id=`. A request without a credential, with a bad one,
or for a team the token does not list is answered 401/403 here, before the SDK sees it, so no tool
runs; the body is a JSON-RPC error whose message is the reason, which the SDK's client raises as
its `MCPError` (a body of another shape it replaces with "Server returned an error response").
Stateless, JSON responses: every POST carries its own credential and nothing is kept between
requests."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from api import tool_calls
from api.auth import authenticate
from api.deps import AppState
from api.errors import TEAM_BOUNDARY_REFUSED, ApiError, BadInput
from api.principal import Principal
from store.errors import TeamBoundaryViolation
from store.services.tools import TOOL_SCHEMAS

log = logging.getLogger("pmem.api.mcp")
MCP_PATH = "/mcp"
# where the authenticated caller rides from the ASGI wrapper to the tool handlers
_CALLER_KEY = "pmem_mcp_caller"


def mcp_tools() -> list[types.Tool]:
    """The memory tools as MCP tools (the same names, descriptions and JSON schemas)."""
    tools = []
    for schema in TOOL_SCHEMAS.values():
        function = schema["function"]
        tools.append(
            types.Tool(
                name=function["name"],
                description=function["description"],
                input_schema=function["parameters"],
            )
        )
    return tools


def tool_result(result: dict[str, Any]) -> types.CallToolResult:
    """A tool's JSON result as MCP content: the JSON text, and the same value structured."""
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(result, ensure_ascii=False))], structured_content=result
    )


def tool_error(message: str) -> types.CallToolResult:
    """A tool error the model can read and correct."""
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


# JSON-RPC error codes of a refusal: the credential or its rights (invalid request), the context
# named in the query string (invalid params)
_REFUSAL_CODES = {401: -32600, 403: -32600, 422: -32602}


def jsonrpc_refusal(body: bytes, *, status: int, message: str) -> dict[str, Any]:
    """The JSON-RPC error answering a refused request: the request's id when its body names one
    (null otherwise, as JSON-RPC allows), and the server's message."""
    request_id: Any = None
    try:
        document = json.loads(body) if body else None
    except (ValueError, RecursionError):
        document = None
    if isinstance(document, dict) and isinstance(document.get("id"), (str, int)):
        request_id = document["id"]
    code = _REFUSAL_CODES.get(status, -32600)
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _query_uuid(params: dict[str, str], name: str) -> uuid.UUID | None:
    raw = params.get(name, "").strip()
    if not raw:
        return None
    try:
        return uuid.UUID(raw)
    except ValueError as exc:
        raise BadInput(f"query parameter {name}: expected a UUID string") from exc


def build_mcp(state: AppState) -> tuple[Server[Any], StreamableHTTPSessionManager]:
    """The MCP server over the app's store, and its streamable HTTP session manager."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=mcp_tools())

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        request = ctx.request
        caller = request.scope.get(_CALLER_KEY) if isinstance(request, Request) else None
        if caller is None:
            # only reachable if the wrapper were bypassed: refuse rather than act for nobody
            return tool_error("not authenticated")
        principal, subject = caller
        try:
            result = await tool_calls.run_tool(state.store, principal, subject, params.name, params.arguments)
        except ApiError as exc:
            return tool_error(exc.message)
        except TeamBoundaryViolation as exc:
            # not the model's to correct: the request itself reached past its teams
            log.warning("team boundary on MCP tool %s: %s", params.name, exc)
            raise MCPError(code=_REFUSAL_CODES[403], message=TEAM_BOUNDARY_REFUSED) from exc
        return tool_result(result)

    server: Server[Any] = Server(
        "persona-memory",
        version="1",
        instructions="Long-term memory of the user you are talking to: save, recall and forget facts.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    manager = StreamableHTTPSessionManager(
        app=server,
        json_response=True,
        stateless=True,
        # every request carries its bearer credential (never a cookie), so a rebound DNS name
        # gains a page nothing it could not already send
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=state.max_body_bytes,
    )
    return server, manager


class McpEndpoint:
    """ASGI app at `/mcp`: authenticate and bind the context, then hand the request to the SDK."""

    def __init__(self, state: AppState, manager: StreamableHTTPSessionManager) -> None:
        self.state = state
        self.manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        try:
            principal = await self._principal(request)
            params = dict(request.query_params)
            subject = tool_calls.tool_subject(
                principal,
                user_id=_query_uuid(params, "user_id"),
                persona_id=_query_uuid(params, "persona_id"),
                team_id=_query_uuid(params, "team_id"),
            )
        except ApiError as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            # no tool runs, so the body (bounded by the app's limit) is read only for its id
            body = await request.body() if scope["method"] == "POST" else b""
            refusal = jsonrpc_refusal(body, status=exc.status, message=exc.message)
            await JSONResponse(refusal, status_code=exc.status, headers=headers)(scope, receive, send)
            return
        scope[_CALLER_KEY] = (principal, subject)
        await self.manager.handle_request(scope, receive, send)

    async def _principal(self, request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        bearer = token.strip() if scheme.lower() == "bearer" and token.strip() else None
        # no cookie: MCP clients send bearer credentials, and a cookie would let another site's
        # page call tools in a signed-in person's name
        return await authenticate(bearer=bearer, cookie=None, config=self.state.auth, keys=self.state.keys)


@asynccontextmanager
async def running(manager: StreamableHTTPSessionManager) -> AsyncIterator[None]:
    """The session manager's task group, for the app's lifespan."""
    async with manager.run():
        yield
