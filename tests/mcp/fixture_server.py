"""The fixture MCP server of the bridge's tests, on the official SDK's ``MCPServer``.

Run as ``python fixture_server.py stdio`` or ``python fixture_server.py http`` (it then binds
127.0.0.1 on a free port and prints ``PORT <n>`` on stdout). It shows what the public servers
cannot: a slow tool that records its own cancellation, a tool list that changes on demand, errors,
typed output, names a provider would refuse, a schema fastgate cannot compile, a crash.

With ``FIXTURE_RECORD=<file>`` it appends one JSON line per event: ``{"event": "wire", ...}`` for
every notification it receives over stdio (so a test can count ``notifications/cancelled``), and
``start`` / ``cancelled`` / ``done`` for the slow tools, with their ``tag``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, StringConstraints

RECORD = os.environ.get("FIXTURE_RECORD")
LONG_NAME = "summarize_the_quarterly_revenue_figures_for_every_region_and_product"  # 68 chars
ACCENTED_NAME = "café_au_lait"


class FixtureServer(MCPServer):
    async def list_tools(self) -> list[Any]:
        tools = await super().list_tools()
        for tool in tools:
            if tool.name == "wrong_output":  # declares a schema its result then breaks
                tool.output_schema = Sum.model_json_schema()
        return tools


server = FixtureServer("fastgate-fixture")
generation = {"n": 1}


def record(event: str, **fields: Any) -> None:
    if RECORD:
        with open(RECORD, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n")


class Sum(BaseModel):
    sum: int


class Versioned(BaseModel):
    v: int


class VersionedText(BaseModel):
    v: str


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return the text as it came."""
    return text


@server.tool()
def add(a: int, b: int) -> Sum:
    """Add two integers (typed output)."""
    return Sum(sum=a + b)


@server.tool()
def wrong_output() -> CallToolResult:
    """Return structured content that breaks its own output schema."""
    return CallToolResult(
        content=[TextContent(type="text", text="sum is seven")],
        structured_content={"sum": "seven"},
    )


@server.tool()
def structured_only() -> CallToolResult:
    """Structured content and no text block."""
    return CallToolResult(content=[], structured_content={"rows": [1, 2, 3]})


@server.tool()
def fail(message: str) -> str:
    """Fail with the given message (an isError result)."""
    raise ToolError(message)


@server.tool()
async def slow(seconds: float, steps: int = 0, tag: str = "", ctx: Context | None = None) -> str:
    """Sleep ``seconds``, reporting progress ``steps`` times on the way."""
    record("start", tag=tag)
    try:
        for step in range(steps):
            await anyio.sleep(seconds / max(steps, 1))
            if ctx is not None:
                await ctx.report_progress(step + 1, steps, f"step {step + 1}")
        if not steps:
            await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        record("cancelled", tag=tag)
        raise
    record("done", tag=tag)
    return f"slept {seconds}"


@server.tool()
async def versioned(seconds: float = 0.0, tag: str = "", ctx: Context | None = None) -> Versioned:
    """Typed output whose schema changes at the next generation (see ``bump``)."""
    record("start", tag=tag)
    if ctx is not None:
        await ctx.report_progress(0, 1, "started")  # the test knows the call is in flight
    await anyio.sleep(seconds)
    record("done", tag=tag)
    return Versioned(v=1)


async def versioned_text(seconds: float = 0.0, tag: str = "") -> VersionedText:
    """Typed output, second generation: ``v`` is now a string."""
    await anyio.sleep(seconds)
    return VersionedText(v="one")


def extra_tool() -> str:
    """A tool that exists from the second generation on."""
    return "extra"


@server.tool()
async def bump(ctx: Context) -> str:
    """Change the tool list (``versioned`` changes its output, ``extra`` appears) and say so."""
    if generation["n"] == 1:
        server.remove_tool("versioned")
        server.add_tool(versioned_text, name="versioned")
        server.add_tool(extra_tool, name="extra")
        generation["n"] = 2
    await ctx.notify_tools_changed()  # 2026 era: to subscriptions/listen streams
    try:
        await ctx.request_context.session.send_tool_list_changed()  # handshake era
    except Exception:
        pass
    return f"generation {generation['n']}"


@server.tool(name=LONG_NAME)
def long_named() -> str:
    """A name longer than providers accept once prefixed."""
    return "long"


@server.tool(name=ACCENTED_NAME)
def accented() -> str:
    """A name with a character outside [A-Za-z0-9_-]."""
    return "accented"


@server.tool()
def uncompilable(counts: dict[Annotated[str, StringConstraints(pattern="^[a-z]+$")], int]) -> str:
    """Its input schema uses patternProperties, which fastgate does not compile."""
    return str(counts)


@server.tool()
def crash() -> str:
    """Exit the server process at once, mid-call."""
    os._exit(3)


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def spawn_child() -> int:
    """Start a long sleeper in the server's process group and return its pid."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return child.pid


@server.tool()
def spawn_daemon() -> int:
    """Start a long sleeper in a session of its own (out of the server's process group, as a
    daemon detaches) and return its pid."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return child.pid


@server.tool()
def shout(lines: int) -> str:
    """Write ``lines`` lines to stderr (a server that is chatty on stderr)."""
    for i in range(lines):
        print(f"stderr line {i} " + "x" * 80, file=sys.stderr)
    sys.stderr.flush()
    return f"wrote {lines} lines"


@server.tool()
def big(chars: int) -> str:
    """Return a text of ``chars`` characters."""
    return "y" * chars


@server.tool()
async def big_streamed(chars: int, ctx: Context | None = None) -> str:
    """Report progress once (an HTTP answer then comes as an event stream), then return a text
    of ``chars`` characters."""
    if ctx is not None:
        await ctx.report_progress(1, 1)
    return "y" * chars


async def run_stdio() -> None:
    lowlevel = server._lowlevel_server
    async with stdio_server() as (read, write):
        relay_in, relay_out = anyio.create_memory_object_stream[Any](0)

        async def relay() -> None:
            async with relay_in:
                async for item in read:
                    message = getattr(getattr(item, "message", None), "root", None) or getattr(
                        item, "message", None
                    )
                    method = getattr(message, "method", None)
                    if method is not None and getattr(message, "id", None) is None:
                        params = getattr(message, "params", None)
                        record("wire", method=method, params=params)
                    await relay_in.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(relay)
            await lowlevel.run(relay_out, write, lowlevel.create_initialization_options())
            tg.cancel_scope.cancel()


async def run_http() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # before the port is announced: a client connecting at once is queued
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    record("boot", mode=sys.argv[1], time=time.time())
    anyio.run(run_stdio if sys.argv[1] == "stdio" else run_http)
