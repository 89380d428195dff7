"""A hand-written stdio MCP server that sends more than a client should hold: huge content
blocks of every kind, progress notifications with huge messages, tools whose definitions are
huge, listings that are huge in all, an input request of many questions. Every byte it writes is
chosen here.

Run as ``python bounds_server.py ERA [LISTING]``. ``ERA`` is ``legacy`` (``initialize``) or
``modern`` (the 2026 protocol: ``server/discover``, results typed). ``LISTING`` is ``plain`` (the
tools below), ``fat`` (the tools below and one tool per entry of ``FAT``, each over a megabyte
in one place), ``heavy`` (the tools below, then ``HEAVY_PAGES`` pages of tools of half a
megabyte each), ``odd-names`` (the tools below and 40 tools refused for their schema, each
named with 200 kB of escapes), or ``refuse-<method>`` (that request, ``initialize``,
``server/discover`` or ``tools/list``, is answered with an error message of megabytes), or
``deaf`` (after its first listing it never reads its stdin again).
A tool ``<name>`` answers with ``RESULTS[name]``; ``progress`` first sends 40
progress notifications of a megabyte each; ``questions`` (modern) asks 40 questions in one
input request, and counts the answers it got in its result.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

ERA = sys.argv[1]
LISTING = sys.argv[2] if len(sys.argv) > 2 else "plain"
OUT = sys.stdout.buffer
MODERN = "2026-07-28"
OBJECT = {"type": "object", "properties": {}}
BIG = 3_000_000
B64 = "QUJD" * (BIG // 4)
HEAVY_PAGES = 12


def png(data: str) -> dict[str, Any]:
    return {"type": "image", "data": data, "mimeType": "image/png"}


RESULTS: dict[str, dict[str, Any]] = {
    "text_and_image": {"content": [{"type": "text", "text": "t" * BIG}, png("QUJD")]},
    "big_image": {"content": [{"type": "text", "text": "a picture:"}, png(B64)]},
    "big_audio": {"content": [{"type": "audio", "data": B64, "mimeType": "audio/wav"}]},
    "resource_text": {
        "content": [{"type": "resource", "resource": {"uri": "file:///r", "text": "r" * BIG}}]
    },
    "resource_blob": {
        "content": [{"type": "resource", "resource": {"uri": "file:///b", "blob": B64}}]
    },
    "many_blocks": {"content": [png("QUJD")] * 100_000},
    "long_labels": {
        "content": [
            {"type": "resource_link", "uri": "file:///" + "u" * BIG, "name": "n" * BIG},
            png("QUJD"),
        ]
    },
    "resource_meta": {
        "content": [
            {
                "type": "resource",
                "resource": {"uri": "file:///m", "text": "m", "_meta": {"k": ["w" * 1000] * 3000}},
            },
            png("QUJD"),
        ]
    },
    "structured_shown": {
        "content": [{"type": "text", "text": "s" * BIG}, png("QUJD")],
        "structuredContent": {"ok": True},
    },
    "progress": {"content": [{"type": "text", "text": "done"}]},
    "small": {"content": [{"type": "text", "text": "fine"}]},
}
# Tools each over a megabyte in one place.
FAT: dict[str, dict[str, Any]] = {
    "fat_description": {"description": "d" * 1_100_000, "inputSchema": OBJECT},
    "fat_input": {
        "inputSchema": {
            "type": "object",
            "properties": {
                f"p{i}": {"type": "string", "enum": ["a" * 40] * 5} for i in range(5000)
            },
        }
    },
    "fat_output": {
        "inputSchema": OBJECT,
        "outputSchema": {"type": "object", "description": "o" * 1_100_000},
    },
    "fat_name_" + "n" * 1_100_000: {"inputSchema": OBJECT},
}


# What a server's error message or tool name can be: megabytes, terminal escapes in them.
HUGE_WORDS = "no\x1b[2J" * 1_000_000


def tools(cursor: Any) -> dict[str, Any]:
    if LISTING == "heavy" and cursor is not None:
        page = int(cursor)
        listed = [{"name": f"heavy_{page}", "description": "h" * 500_000, "inputSchema": OBJECT}]
        return {"tools": listed, **({"nextCursor": str(page + 1)} if page < HEAVY_PAGES else {})}
    listed = [{"name": name, "inputSchema": OBJECT} for name in RESULTS]
    if ERA == "modern":
        listed.append({"name": "questions", "inputSchema": OBJECT})
    if LISTING == "fat":
        listed += [{"name": name, **body} for name, body in FAT.items()]
    if LISTING == "odd-names":  # each refused for its schema, under a name of 200 kB
        odd = {"type": "object", "frobnicate": True}
        listed += [{"name": f"{i}{HUGE_WORDS[:200_000]}", "inputSchema": odd} for i in range(40)]
    return {"tools": listed, **({"nextCursor": "1"} if LISTING == "heavy" else {})}


def send(message: dict[str, Any]) -> None:
    OUT.write(json.dumps(message).encode() + b"\n")
    OUT.flush()


def result(request_id: Any, body: dict[str, Any]) -> None:
    if ERA == "modern":
        body = {"resultType": "complete", **body}
    send({"jsonrpc": "2.0", "id": request_id, "result": body})


def questions(request_id: Any, params: dict[str, Any]) -> None:
    answers = params.get("inputResponses")
    if answers:
        text = f"answered {len(answers)}"
        result(request_id, {"content": [{"type": "text", "text": text}]})
        return
    ask = {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Say yes",
            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
        },
    }
    body = {
        "resultType": "input_required",
        "inputRequests": {f"q{i}": ask for i in range(40)},
        "requestState": "st",
    }
    send({"jsonrpc": "2.0", "id": request_id, "result": body})


def call(request_id: Any, params: dict[str, Any]) -> None:
    name = params.get("name")
    if name == "questions":
        questions(request_id, params)
        return
    if name == "progress":
        token = (params.get("_meta") or {}).get("progressToken")
        for i in range(40):
            note = {"progressToken": token, "progress": i, "message": "m" * 1_000_000}
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": note})
    if name in RESULTS:
        result(request_id, RESULTS[name])
    else:
        error = {"code": -32602, "message": "Unknown tool"}
        send({"jsonrpc": "2.0", "id": request_id, "error": error})


def handle(message: dict[str, Any]) -> None:
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:
        return  # a notification
    params = message.get("params") or {}
    if LISTING == f"refuse-{method}":
        error = {"code": -32600, "message": HUGE_WORDS}
        send({"jsonrpc": "2.0", "id": request_id, "error": error})
    elif method == "server/discover" and ERA == "modern":
        info = {"name": "bounds", "version": "0"}
        body = {"supportedVersions": [MODERN], "capabilities": {"tools": {}}, "serverInfo": info}
        result(request_id, body)
    elif method == "initialize" and ERA == "legacy":
        body = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bounds", "version": "0"},
        }
        result(request_id, body)
    elif method == "tools/list":
        result(request_id, tools(params.get("cursor")))
        if LISTING == "deaf":  # reads nothing more, ever: what is written to it stays unread
            time.sleep(3600)
    elif method == "tools/call":
        call(request_id, params)
    else:
        error = {"code": -32601, "message": f"Method not found: {method}"}
        send({"jsonrpc": "2.0", "id": request_id, "error": error})


def main() -> None:
    for line in sys.stdin.buffer:
        if line.strip():
            handle(json.loads(line))


if __name__ == "__main__":
    main()
