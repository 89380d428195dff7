"""A hand-written streamable HTTP MCP server (the handshake era) whose answers to ``tools/call``
are not valid UTF-8, spelled several ways. Every byte it writes is chosen here. It binds
127.0.0.1 on a free port and prints ``PORT <n>`` on stdout.

Tools: ``json`` answers with an ``application/json`` body, ``sse`` with an event stream, each
spelled as its ``how`` argument says (the keys of ``SPELLINGS``); ``fine`` answers ``fine``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[2]))  # run as a script: the repository's root

from tests.mcp.raw_http import head, json_answer, plain_reply, serve

OBJECT = {"type": "object", "properties": {"how": {"type": "string"}}}
# Where the bytes go ("text": inside the reply's text string; "between": between two tokens;
# "error": in an error's message), and the bytes.
SPELLINGS: dict[str, tuple[str, bytes]] = {
    "continuation": ("text", b"caf\x80 au lait"),
    "truncated": ("text", b"costs 5 \xe2\x82"),
    "overlong": ("text", b"a slash \xc0\xaf"),
    "surrogate": ("text", b"half a pair \xed\xa0\x80"),
    "invalid-bytes": ("text", b"\xff\xfe\xf8\xf5"),
    "between": ("between", b"\x80"),
    "error": ("error", b"quota exceeded \xff\xfe"),
}


def mangled(request_id: Any, how: str) -> bytes:
    where, bad = SPELLINGS[how]
    rid = json.dumps(request_id).encode()
    if where == "error":
        return (
            b'{"jsonrpc": "2.0", "id": '
            + rid
            + b', "error": {"code": -32000, "message": "'
            + bad
            + b'"}}'
        )
    text = bad if where == "text" else b"fine"
    result = b'"result": {"content": [{"type": "text", "text": "' + text + b'"}]}'
    gap = bad if where == "between" else b""
    return b'{"jsonrpc": "2.0", "id": ' + rid + b"," + gap + b" " + result + b"}"


async def answer(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    request_id, params = message["id"], message.get("params") or {}
    name = params.get("name")
    if message["method"] == "tools/call" and name in ("json", "sse"):
        out = mangled(request_id, str((params.get("arguments") or {}).get("how")))
        if name == "sse":
            event = b"event: message\ndata: " + out + b"\n\n"
            stream = {"content-type": "text/event-stream", "content-length": str(len(event))}
            writer.write(head("200 OK", stream) + event)
        else:
            writer.write(json_answer(out))
    elif message["method"] == "tools/call":
        result = {"content": [{"type": "text", "text": "fine"}]}
        writer.write(
            json_answer(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode())
        )
    else:
        tools = [{"name": n, "inputSchema": OBJECT} for n in ("json", "sse", "fine")]
        writer.write(plain_reply(message, "unreadable", tools))
    await writer.drain()


if __name__ == "__main__":
    serve(answer)
