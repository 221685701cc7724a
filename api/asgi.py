"""What the API's ASGI middleware share: HTTP requests are theirs to handle; anything else (the
lifespan, a websocket) goes straight through to the app they wrap."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class HttpMiddleware:
    """ASGI middleware over `app` that handles HTTP requests (`handle`) and passes the rest on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One HTTP request, on its way to `app`."""
        raise NotImplementedError
