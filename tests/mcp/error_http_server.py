"""An MCP server on the official SDK's ``MCPServer`` over streamable HTTP whose ``fail`` tool
raises the SDK's ``MCPError`` with the code, message and data its arguments give: the server
answers the call with that JSON-RPC error. ``ok`` answers ``fine``. It binds 127.0.0.1 on a
free port and prints ``PORT <n>`` on stdout."""

from __future__ import annotations

import socket
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

server = MCPServer("error-http")


@server.tool()
async def fail(code: int, message: str, data: Any = None) -> str:
    """Answered with a JSON-RPC error."""
    raise MCPError(code, message, data)


@server.tool()
async def ok() -> str:
    """Fine."""
    return "fine"


async def main() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    app = server.streamable_http_app(host="127.0.0.1")
    await uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve(sockets=[sock])


if __name__ == "__main__":
    anyio.run(main)
