# mypy: ignore-errors
"""A fixture of the older protocol era: it runs on the mcp 1.x SDK (the venv that
scripts/setup-mcp-servers makes for mcp-server-time), where ``tools/list_changed`` is a plain
notification on the session, not a subscription."""

from mcp.server.fastmcp import Context, FastMCP

server = FastMCP("legacy-fixture")


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


def extra() -> str:
    """Appears after bump."""
    return "extra"


@server.tool()
async def bump(ctx: Context) -> str:
    """Add a tool and tell the client."""
    server.add_tool(extra, name="extra")
    await ctx.session.send_tool_list_changed()
    return "bumped"


if __name__ == "__main__":
    server.run("stdio")
