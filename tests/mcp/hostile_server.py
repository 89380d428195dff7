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
- ``unreadable``: three more tools, whose messages are not valid UTF-8: ``mangled`` (its reply
  spelled as ``UNREADABLE[how]`` says), ``held`` (sends a progress notification at once and its
  reply only after the next ``mangled`` reply) and ``ask`` (puts an ``elicitation/create``
  request that is not UTF-8 to the client, and returns what the client answered).
- ``unreadable-list``: its ``tools/list`` reply is not valid UTF-8.
- ``late``: well behaved, after sleeping ``HOSTILE_START_DELAY`` seconds (default 2) before it
  reads anything: a server slow to start.
- ``odd-replies``: one more tool, ``deep``, whose input schema is nested 300 levels (past what
  the SDK's model of a message takes), and ``echo`` answers the texts ``null``, ``list`` and
  ``nested`` with a result that is ``null``, an array, or nested 600 levels.

With ``HOSTILE_RECORD=<file>`` it appends one JSON line per message received: ``{"method",
"id", "cursor", "pid"}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
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
NO_ARGS = {"type": "object", "properties": {}}
UNREADABLE_TOOLS = [
    {
        "name": "mangled",
        "description": "Answered with a reply that is not UTF-8.",
        "inputSchema": {"type": "object", "properties": {"how": {"type": "string"}}},
    },
    {
        "name": "held",
        "description": "Answered after the next mangled reply.",
        "inputSchema": NO_ARGS,
    },
    {
        "name": "ask",
        "description": "Asks the client something, not in UTF-8.",
        "inputSchema": NO_ARGS,
    },
]
# A reply to a tools/call, with ID for its id and TEXT for its text (JSON-encoded, quoted).
REPLY = b'{"jsonrpc": "2.0", "id": ID, "result": {"content": [{"type": "text", "text": TEXT}]}}'
# How a mangled reply is spelled: (where the bytes go, the bytes). "text" puts them inside the
# text string of an otherwise valid reply, "key" inside a key, "id" inside the id string,
# "between" between two tokens, "end" after the last brace, "error" in an error's message.
UNREADABLE: dict[str, tuple[str, bytes]] = {
    "continuation": ("text", b"caf\x80 au lait"),  # a lone continuation byte
    "truncated": ("text", b"costs 5 \xe2\x82"),  # a multibyte sequence cut short
    "truncated-end": ("end", b"\xe2\x82"),
    "overlong": ("text", b"a slash \xc0\xaf"),  # '/' spelled in two bytes
    "overlong-3": ("text", b"a slash \xe0\x80\xaf"),  # and in three
    "surrogate": ("text", b"half a pair \xed\xa0\x80"),  # U+D800 encoded as if a character
    "surrogate-low": ("text", b"\xed\xbf\xbf the other half"),  # U+DFFF
    "latin-1": ("text", b"na\xefve r\xe9sum\xe9"),  # another encoding's text
    "invalid-bytes": ("text", b"\xff\xfe\xf8\xf5"),  # bytes UTF-8 never has
    "key": ("key", b"\xff"),
    "id": ("id", b"\x80"),
    "between": ("between", b"\x80"),
    "error": ("error", b"quota exceeded \xff\xfe"),
}
HELD: list[Any] = []  # ids of held calls, answered after the next mangled reply


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
    elif MODE == "unreadable":
        reply(request_id, {"tools": TOOLS + UNREADABLE_TOOLS})
    elif MODE == "odd-replies":
        reply(request_id, {"tools": [*TOOLS, {"name": "deep", "inputSchema": nested(300)}]})
    elif MODE == "unreadable-list":  # a description that is not UTF-8
        listed = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        raw(listed.encode().replace(b"Return the text.", b"Return the text \xff\xfe."))
    else:
        reply(request_id, {"tools": TOOLS})


def mangled(request_id: Any, how: str) -> bytes:
    where, bad = UNREADABLE[how]
    rid = json.dumps(request_id).encode()
    line = REPLY.replace(b"ID", rid)
    if where == "text":
        return line.replace(b"TEXT", b'"' + bad + b'"')
    line = line.replace(b"TEXT", b'"fine"')
    if where == "key":
        return line.replace(b'"text": "fine"', b'"te' + bad + b'xt": "fine"')
    if where == "id":
        return line.replace(rid, rid[:-1] + bad + rid[-1:]) if rid.endswith(b'"') else line + bad
    if where == "between":
        return line.replace(b'"result"', bad + b' "result"')
    if where == "end":
        return line + bad
    error = b'{"jsonrpc": "2.0", "id": ID, "error": {"code": -32000, "message": "MSG"}}'
    return error.replace(b"ID", rid).replace(b"MSG", bad)


def unreadable_call(request_id: Any, params: dict[str, Any]) -> None:
    name = params.get("name")
    if name == "mangled":
        raw(mangled(request_id, str(params.get("arguments", {}).get("how"))))
        while HELD:
            reply(HELD.pop(0), {"content": [{"type": "text", "text": "held, then answered"}]})
    elif name == "held":
        token = (params.get("_meta") or {}).get("progressToken")
        if token is not None:
            progress = {"progressToken": token, "progress": 1, "message": "holding"}
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": progress})
        HELD.append(request_id)
    else:  # ask: an elicitation/create whose message is not UTF-8, then what came back
        raw(
            b'{"jsonrpc": "2.0", "id": "ask-1", "method": "elicitation/create", "params": '
            b'{"mode": "form", "message": "Proceed? \xc0\xaf", "requestedSchema": '
            b'{"type": "object", "properties": {}}}}'
        )
        answer = json.loads(sys.stdin.buffer.readline())
        record(answer)
        said = answer.get("error", {}).get("message") or f"accepted: {answer.get('result')}"
        reply(request_id, {"content": [{"type": "text", "text": f"the client said: {said}"}]})


def nested(levels: int) -> dict[str, Any]:
    """An object schema whose one property is an array of arrays ``levels`` deep."""
    inner: dict[str, Any] = {}
    for _ in range(levels):
        inner = {"type": "array", "items": inner}
    return {"type": "object", "properties": {"a": inner}}


def odd_reply(request_id: Any, text: str) -> None:
    if text == "null":
        raw(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": None}).encode())
    elif text == "list":
        raw(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": [1, 2]}).encode())
    elif text == "nested":
        content = [{"type": "text", "text": "deep"}]
        reply(request_id, {"content": content, "structuredContent": nested(600)})
    else:
        reply(request_id, {"content": [{"type": "text", "text": text}], "isError": False})


def tools_call(request_id: Any, params: dict[str, Any]) -> None:
    if MODE == "unreadable" and params.get("name") in ("mangled", "held", "ask"):
        unreadable_call(request_id, params)
    elif params.get("name") == "echo" and MODE == "odd-replies":
        odd_reply(request_id, str(params.get("arguments", {}).get("text", "")))
    elif params.get("name") == "echo" and MODE == "garbage-calls":
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
    if MODE == "late":
        time.sleep(float(os.environ.get("HOSTILE_START_DELAY", "2")))
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
