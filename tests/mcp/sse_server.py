"""An MCP server on the official SDK, served in this process over the older HTTP+SSE transport
(``GET /sse`` for the server's messages, ``POST /messages/`` for the client's) or over streamable
HTTP (``/mcp``), on a free loopback port.

It runs in a thread of its own with its own event loop, so the client under test shares nothing
with it (a client that blocked its loop could not hide it by starving the server too), and the
test's loop is left with no task of the server's. ``serving()`` stops it and joins the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from mcp.server.mcpserver import MCPServer


@dataclass
class Served:
    """What the server saw: the tools called, in order (the test reads it after a call)."""

    base: str  # http://127.0.0.1:<port>
    calls: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None


def _server(served: Served) -> MCPServer:
    server = MCPServer("fastgate-sse-fixture")

    @server.tool()
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        served.calls.append("add")
        return a + b

    @server.tool()
    async def echo(text: str) -> str:
        """Return the text."""
        served.calls.append("echo")
        return text

    return server


@contextlib.contextmanager
def serving(transport: str = "sse") -> Iterator[Served]:
    """The server over ``transport`` (``"sse"`` or ``"http"``) until the block ends; then it
    is stopped and its thread joined (checked gone)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # before the port is used: a client connecting at once is queued
    served = Served(f"http://127.0.0.1:{sock.getsockname()[1]}")
    mcp_server = _server(served)
    app = (
        mcp_server.sse_app(host="127.0.0.1")
        if transport == "sse"
        else mcp_server.streamable_http_app(host="127.0.0.1")
    )
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", loop="asyncio", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    # The socket listens already: a client connecting before the server's loop runs is queued.
    thread = served.thread = threading.Thread(
        target=asyncio.run, args=(server.serve(sockets=[sock]),), name="sse-fixture", daemon=True
    )
    thread.start()
    try:
        yield served
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
    assert not thread.is_alive(), "the SSE fixture server's thread is still running"


@contextlib.contextmanager
def sse_process() -> Iterator[tuple[str, int]]:
    """The server in a process of its own, for a test that kills it: (its SSE url, its pid).
    Killed and reaped at the end."""
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp.sse_server"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("PORT "), f"the SSE server did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line.split()[1])}/sse", process.pid
    finally:
        process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def main() -> None:
    """``python -m tests.mcp.sse_server``: the SSE server as a process of its own (a test
    kills it); prints ``PORT <n>`` once it listens."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    app = _server(Served("")).sse_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on", loop="asyncio")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
