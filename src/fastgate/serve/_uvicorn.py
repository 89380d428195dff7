"""uvicorn's HTTP protocols with a deadline on each request's head.

An ASGI app sees a request only once its head is complete, so the gateway's own deadline
(``BodyDeadline``) cannot cover a client that trickles its request line and headers; the
server's protocol has to. ``fastgate serve`` runs uvicorn with these, and so can anyone who runs
``gateway.asgi()`` under uvicorn: ``uvicorn.Config(app, http=http_protocol("httptools", 30.0))``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


def http_protocol(
    implementation: str, timeout: float, on_reject: Callable[[int], None] | None = None
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (``httptools`` or ``h11``) with a deadline on each request's
    head: it must be complete ``timeout`` seconds after the connection opened or, on a kept-alive
    connection, after its first byte came (uvicorn's keep-alive timeout covers the wait before
    it). A client still sending its head then gets 408 and the connection is closed (one that
    sent nothing is closed); the body's deadline is the gateway's (``BodyDeadline``).
    Without it a client trickling header bytes holds a connection for as long as it likes."""
    if not timeout > 0:
        raise ValueError(f"read timeout: expected seconds > 0, got {timeout!r}")
    if implementation == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        class HttpToolsWithHeadDeadline(HttpToolsProtocol):
            _head = _HeadDeadline(timeout, on_reject)
            _head_lingering = False

            def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
                super().connection_made(transport)
                self._head.begin(self, seen=False)

            def data_received(self, data: bytes) -> None:
                if not self._head_lingering:  # (after a 408: read and dropped)
                    super().data_received(data)

            def on_message_begin(self) -> None:
                self._head.begin(self, seen=True)
                super().on_message_begin()

            def on_headers_complete(self) -> None:
                self._head.end(self)
                super().on_headers_complete()

            def connection_lost(self, exc: Exception | None) -> None:
                self._head.end(self)
                super().connection_lost(exc)

        return HttpToolsWithHeadDeadline
    if implementation == "h11":
        import h11
        from uvicorn.protocols.http.h11_impl import H11Protocol

        class H11WithHeadDeadline(H11Protocol):
            _head = _HeadDeadline(timeout, on_reject)
            _head_lingering = False

            def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
                super().connection_made(transport)
                self._head.begin(self, seen=False)

            def data_received(self, data: bytes) -> None:
                if self._head_lingering:  # (after a 408: read and dropped)
                    return
                if self.conn.their_state is h11.IDLE:  # waiting for a request's head
                    self._head.begin(self, seen=bool(data))
                super().data_received(data)
                if self.conn.their_state is not h11.IDLE:
                    self._head.end(self)

            def connection_lost(self, exc: Exception | None) -> None:
                self._head.end(self)
                super().connection_lost(exc)

        return H11WithHeadDeadline
    raise ValueError(f"expected httptools or h11, got {implementation!r}")


_LINGER = 2.0  # seconds at most that a rejected client's bytes are drained before the close


class _HeadDeadline:
    """The head timers of one protocol class's connections (kept on each connection)."""

    def __init__(self, timeout: float, on_reject: Callable[[int], None] | None) -> None:
        self.timeout = timeout
        self._on_reject = on_reject
        body = (
            '{"error":"request_timeout","error_description":"the request head did not arrive '
            f'within {timeout:g} s"}}'
        ).encode()
        self._answer = (
            b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n"
        ) + body

    def begin(self, protocol: Any, *, seen: bool) -> None:
        """A head is awaited (from now, unless its timer already runs)."""
        if seen:
            protocol._head_seen = True
        if getattr(protocol, "_head_timer", None) is None:
            protocol._head_seen = seen
            protocol._head_timer = protocol.loop.call_later(self.timeout, self._expired, protocol)

    def end(self, protocol: Any) -> None:
        timer = getattr(protocol, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            protocol._head_timer = None

    def _expired(self, protocol: Any) -> None:
        protocol._head_timer = None
        transport = protocol.transport
        if transport is None or transport.is_closing():
            return
        cycle = protocol.cycle
        if cycle is not None and not cycle.response_complete:
            # A response is still going out (the late head was pipelined behind it): let it
            # end, then close instead of reading the next request.
            cycle.keep_alive = False
            return
        if not protocol._head_seen:
            transport.close()
            return
        if self._on_reject is not None:
            self._on_reject(408)
        transport.write(self._answer)
        # A lingering close: the answer, then our end of the stream, while what the client
        # still sends is read and dropped for a moment. Closed at once with its bytes unread,
        # the socket would answer them with a reset, which can destroy the 408 before the
        # client reads it.
        protocol._head_lingering = True
        if transport.can_write_eof():
            transport.write_eof()
        protocol.loop.call_later(min(self.timeout, _LINGER), transport.close)
