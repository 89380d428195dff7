"""The servers of the "serve" bench scenario, each in a process of its own on uvicorn (uvloop,
httptools), printing ``PORT <n>`` once it listens:

- ``bare``: the official SDK's low-level ``Server`` with one no-op tool, ``noop(text)``, on the
  SDK's own streamable HTTP app: the reference;
- ``gateway``: ``fastgate.serve.Gateway`` serving the same tool with policy (rules), the journal
  (a SQLite store), the audit (a JSONL file) and a bearer token on, and ``touch``, the same
  no-op declared ``WRITE``;
- ``proxy URL``: a ``Gateway`` serving the tools of the MCP server at ``URL`` (the bare one)
  through the bridge, as ``mcp__up__noop``, with the same policy, journal and audit.

``python -m fastgate.cli.bench.serve_server bare|gateway|proxy [URL] DIR``
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

NOOP_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "returned as it came"}},
    "required": ["text"],
}
TOKEN = "bench-token"
CALLERS = 64


def _listen() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


async def _serve(app: Any, sock: socket.socket, *, as_fastgate_serve: bool = False) -> None:
    """``app`` on uvicorn; ``as_fastgate_serve``: with what ``fastgate serve`` adds to uvicorn
    (a deadline on each request's head, no forwarding headers believed)."""
    import uvicorn

    from fastgate.serve import http_protocol

    http: Any = http_protocol("httptools", 30.0) if as_fastgate_serve else "httptools"
    config = uvicorn.Config(
        app,
        http=http,
        lifespan="on",
        log_level="warning",
        access_log=False,
        backlog=1024,
        proxy_headers=not as_fastgate_serve,
    )
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


def _bare() -> Any:
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name="noop",
                    description="Return the text.",
                    input_schema=NOOP_SCHEMA,
                    annotations=types.ToolAnnotations(read_only_hint=True),
                )
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = (params.arguments or {}).get("text", "")
        return types.CallToolResult(content=[types.TextContent(type="text", text=str(text))])

    # The SDK's own shortcut for a tool's input schema (else every 2026-era call with arguments
    # would run the tools/list handler first): the reference at its best.
    server = Server(
        "bare",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=lambda name: NOOP_SCHEMA if name == "noop" else None,
    )
    return server.streamable_http_app(host="127.0.0.1")


def noop_tool(name: str = "noop", kind: str = "READ_ONLY") -> Any:
    """The gateway's no-op tool, ``noop(text)``; given ``kind="WRITE"``, the same no-op with a
    side effect declared, whose journal records are synced before it runs
    (``benchmarks/journal_latency.py`` times both)."""
    import fastgate

    @fastgate.tool(name=name, kind=kind, parallelism="shared", is_concurrency_safe=True)
    async def noop(text: str) -> str:
        """Return the text.

        Args:
            text: returned as it came.
        """
        return text

    return noop


@contextlib.asynccontextmanager
async def _gateway(directory: str, upstream: str | None) -> AsyncIterator[Any]:
    from fastgate import (
        ConcurrencyScheduler,
        FileLockManager,
        PermissionConfig,
        SchedulerLimits,
        SqliteToolUseStore,
        ToolExecutor,
        ToolRegistry,
    )
    from fastgate.serve import Gateway, GatewayAudit, token_digest

    registry = ToolRegistry()
    registry.register(noop_tool())
    registry.register(noop_tool("touch", "WRITE"))
    permissions = PermissionConfig(
        allow=["noop", "touch", "mcp__up"], deny=["noop(secret*)", "mcp__up__delete"], ask=["bash"]
    )
    # FASTGATE_BENCH_SERVE_OFF=journal,audit,telemetry: a diagnostic run without them (what each
    # costs).
    off = set(os.environ.get("FASTGATE_BENCH_SERVE_OFF", "").split(","))
    store = None
    if "journal" not in off:
        store = await SqliteToolUseStore.open(f"{directory}/journal-{upstream is not None}.db")
    audit = (
        None if "audit" in off else GatewayAudit(f"{directory}/audit-{upstream is not None}.jsonl")
    )
    executor = ToolExecutor(
        registry,
        permissions=permissions,
        scheduler=ConcurrencyScheduler(
            SchedulerLimits(global_limit=CALLERS, session_limit=CALLERS)
        ),
        locks=FileLockManager(),
        store=store,
        audit=audit,
    )
    if "telemetry" not in off:
        with contextlib.suppress(ImportError):  # as fastgate serve does, where OpenTelemetry is
            from fastgate.telemetry import instrument

            instrument(executor)
    tokens = {token_digest(TOKEN): {"principal": "bench", "mode": None, "scope": None}}
    bridge = None
    if upstream is not None:
        from fastgate.mcp import MCPBridge, MCPServerConfig

        server = MCPServerConfig(
            "up", url=upstream, max_concurrency=CALLERS, trust_annotations=True
        )
        bridge = MCPBridge(registry, [server])
        await bridge.start()
    try:
        yield Gateway(
            executor,
            tokens=tokens,
            bridge=bridge,
            audit=audit,
            rate_limit=None,  # one principal makes every call of the run
            allowed_hosts=["127.0.0.1:*", "localhost:*"],
        ).asgi()
    finally:
        if bridge is not None:
            await bridge.aclose()
        executor.dispose()
        if audit is not None:
            await audit.aclose()
        if store is not None:
            await store.close()


async def main(argv: list[str]) -> None:
    sock = _listen()
    if argv[0] == "bare":
        app = _bare()
        # FASTGATE_BENCH_SERVE_FREEZE_BARE=1: a diagnostic run with the reference's startup heap
        # frozen as the gateway's is (what that tuning alone is worth to it).
        if os.environ.get("FASTGATE_BENCH_SERVE_FREEZE_BARE") == "1":
            gc.collect()
            gc.freeze()
        await _serve(app, sock)
        return
    from fastgate.cli.serve import SWITCH_INTERVAL, freeze_startup_heap

    sys.setswitchinterval(SWITCH_INTERVAL)  # as fastgate serve runs
    upstream = argv[1] if argv[0] == "proxy" else None
    async with _gateway(argv[-1], upstream) as app:
        freeze_startup_heap()  # as fastgate serve does once it is up
        await _serve(app, sock, as_fastgate_serve=True)


if __name__ == "__main__":
    from fastgate.cli.bench.children import die_with_parent
    from fastgate.runtime import run

    die_with_parent()
    run(main(sys.argv[1:]))
