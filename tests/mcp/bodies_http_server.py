"""A hand-written streamable HTTP MCP server (the handshake era, JSON answers) whose answers to
``tools/call`` are bodies too large to hold, spelled several ways. Every byte it writes is chosen
here. It binds 127.0.0.1 on a free port and prints ``PORT <n>`` on stdout.

Tools (each answer is a valid JSON-RPC result once read whole, of ``SIZE`` bytes or more):

- ``chunked``: chunked transfer encoding, no length.
- ``sized``: a ``content-length``.
- ``gzip`` / ``deflate``: compressed to a few kilobytes, ``SIZE`` bytes once decoded.
- ``unauthorized``: HTTP 401 with a body of ``SIZE`` bytes.
- ``small``: ``fine``.

And tools whose answer never comes: ``silent`` (not even its head), ``stalled_json`` (a JSON
head and a first chunk, then nothing), ``stalled_sse`` (an event stream with one comment, then
nothing).
"""

from __future__ import annotations

import asyncio
import json
import zlib
from typing import Any

SIZE = 8 * 1024 * 1024
TOOLS = ["chunked", "sized", "gzip", "deflate", "unauthorized", "small"]
STALLED = ["silent", "stalled_json", "stalled_sse"]
OBJECT = {"type": "object", "properties": {}}


def body(request_id: Any, text: str) -> bytes:
    result = {"content": [{"type": "text", "text": text}]}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()


def compressed(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


def head(status: str, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status}", "mcp-session-id: s1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def answer(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    request_id, method = message["id"], message["method"]
    params = message.get("params") or {}
    json_type = {"content-type": "application/json"}
    if method == "tools/call" and params.get("name") in STALLED:
        name = params.get("name")
        if name == "stalled_json":
            writer.write(head("200 OK", {**json_type, "transfer-encoding": "chunked"}))
            writer.write(b'2\r\n{"\r\n')
        elif name == "stalled_sse":
            writer.write(head("200 OK", {"content-type": "text/event-stream"}))
            writer.write(b": working on it\n\n")
        await writer.drain()
        await asyncio.sleep(3600)
    if method == "tools/call" and params.get("name") != "small":
        name = params.get("name")
        big = body(request_id, "x" * SIZE)
        if name == "chunked":
            writer.write(head("200 OK", {**json_type, "transfer-encoding": "chunked"}))
            for start in range(0, len(big), 65536):
                piece = big[start : start + 65536]
                writer.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        elif name in ("sized", "unauthorized"):
            status = "401 Unauthorized" if name == "unauthorized" else "200 OK"
            writer.write(head(status, {**json_type, "content-length": str(len(big))}))
            writer.write(big)
        else:
            packed = compressed(big, 31 if name == "gzip" else 15)
            coding = {"content-encoding": str(name), "content-length": str(len(packed))}
            headers = {**json_type, **coding}
            writer.write(head("200 OK", headers) + packed)
        await writer.drain()
        return
    if method == "initialize":
        result: Any = {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bodies", "version": "0"},
        }
        out = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()
    elif method == "tools/list":
        result = {"tools": [{"name": name, "inputSchema": OBJECT} for name in TOOLS + STALLED]}
        out = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()
    elif method == "tools/call":
        out = body(request_id, "fine")
    else:
        error = {"code": -32601, "message": f"Method not found: {method}"}
        out = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
    writer.write(head("200 OK", {**json_type, "content-length": str(len(out))}) + out)
    await writer.drain()


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


if __name__ == "__main__":
    asyncio.run(main())
