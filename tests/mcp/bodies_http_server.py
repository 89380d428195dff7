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
import sys
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[2]))  # run as a script: the repository's root

from tests.mcp.raw_http import JSON_TYPE, OBJECT, head, json_answer, plain_reply, serve

SIZE = 8 * 1024 * 1024
TOOLS = ["chunked", "sized", "gzip", "deflate", "unauthorized", "small"]
STALLED = ["silent", "stalled_json", "stalled_sse"]


def body(request_id: Any, text: str) -> bytes:
    result = {"content": [{"type": "text", "text": text}]}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()


def compressed(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


async def answer(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    request_id, method = message["id"], message["method"]
    params = message.get("params") or {}
    if method == "tools/call" and params.get("name") in STALLED:
        name = params.get("name")
        if name == "stalled_json":
            writer.write(head("200 OK", {**JSON_TYPE, "transfer-encoding": "chunked"}))
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
            writer.write(head("200 OK", {**JSON_TYPE, "transfer-encoding": "chunked"}))
            for start in range(0, len(big), 65536):
                piece = big[start : start + 65536]
                writer.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        elif name in ("sized", "unauthorized"):
            status = "401 Unauthorized" if name == "unauthorized" else "200 OK"
            writer.write(head(status, {**JSON_TYPE, "content-length": str(len(big))}))
            writer.write(big)
        else:
            packed = compressed(big, 31 if name == "gzip" else 15)
            coding = {"content-encoding": str(name), "content-length": str(len(packed))}
            headers = {**JSON_TYPE, **coding}
            writer.write(head("200 OK", headers) + packed)
        await writer.drain()
        return
    if method == "tools/call":
        writer.write(json_answer(body(request_id, "fine")))
    else:
        tools = [{"name": name, "inputSchema": OBJECT} for name in TOOLS + STALLED]
        writer.write(plain_reply(message, "bodies", tools))
    await writer.drain()


if __name__ == "__main__":
    serve(answer)
