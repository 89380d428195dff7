"""A hand-written stdio MCP server that misbehaves on purpose, one way per mode.

No SDK: every byte it writes is chosen here, so a test can send what a real SDK never would.
It speaks the handshake era (``server/discover`` is refused, ``initialize`` answered) and has three
tools: ``echo`` (returns its text), ``refuse`` (answered with a JSON-RPC error, not a result) and
``bump`` (sends ``notifications/tools/list_changed`` before its result).

Run as ``python hostile_server.py MODE``:

- ``plain``: well behaved.
- ``banner``: a banner and debug prints on stdout before and between its messages (plain text,
  JSON that is not JSON-RPC, bytes that are not UTF-8, a reply to an id nobody sent).
- ``garbage``: answers every line with lines that are not JSON-RPC, never with a message.
- ``garbage-calls``: well behaved, except that a ``tools/call`` of ``echo`` is answered with lines
  that are not JSON-RPC, never with its result.
- ``error-initialize``: ``initialize`` gets a JSON-RPC error.
- ``error-list``: ``tools/list`` gets a JSON-RPC error.
- ``error-relist``: the first ``tools/list`` is answered, every later one gets a JSON-RPC error.
- ``endless-pages``: every ``tools/list`` page has a new ``nextCursor``.
- ``same-cursor``: every ``tools/list`` page has the same ``nextCursor``.
- ``crowded``: every ``tools/list`` page has a new ``nextCursor`` and 1,000 more tools.

With ``HOSTILE_RECORD=<file>`` it appends one JSON line per message received: ``{"method",
"id", "cursor", "pid"}``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

MODE = sys.argv[1] if len(sys.argv) > 1 else "plain"
RECORD = os.environ.get("HOSTILE_RECORD")
OUT = sys.stdout.buffer

TOOLS = [
    {
        "name": "echo",
        "description": "Return the text.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
    {
        "name": "refuse",
        "description": "Answered with a JSON-RPC error.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "bump",
        "description": "Say that the tool list changed.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]
LISTS = {"n": 0}  # tools/list requests answered so far


def raw(data: bytes) -> None:
    OUT.write(data + b"\n")
    OUT.flush()


def stray() -> None:
    if MODE == "banner":
        raw(b"DEBUG: handling a request")


def send(message: dict[str, Any]) -> None:
    stray()
    raw(json.dumps(message).encode())
    stray()


def reply(request_id: Any, result: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def error(request_id: Any, code: int, message: str) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


def record(message: dict[str, Any]) -> None:
    if RECORD:
        params = message.get("params") or {}
        entry = {
            "method": message.get("method"),
            "id": message.get("id"),
            "cursor": params.get("cursor") if isinstance(params, dict) else None,
            "pid": os.getpid(),
        }
        with open(RECORD, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def filler(page: int) -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {}}
    return [{"name": f"t{page}_{i}", "inputSchema": schema} for i in range(1000)]


def tools_list(request_id: Any, cursor: Any) -> None:
    LISTS["n"] += 1
    page = int(cursor.removeprefix("page-")) if str(cursor).startswith("page-") else 0
    if MODE == "error-list" or (MODE == "error-relist" and LISTS["n"] > 1):
        error(request_id, -32602, "tools/list is not available to this client")
    elif MODE == "endless-pages":
        reply(request_id, {"tools": TOOLS if page == 0 else [], "nextCursor": f"page-{page + 1}"})
    elif MODE == "crowded":
        reply(request_id, {"tools": filler(page), "nextCursor": f"page-{page + 1}"})
    elif MODE == "same-cursor":
        reply(request_id, {"tools": TOOLS if cursor is None else [], "nextCursor": "again"})
    else:
        reply(request_id, {"tools": TOOLS})


def tools_call(request_id: Any, params: dict[str, Any]) -> None:
    if params.get("name") == "echo" and MODE == "garbage-calls":
        raw(b"echo: working on it")
        raw(b"echo: still working")
    elif params.get("name") == "echo":
        text = str(params.get("arguments", {}).get("text", ""))
        reply(request_id, {"content": [{"type": "text", "text": text}], "isError": False})
    elif params.get("name") == "refuse":
        error(request_id, -32602, "Invalid params: refuse takes no calls today")
    elif params.get("name") == "bump":
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        reply(request_id, {"content": [{"type": "text", "text": "bumped"}], "isError": False})
    else:
        error(request_id, -32602, f"Unknown tool: {params.get('name')}")


def handle(message: dict[str, Any]) -> None:
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:
        return  # a notification
    params = message.get("params") or {}
    if method == "initialize":
        if MODE == "error-initialize":
            error(request_id, -32602, "Unsupported client: fastgate is not allowed here")
            return
        version = params.get("protocolVersion", "2025-06-18")
        reply(
            request_id,
            {
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "0"},
            },
        )
    elif method == "tools/list":
        tools_list(request_id, params.get("cursor"))
    elif method == "tools/call":
        tools_call(request_id, params)
    else:
        error(request_id, -32601, f"Method not found: {method}")


def main() -> None:
    if MODE == "banner":
        raw(b"hostile server 0.1 starting up")
        raw(b"")
        raw(b'{"level": "info", "msg": "a log record: JSON, but not JSON-RPC"}')
        raw(b"\xff\xfe not utf-8 \xc3\x28")
        raw(b'{"jsonrpc": "2.0", "id": 987654, "result": {}}')  # a reply nobody asked for
        raw(b"[1, 2, 3]")
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        if MODE == "garbage":
            raw(b"Welcome! Type HELP for a list of commands.")
            raw(b"?SYNTAX ERROR")
            continue
        message = json.loads(line)
        record(message)
        handle(message)


if __name__ == "__main__":
    main()
