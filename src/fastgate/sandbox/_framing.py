"""One plain-HTTP request per connection, framed: its body is sent on by its ``Content-Length``
or its chunked encoding, and nothing after it. Bytes a client sends after its request (a second,
pipelined request naming another ``Host``) would otherwise reach the allowed upstream unjudged.
A request whose body cannot be framed (``Transfer-Encoding`` other than ``chunked``, both
headers, an unreadable or repeated length) is refused before anything is sent."""

from __future__ import annotations

import asyncio
import socket
from typing import Final

from fastgate.sandbox._http import CHUNKED
from fastgate.sandbox._relay import pump

_READ_SIZE: Final = 1 << 16
_MAX_LINE: Final = 4096  # a chunk-size line or a trailer line
_HEX: Final = frozenset(b"0123456789abcdefABCDEF")


class FramingError(Exception):
    """The body does not follow its framing: the request is cut off, not sent on."""


class _Reader:
    """Buffered reads from the client, starting with what came after its request head."""

    def __init__(self, sock: socket.socket, initial: bytes) -> None:
        self._sock = sock
        self._buffer = bytearray(initial)

    async def some(self, limit: int) -> bytes:
        if not self._buffer:
            loop = asyncio.get_running_loop()
            chunk = await loop.sock_recv(self._sock, _READ_SIZE)
            if not chunk:
                raise FramingError("the client ended the body early")
            self._buffer += chunk
        taken = bytes(self._buffer[:limit])
        del self._buffer[:limit]
        return taken

    async def line(self) -> bytes:
        """One CRLF-ended line, CRLF included."""
        loop = asyncio.get_running_loop()
        while (end := self._buffer.find(b"\r\n")) < 0:
            if len(self._buffer) > _MAX_LINE:
                raise FramingError("a chunk line is too long")
            chunk = await loop.sock_recv(self._sock, _READ_SIZE)
            if not chunk:
                raise FramingError("the client ended the body early")
            self._buffer += chunk
        if end > _MAX_LINE:
            raise FramingError("a chunk line is too long")
        taken = bytes(self._buffer[: end + 2])
        del self._buffer[: end + 2]
        return taken


async def send_body(
    client: socket.socket, upstream: socket.socket, length: int, rest: bytes
) -> None:
    """Send upstream exactly the body of the request (``length`` bytes, or ``CHUNKED``),
    beginning with ``rest``; what follows it is never read. ``FramingError`` when the client
    breaks the framing or ends early."""
    reader = _Reader(client, rest)
    if length == CHUNKED:
        await _send_chunked(reader, upstream)
    else:
        await _send_exactly(reader, upstream, length)


async def _send_exactly(reader: _Reader, upstream: socket.socket, length: int) -> None:
    loop = asyncio.get_running_loop()
    while length > 0:
        data = await reader.some(min(length, _READ_SIZE))
        await loop.sock_sendall(upstream, data)
        length -= len(data)


async def _send_chunked(reader: _Reader, upstream: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    while True:
        line = await reader.line()
        size = _chunk_size(line)
        await loop.sock_sendall(upstream, line)
        if size == 0:
            break
        await _send_exactly(reader, upstream, size)
        if await reader.line() != b"\r\n":
            raise FramingError("a chunk is longer than its size")
        await loop.sock_sendall(upstream, b"\r\n")
    while True:  # trailers, up to the blank line
        line = await reader.line()
        if line != b"\r\n" and any(b < 0x20 and b != 0x09 for b in line[:-2]):
            raise FramingError("a control character in a trailer")
        await loop.sock_sendall(upstream, line)
        if line == b"\r\n":
            return


def _chunk_size(line: bytes) -> int:
    digits = line[:-2].partition(b";")[0].rstrip(b" \t")
    if not digits or len(digits) > 15 or not all(b in _HEX for b in digits):
        raise FramingError("a chunk size is not a hexadecimal number")
    if any(b < 0x20 and b != 0x09 for b in line[:-2]):
        raise FramingError("a control character in a chunk line")
    return int(digits, 16)


async def exchange(
    client: socket.socket,
    upstream: socket.socket,
    length: int,
    rest: bytes,
    *,
    use_splice: bool | None = None,
) -> None:
    """The request's body up, the answer down, until the answer ends; a body that breaks its
    framing ends the exchange at once (the upstream never sees a byte past it). The answer is
    copied as a tunnel's bytes are (``splice`` where the kernel has it): a download is most of
    what goes through."""
    body = asyncio.ensure_future(send_body(client, upstream, length, rest))
    response = asyncio.ensure_future(pump(upstream, client, use_splice=use_splice))
    try:
        done, _ = await asyncio.wait((body, response), return_when=asyncio.FIRST_COMPLETED)
        if response in done:
            response.result()
        elif body.exception() is None:
            await response
    except FramingError:
        return
    finally:
        for task in (body, response):
            task.cancel()
        await asyncio.gather(body, response, return_exceptions=True)
