"""A hand-written streamable HTTP MCP server (the handshake era) whose answers to ``tools/call``
are not valid UTF-8, spelled several ways. Every byte it writes is chosen here. It binds
127.0.0.1 on a free port and prints ``PORT <n>`` on stdout.

Tools: ``json`` answers with an ``application/json`` body, ``sse`` with an event stream, each
spelled as its ``how`` argument says (the keys of ``SPELLINGS``); ``fine`` answers ``fine``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

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


def head(status: str, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status}", "mcp-session-id: s1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer(message: dict[str, Any]) -> bytes:
    request_id, method = message["id"], message["method"]
    params = message.get("params") or {}
    json_type = {"content-type": "application/json"}
    if method == "tools/call" and params.get("name") in ("json", "sse"):
        out = mangled(request_id, str((params.get("arguments") or {}).get("how")))
        if params.get("name") == "sse":
            event = b"event: message\ndata: " + out + b"\n\n"
            return (
                head(
                    "200 OK",
                    {"content-type": "text/event-stream", "content-length": str(len(event))},
                )
                + event
            )
        return head("200 OK", {**json_type, "content-length": str(len(out))}) + out
    if method == "initialize":
        result: Any = {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "unreadable", "version": "0"},
        }
    elif method == "tools/list":
        result = {
            "tools": [{"name": name, "inputSchema": OBJECT} for name in ("json", "sse", "fine")]
        }
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "fine"}]}
    else:
        error = {"code": -32601, "message": f"Method not found: {method}"}
        out = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
        return head("200 OK", {**json_type, "content-length": str(len(out))}) + out
    out = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()
    return head("200 OK", {**json_type, "content-length": str(len(out))}) + out


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            lines = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
            method = lines[0].split()[0]
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in lines[1:] if ":" in line)
            }
            data = await reader.readexactly(int(headers.get("content-length", "0")))
            if method != "POST":
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            else:
                message = json.loads(data)
                if "id" not in message or "method" not in message:
                    writer.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
                else:
                    writer.write(answer(message))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
