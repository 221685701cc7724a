"""The `Cookie` header, read once and in linear time.

Python's `http.cookies` unquotes a quoted value in time quadratic in its backslashes on Python
before 3.11.10 (`SimpleCookie`, and Starlette's `Request.cookies`, which calls its unquoting): one
unauthenticated request with a few kilobytes of backslashes holds the event loop for a second.
`CookieGuard` answers 431 to a request whose cookies exceed `MAX_COOKIE_BYTES`, parses the rest
once (`parse_cookies`, one pass), keeps the result in the request's state for every later reader
(`request_cookies`), and hands the app a `Cookie` header rewritten from it, in which no value is
quoted, so no later parser has anything to unquote. Nothing in the product imports `http.cookies`.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.asgi import HttpMiddleware

__all__ = ["MAX_COOKIE_BYTES", "CookieGuard", "parse_cookies", "request_cookies"]

# browsers send at most about 4 KB per cookie; ours are well under 200 bytes together
MAX_COOKIE_BYTES = 8192
_STATE_KEY = "cookies"


def _unquote(value: str) -> str:
    """A cookie value without its double quotes, backslash escapes resolved (`\\"`, `\\\\`, and
    three octal digits, as browsers and `http.cookies` write them) — in one pass."""
    if len(value) < 2 or value[0] != '"' or value[-1] != '"':
        return value
    inner = value[1:-1]
    if "\\" not in inner:
        return inner
    pieces: list[str] = []
    index = 0
    length = len(inner)
    while index < length:
        slash = inner.find("\\", index)
        if slash < 0 or slash == length - 1:
            pieces.append(inner[index:])
            break
        pieces.append(inner[index:slash])
        octal = inner[slash + 1 : slash + 4]
        if len(octal) == 3 and all(char in "01234567" for char in octal):
            pieces.append(chr(int(octal, 8)))
            index = slash + 4
        else:
            pieces.append(inner[slash + 1])
            index = slash + 2
    return "".join(pieces)


def parse_cookies(header: str) -> dict[str, str]:
    """The cookies of a `Cookie` header, name → value, as browsers send them (`name=value` pairs
    separated by `;`, a value maybe quoted); the last of a repeated name wins. Linear in the header."""
    cookies: dict[str, str] = {}
    for chunk in header.split(";"):
        name, equals, value = chunk.partition("=")
        if not equals:
            name, value = "", name
        name, value = name.strip(), value.strip()
        if name or value:
            cookies[name] = _unquote(value)
    return cookies


def _plain(name: str, value: str) -> bool:
    # a pair that rewrites into a header that reads back the same, with nothing quoted
    if ";" in name or "=" in name or ";" in value or value.startswith('"'):
        return False
    return max(map(ord, value), default=0) < 256 and max(map(ord, name), default=0) < 256


def request_cookies(scope: Scope) -> dict[str, str]:
    """The request's cookies: as `CookieGuard` parsed them, or parsed now when it did not run."""
    state: dict[str, Any] = scope.setdefault("state", {})
    cookies = state.get(_STATE_KEY)
    if cookies is None:
        header = "; ".join(
            value.decode("latin-1") for name, value in scope.get("headers", ()) if name == b"cookie"
        )
        cookies = {
            name: value
            for name, value in parse_cookies(header[:MAX_COOKIE_BYTES]).items()
            if _plain(name, value)
        }
        state[_STATE_KEY] = cookies
    return dict(cookies)


class CookieGuard(HttpMiddleware):
    """ASGI middleware: 431 for cookies over `max_bytes`; otherwise the cookies parsed once into the
    request's state and the `Cookie` header rewritten without quoted values (the module docstring)."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_COOKIE_BYTES) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = scope.get("headers", [])
        sent = [value for name, value in headers if name == b"cookie"]
        if not sent:
            await self.app(scope, receive, send)
            return
        if sum(len(value) for value in sent) > self.max_bytes:
            answer = JSONResponse(
                {"error": f"cookies over {self.max_bytes} bytes; clear this site's cookies and retry"},
                status_code=431,
            )
            await answer(scope, receive, send)
            return
        cookies = {
            name: value
            for name, value in parse_cookies("; ".join(value.decode("latin-1") for value in sent)).items()
            if _plain(name, value)
        }
        scope.setdefault("state", {})[_STATE_KEY] = cookies
        rewritten = "; ".join(f"{name}={value}" if name else value for name, value in cookies.items())
        others = [(name, value) for name, value in headers if name != b"cookie"]
        if rewritten:
            others.append((b"cookie", rewritten.encode("latin-1")))
        scope["headers"] = others
        await self.app(scope, receive, send)
