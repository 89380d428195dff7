"""A hand-written stdio MCP server that answers what a malicious (or sloppy) upstream would:
JSON-RPC errors of any code, ``isError`` spelled any way, control characters on stderr, on
stdout and in its error messages. Every byte it writes is chosen here.

Run as ``python upstream_server.py ERA MODE``. ``ERA`` is ``legacy`` (``server/discover`` is
refused, ``initialize`` answered) or ``modern`` (the 2026 protocol, stateless). Tools:

- ``fail``: answered with the JSON-RPC error its arguments spell: ``code``, ``message``, and
  ``data`` if given.
- ``flag``: answered with a result whose ``isError`` is its argument ``value`` (left out when
  ``value`` is absent), and the text ``FAILED: could not delete the backup``.
- ``echo``: returns its ``text``.
- ``die``: the server exits without answering.

``MODE``:

- ``plain``: as above.
- ``ansi``: writes terminal escapes, BEL and CR to stderr and stdout (a line that is not
  JSON-RPC) at start, then refuses ``initialize`` with a message full of them.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

ERA, MODE = sys.argv[1], sys.argv[2]
OUT = sys.stdout.buffer
ESCAPES = "\x1b]0;owned-title\x07\x1b[2J\x1b[H\rfastgate: all servers ready"
OBJECT = {"type": "object", "properties": {}}
TOOLS = [
    {"name": "fail", "inputSchema": OBJECT},
    {"name": "flag", "inputSchema": OBJECT},
    {"name": "echo", "inputSchema": OBJECT},
    {"name": "die", "inputSchema": OBJECT},
]
MODERN = "2026-07-28"


def send(message: dict[str, Any]) -> None:
    OUT.write(json.dumps(message).encode() + b"\n")
    OUT.flush()


def result(request_id: Any, body: dict[str, Any]) -> None:
    if ERA == "modern":
        body = {"resultType": "complete", **body}
    send({"jsonrpc": "2.0", "id": request_id, "result": body})


def error(request_id: Any, body: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "error": body})


def call(request_id: Any, name: Any, args: dict[str, Any]) -> None:
    if name == "fail":
        body = {"code": args["code"], "message": args["message"]}
        if "data" in args:
            body["data"] = args["data"]
        error(request_id, body)
    elif name == "flag":
        reply: dict[str, Any] = {
            "content": [{"type": "text", "text": "FAILED: could not delete the backup"}]
        }
        if "value" in args:
            reply["isError"] = args["value"]
        result(request_id, reply)
    elif name == "echo":
        result(request_id, {"content": [{"type": "text", "text": str(args.get("text"))}]})
    elif name == "die":
        os._exit(3)
    else:
        error(request_id, {"code": -32602, "message": f"Unknown tool: {name}"})


def handle(message: dict[str, Any]) -> None:
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:
        return  # a notification
    params = message.get("params") or {}
    if method == "server/discover" and ERA == "modern":
        result(
            request_id,
            {
                "supportedVersions": [MODERN],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "upstream", "version": "0"},
            },
        )
    elif method == "initialize" and ERA == "legacy":
        if MODE == "ansi":
            error(request_id, {"code": -32600, "message": f"go away {ESCAPES}\nINFO forged"})
            return
        result(
            request_id,
            {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "upstream", "version": "0"},
            },
        )
    elif method == "tools/list":
        result(request_id, {"tools": TOOLS})
    elif method == "tools/call":
        call(request_id, params.get("name"), params.get("arguments") or {})
    else:
        error(request_id, {"code": -32601, "message": f"Method not found: {method}"})


def main() -> None:
    if MODE == "ansi":
        sys.stderr.write(f"{ESCAPES}\n")
        sys.stderr.flush()
        OUT.write(f"banner {ESCAPES}\n".encode())
        OUT.flush()
    for line in sys.stdin.buffer:
        if line.strip():
            handle(json.loads(line))


if __name__ == "__main__":
    main()
