"""A hand-written streamable HTTP MCP server (the handshake era) whose answers to ``tools/call``
are not valid UTF-8, spelled several ways. Every byte it writes is chosen here. It binds
127.0.0.1 on a free port and prints ``PORT <n>`` on stdout.

Tools: ``json`` answers with an ``application/json`` body, ``sse`` with an event stream, each
spelled as its ``how`` argument says (the keys of ``SPELLINGS``, and for ``sse`` those of
``EVENT_SPELLINGS``, ``SPLIT`` and ``OTHER_HEADS`` too); ``fine`` answers ``fine``. With
``UNREADABLE_AT`` set to ``initialize`` or ``tools/list`` in its environment, it answers that
request with an event stream whose reply is not UTF-8.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import os
import sys
from collections.abc import Callable
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
    "overlong-3": ("text", b"a slash \xe0\x80\xaf"),
    "surrogate": ("text", b"half a pair \xed\xa0\x80"),
    "surrogate-low": ("text", b"the other half \xed\xbf\xbf"),
    "latin-1": ("text", "café".encode("latin-1")),
    "invalid-bytes": ("text", b"\xff\xfe\xf8\xf5"),
    "between": ("between", b"\x80"),
    "error": ("error", b"quota exceeded \xff\xfe"),
}
# Valid text split inside a character across the pieces (HTTP chunks) of an event stream:
# the text, the character, and where in the character's bytes each cut falls.
SPLIT: dict[str, tuple[str, str, tuple[int, ...]]] = {
    "split-emoji": ("coffee \u2615 and \U0001f600", "\U0001f600", (2,)),
    "split-cjk": ("\u6f22\u5b57", "\u5b57", (1,)),
    "split-bytewise": ("a face \U0001f600 here", "\U0001f600", (1, 2, 3)),
}


def message(request_id: Any, text: bytes) -> bytes:
    """The reply to a call, ``text`` (as it is, not encoded) its text content."""
    rid = json.dumps(request_id).encode()
    result = b'"result": {"content": [{"type": "text", "text": "' + text + b'"}]}'
    return b'{"jsonrpc": "2.0", "id": ' + rid + b", " + result + b"}"


def mangled(request_id: Any, how: str) -> bytes:
    where, bad = SPELLINGS[how]
    if where == "text":
        return message(request_id, bad)
    if where == "between":
        return message(request_id, b"fine").replace(b', "result"', b"," + bad + b' "result"')
    rid = json.dumps(request_id).encode()
    error = b'"error": {"code": -32000, "message": "' + bad + b'"}'
    return b'{"jsonrpc": "2.0", "id": ' + rid + b", " + error + b"}"


def event(data: bytes) -> bytes:
    return b"event: message\ndata: " + data + b"\n\n"


NOTE = b'{"jsonrpc": "2.0", "method": "notifications/message", "params": '
# Event streams whose reply is fine but something else is not UTF-8: the pieces (HTTP chunks)
# of each, made from the fine reply.
EVENT_SPELLINGS: dict[str, Callable[[bytes], list[bytes]]] = {
    "comment": lambda fine: [b": still working \xff\n", event(fine)],
    "event-name": lambda fine: [b"event: not\xfee\ndata: {}\n\n", event(fine)],
    "event-id": lambda fine: [b"id: 7\xfe\n" + event(fine)],
    "notification": lambda fine: [
        event(NOTE + b'{"level": "info", "data": "caf\xe9"}}'),
        event(fine),
    ],
    "truncated-end": lambda fine: [b"event: message\ndata: " + fine + b"\xe2\x82\n\n"],
    "truncated-split": lambda fine: [b"event: message\ndata: " + fine + b"\xf0\x9f", b"\n\n"],
    "cut-at-close": lambda fine: [b": the last words \xe2\x82"],
}


# Valid event streams sent another way: what their head says besides.
OTHER_HEADS: dict[str, dict[str, str]] = {
    "gzip": {"content-encoding": "gzip"},
    "charset": {"content-type": "text/event-stream; charset=latin-1"},  # (streams are UTF-8)
}


def sse_pieces(request_id: Any, how: str) -> list[bytes]:
    if how in OTHER_HEADS:
        stream = event(message(request_id, "caf\u00e9".encode()))
        return [gzip.compress(stream) if how == "gzip" else stream]
    if how in SPELLINGS:
        return [event(mangled(request_id, how))]
    if how in SPLIT:
        text, char, cuts = SPLIT[how]
        stream = event(message(request_id, text.encode()))
        at = stream.index(char.encode())
        bounds = [0, *(at + cut for cut in cuts), len(stream)]
        return [stream[a:b] for a, b in itertools.pairwise(bounds)]
    return EVENT_SPELLINGS[how](message(request_id, b"fine"))


async def write_sse(
    writer: asyncio.StreamWriter, pieces: list[bytes], headers: dict[str, str] | None = None
) -> None:
    """An event stream in ``pieces``, one HTTP chunk each: the client reads each apart."""
    stream = {"content-type": "text/event-stream", "transfer-encoding": "chunked"}
    writer.write(head("200 OK", {**stream, **(headers or {})}))
    for piece in pieces:
        writer.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
        await writer.drain()
    writer.write(b"0\r\n\r\n")


def unreadable_start(message_in: dict[str, Any]) -> bytes:
    """The reply to ``initialize`` or ``tools/list``, a name in it not UTF-8."""
    plain = plain_reply(message_in, "unreadable", [{"name": "fine", "inputSchema": OBJECT}])
    body = plain.partition(b"\r\n\r\n")[2]
    return body.replace(b'"unreadable"', b'"unread\xffable"').replace(b'"fine"', b'"fi\xffne"')


async def answer(writer: asyncio.StreamWriter, message_in: dict[str, Any]) -> None:
    request_id, params = message_in["id"], message_in.get("params") or {}
    name = params.get("name")
    method = message_in["method"]
    if method == os.environ.get("UNREADABLE_AT"):
        await write_sse(writer, [event(unreadable_start(message_in))])
    elif method == "tools/call" and name in ("json", "sse"):
        how = str((params.get("arguments") or {}).get("how"))
        if name == "sse":
            await write_sse(writer, sse_pieces(request_id, how), OTHER_HEADS.get(how))
        else:
            writer.write(json_answer(mangled(request_id, how)))
    elif method == "tools/call":
        writer.write(json_answer(message(request_id, b"fine")))
    else:
        tools = [{"name": n, "inputSchema": OBJECT} for n in ("json", "sse", "fine")]
        writer.write(plain_reply(message_in, "unreadable", tools))
    await writer.drain()


if __name__ == "__main__":
    serve(answer)
