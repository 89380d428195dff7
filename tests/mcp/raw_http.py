"""What the hand-written streamable HTTP MCP servers share (the handshake era): the head of an
answer, the JSON answers to the handshake, the listing and unknown methods, and the loop that
reads requests and hands each call to the server's own ``answer``. Every byte written is chosen
by the server or here. ``serve(answer)`` binds 127.0.0.1 on a free port and prints
``PORT <n>`` on stdout."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

OBJECT = {"type": "object", "properties": {}}
JSON_TYPE = {"content-type": "application/json"}

# answer(writer, message): write the answer to a JSON-RPC request (``id`` and ``method`` set).
Answer = Callable[[asyncio.StreamWriter, dict[str, Any]], Awaitable[None]]


def head(status: str, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status}", "mcp-session-id: s1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def json_answer(body: bytes, status: str = "200 OK") -> bytes:
    return head(status, {**JSON_TYPE, "content-length": str(len(body))}) + body


def plain_reply(message: dict[str, Any], server: str, tools: list[dict[str, Any]]) -> bytes:
    """The answer to ``initialize``, ``tools/list`` (``tools``) or any other method (not found):
    a whole HTTP answer."""
    request_id, method = message["id"], message["method"]
    params = message.get("params") or {}
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": server, "version": "0"},
        }
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": result}
    elif method == "tools/list":
        reply = {"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}}
    else:
        error = {"code": -32601, "message": f"Method not found: {method}"}
        reply = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return json_answer(json.dumps(reply).encode())


def serve(answer: Answer) -> None:
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
                    await writer.drain()
                    continue
                message = json.loads(data)
                if "id" not in message or "method" not in message:
                    writer.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                await answer(writer, message)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
        await server.serve_forever()

    asyncio.run(main())
