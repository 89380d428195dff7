"""An MCP server on the official SDK's ``MCPServer`` over streamable HTTP, behind an ASGI layer
that answers the first ``RATE_LIMITED_CALLS`` (default 1) ``tools/call`` requests with HTTP 429
and the ``Retry-After`` header ``RATE_LIMIT_RETRY_AFTER`` (none when empty), as a rate-limiting
gateway or API in front of a server does. Its ``runs`` tool says how many times it ran. It binds
127.0.0.1 on a free port and prints ``PORT <n>`` on stdout."""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("rate-limited")
ran = 0
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@server.tool()
async def runs() -> str:
    """How many times this tool ran, this one included."""
    global ran
    ran += 1
    return str(ran)


class RateLimit:
    def __init__(self, app: Any, calls: int, retry_after: str) -> None:
        self.app = app
        self.left = calls
        self.retry_after = retry_after

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        messages = [await receive()]
        while messages[-1].get("more_body"):
            messages.append(await receive())
        body = b"".join(m.get("body", b"") for m in messages)
        if b'"tools/call"' in body and self.left > 0:
            self.left -= 1
            headers = [(b"content-type", b"text/plain")]
            if self.retry_after:
                headers.append((b"retry-after", self.retry_after.encode()))
            await send({"type": "http.response.start", "status": 429, "headers": headers})
            await send({"type": "http.response.body", "body": b"slow down"})
            return
        kept = iter(messages)

        async def replay() -> dict[str, Any]:
            for message in kept:
                return message
            return await receive()

        await self.app(scope, replay, send)


async def main() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    app = RateLimit(
        server.streamable_http_app(host="127.0.0.1"),
        int(os.environ.get("RATE_LIMITED_CALLS", "1")),
        os.environ.get("RATE_LIMIT_RETRY_AFTER", ""),
    )
    await uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve(sockets=[sock])


if __name__ == "__main__":
    anyio.run(main)
