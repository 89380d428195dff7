"""The MCP server of the "mcp" bench scenario: one ``echo`` tool, over stdio, on the official
SDK (``python -m fastgate.cli.bench.mcp_echo_server``)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("fastgate-bench", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return the text."""
    return text


if __name__ == "__main__":
    server.run("stdio")
