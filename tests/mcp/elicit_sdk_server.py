"""An MCP server on the official SDK (2.x ``MCPServer``) whose tool asks the user a question the
SDK's way: a resolver returning ``Elicit(message, Model)``. The SDK asks in the era the client
speaks: an ``input_required`` result on the 2026 protocol, an ``elicitation/create`` request
during the call on the older one.

``ELICIT_ERA=legacy`` makes it refuse ``server/discover``, so the client falls back to the
handshake (2025-11-25). Tools: ``book {"table"}`` asks for a ``Booking`` (``name``; ``guests``
defaults to 2 and ``vegetarian`` to false) and says what it booked, or that it was declined or
cancelled; ``login {}`` asks for consent to open a URL (``ctx.elicit_url``, older era only);
``calendar {}`` answers its first call with error -32042 (a URL to visit first), then reads.
Run as ``python elicit_sdk_server.py``.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    DeclinedElicitation,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp_types import METHOD_NOT_FOUND, ElicitRequestURLParams
from pydantic import BaseModel, Field

server = MCPServer("elicit-sdk")


class Booking(BaseModel):
    name: str = Field(description="Whose name the table is under")
    guests: int = Field(default=2, ge=1, le=12)
    vegetarian: bool = False


def ask_booking() -> Elicit[Booking]:
    return Elicit("Book a table: under which name, for how many?", Booking)


@server.tool()
async def book(
    table: str, booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)]
) -> str:
    """Book a table, asking the user for the details."""
    if isinstance(booking, AcceptedElicitation):
        data = booking.data
        return f"booked {table} for {data.name}: {data.guests} guests, vegetarian={data.vegetarian}"
    if isinstance(booking, DeclinedElicitation):
        return "the user declined: nothing booked"
    return "the user cancelled: nothing booked"


@server.tool()
async def login(ctx: Context) -> str:
    """Ask the user to sign in at a URL."""
    outcome = await ctx.elicit_url(
        "Sign in to the calendar", "https://auth.example.com/authorize?state=1", "e-1"
    )
    return f"login: {outcome.action}"


_signed_in = [False]


@server.tool()
async def calendar() -> str:
    """Read the calendar: the first call answers error -32042 (sign in at a URL first), the
    user signs in between, the next call reads it."""
    if not _signed_in[0]:
        _signed_in[0] = True
        raise UrlElicitationRequiredError(
            [
                ElicitRequestURLParams(
                    message="Sign in to read the calendar",
                    url="https://auth.example.com/authorize?state=2",
                    elicitation_id="e-2",
                )
            ]
        )
    return "calendar: 3 meetings"


async def run_legacy() -> None:
    """stdio, with ``server/discover`` refused before the SDK sees it (a modern request would
    lock the connection to the 2026 protocol), so the client falls back to the handshake."""
    import anyio
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage
    from mcp_types import ErrorData, JSONRPCError, JSONRPCRequest

    lowlevel = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        send, receive = anyio.create_memory_object_stream[Any](16)

        async def sieve() -> None:
            async with send:
                async for item in read_stream:
                    message = getattr(item, "message", None)
                    if isinstance(message, JSONRPCRequest) and message.method == "server/discover":
                        error = ErrorData(code=METHOD_NOT_FOUND, message="Method not found")
                        reply = JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
                        await write_stream.send(SessionMessage(reply))
                    else:
                        await send.send(item)

        async with anyio.create_task_group() as group:
            group.start_soon(sieve)
            await lowlevel.run(receive, write_stream, lowlevel.create_initialization_options())
            group.cancel_scope.cancel()


if __name__ == "__main__":
    if os.environ.get("ELICIT_ERA") == "legacy":
        import anyio

        anyio.run(run_legacy)
    else:
        server.run("stdio")
