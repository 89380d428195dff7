"""The MCP server of the "mcp" bench scenario: one ``echo`` tool, on the official SDK.

``python -m fastgate.cli.bench.mcp_echo_server`` serves it over stdio; with ``http`` it serves
it over streamable HTTP (uvicorn on 127.0.0.1, a free port, announced as ``PORT <n>`` on
stdout once the socket listens) until it is terminated.
"""

from __future__ import annotations

import socket
import sys

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("fastgate-bench", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return the text."""
    return text


async def serve_http() -> None:
    import uvicorn

    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY only on connections accepted from a
    # socket whose proto says TCP (0 does not). Without it, a reply written as headers, then
    # body, waits for the client's delayed ACK: about 44 ms per call on Linux, for both sides.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # before the port is announced: a client connecting at once is queued
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    from fastgate.cli.bench.children import die_with_parent

    die_with_parent()
    if sys.argv[1:] == ["http"]:
        import anyio

        anyio.run(serve_http)
    else:
        server.run("stdio")
