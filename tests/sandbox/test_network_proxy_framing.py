"""The proxy's plain-HTTP path sends on exactly one request per client connection: its head and
its body (by ``Content-Length``, or chunked), never what follows (a pipelined request naming
another ``Host`` would reach the allowed upstream unjudged). A body it cannot frame is refused
before anything reaches the upstream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from fastgate.sandbox import NetworkPolicy
from tests.sandbox.proxy_kit import FakeResolver, running, send_request

ALLOWED = "allowed.test"
SMUGGLED = b"GET /second HTTP/1.1\r\nHost: forbidden.example\r\n\r\n"


@dataclass
class Recording:
    """A loopback upstream that keeps every byte of each connection (until the client is
    quiet for a moment), then answers 200 and closes."""

    received: list[bytes] = field(default_factory=list)
    port: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = b""
        try:
            while chunk := await asyncio.wait_for(reader.read(65536), 0.3):
                data += chunk
        except (TimeoutError, ConnectionError):
            pass
        self.received.append(data)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        try:
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()


@asynccontextmanager
async def recording() -> AsyncIterator[Recording]:
    upstream = Recording()
    server = await asyncio.start_server(upstream.serve, "127.0.0.1", 0)
    upstream.port = int(server.sockets[0].getsockname()[1])
    try:
        yield upstream
    finally:
        server.close()
        await server.wait_closed()


def policy() -> NetworkPolicy:
    return NetworkPolicy(allow=(ALLOWED,), allow_private=True)


def first_request(port: int, headers: str, body: bytes) -> bytes:
    return f"POST http://{ALLOWED}:{port}/first HTTP/1.1\r\n{headers}\r\n".encode() + body


CHUNKED_BODY = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n"
FRAMED = {
    "no body": ("", b""),
    "content-length": ("Content-Length: 11\r\n", b"hello world"),
    "chunked": ("Transfer-Encoding: chunked\r\n", CHUNKED_BODY),
    "chunked, any case": ("transfer-encoding: Chunked\r\n", CHUNKED_BODY),
}


@pytest.mark.parametrize("framing", list(FRAMED))
async def test_a_pipelined_request_never_reaches_the_upstream(framing: str) -> None:
    headers, body = FRAMED[framing]
    async with (
        recording() as upstream,
        running(policy(), FakeResolver({ALLOWED: ["127.0.0.1"]})) as proxy,
    ):
        request = first_request(upstream.port, headers, body)
        status, _, answer = await send_request(proxy, request + SMUGGLED)
        await proxy.wait_idle()
    assert (status, answer) == (200, b"ok")
    (received,) = upstream.received
    assert b"forbidden.example" not in received and b"/second" not in received
    assert received.endswith(b"\r\n\r\n" + body)


UNFRAMABLE = {
    "another coding": "Transfer-Encoding: gzip, chunked\r\n",
    "chunked not last": "Transfer-Encoding: chunked, gzip\r\n",
    "identity": "Transfer-Encoding: identity\r\n",
    "both": "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
    "two lengths": "Content-Length: 5\r\nContent-Length: 5\r\n",
    "a signed length": "Content-Length: +5\r\n",
    "a list of lengths": "Content-Length: 5, 5\r\n",
}


@pytest.mark.parametrize("framing", list(UNFRAMABLE))
async def test_a_body_that_cannot_be_framed_is_refused(framing: str) -> None:
    async with (
        recording() as upstream,
        running(policy(), FakeResolver({ALLOWED: ["127.0.0.1"]})) as proxy,
    ):
        request = first_request(upstream.port, UNFRAMABLE[framing], b"hello")
        status, headers, _ = await send_request(proxy, request + SMUGGLED)
        await proxy.wait_idle()
    assert status == 400 and headers["x-fastgate-refusal"] == "bad_request"
    assert upstream.received == []
    assert [e.reason for e in proxy.events] == ["bad_request"]


@pytest.mark.parametrize(
    "chunks",
    [b"3\r\nhello\r\n0\r\n\r\n", b"zz\r\nhello\r\n0\r\n\r\n", b"5\nhello\r\n0\r\n\r\n"],
    ids=["longer than its size", "no size", "a bare LF"],
)
async def test_a_chunked_body_that_breaks_its_framing_is_cut_off(chunks: bytes) -> None:
    async with (
        recording() as upstream,
        running(policy(), FakeResolver({ALLOWED: ["127.0.0.1"]})) as proxy,
    ):
        request = first_request(upstream.port, "Transfer-Encoding: chunked\r\n", chunks)
        await send_request(proxy, request + SMUGGLED)
        await proxy.wait_idle()
    for received in upstream.received:
        assert b"lo\r\n0" not in received and b"forbidden.example" not in received
