"""HTTP bodies of MCP servers held to a size while they are read (SPEC §14 supervision).

The SDK reads a JSON answer of a streamable HTTP server whole (``response.aread()``) before it
parses it, and so does every read of a body of the sign-in (an unauthorized answer, a metadata
document, a redirect of the authorization server): with no bound, one answer of a server can
take all the host's memory. ``BoundedBodies`` sits under the client: every body that is not an
event stream is counted as it arrives, decoded (gzip, deflate, ...) by this transport so that
what is counted is what will be held, and one past ``MAX_BODY_BYTES`` fails the read with
``BodyTooLarge``. Event streams are left alone: the SDK bounds each of their events
(``max_sse_event_size``) and consumes them one by one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

import httpx2
from httpx2._decoders import SUPPORTED_DECODERS, ContentDecoder, IdentityDecoder, MultiDecoder

from fastgate.mcp._stdio import MAX_MESSAGE_BYTES

MAX_BODY_BYTES: Final = MAX_MESSAGE_BYTES  # what one message may take over stdio, too
_DROPPED: Final = ("content-encoding", "content-length")


class BodyTooLarge(httpx2.StreamError):
    """A body past the limit (a ``StreamError``: the SDK turns it into the request's error)."""


class BoundedBodies(httpx2.AsyncBaseTransport):
    """``inner``, its responses' bodies (but event streams) bounded to ``limit`` bytes,
    decoded; with ``post_seconds``, every POST's answer (its head and its whole body, an event
    stream's included) bounded to that many seconds, but a ``subscriptions/listen`` stream's.

    The SDK reads a POST's answer with no read timeout (a call is bounded by its own clocks),
    and abandons it when the call is cancelled without closing it: a server that never
    answers would keep one connection and one task of the client's per call, for good. No
    request of the bridge's outlives its call or its server's start, so ``post_seconds`` past
    the longer of the two, nothing of a POST is needed any more."""

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport,
        limit: int | None = None,
        post_seconds: float | None = None,
    ) -> None:
        self._inner = inner
        self._limit = limit
        self._post_seconds = post_seconds

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        deadline = self._deadline(request)
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._inner.handle_async_request(request)
        except TimeoutError:
            # An answer of the server's own kind (an HTTP error), which the SDK gives to the
            # request it answers (abandoned by now); an exception would end the connection.
            return httpx2.Response(504, request=request)
        media = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        stream = response.stream
        if not isinstance(stream, httpx2.AsyncByteStream):
            return response
        if media == "text/event-stream":
            if deadline is None:
                return response
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                stream=_Counted(stream, IdentityDecoder(), None, request, deadline),
                request=request,
                extensions=response.extensions,
            )
        codings = [
            value.strip().lower()
            for value in response.headers.get_list("content-encoding", split_commas=True)
        ]
        codings = [c for c in codings if c and c != "identity"]
        unknown = [c for c in codings if c not in SUPPORTED_DECODERS]
        if unknown:  # httpx would pass it through undecoded: count it as it is
            codings = []
        decoder: ContentDecoder = MultiDecoder(codings) if codings else IdentityDecoder()
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _DROPPED]
        if unknown:
            headers += [("content-encoding", c) for c in unknown]
        return httpx2.Response(
            response.status_code,
            headers=headers,
            stream=_Counted(stream, decoder, self._bound(), request, deadline),
            request=request,
            extensions=response.extensions,
        )

    def _deadline(self, request: httpx2.Request) -> float | None:
        if self._post_seconds is None or request.method != "POST":
            return None
        if request.headers.get("mcp-method") == "subscriptions/listen":
            return None  # the 2026 protocol's stream of notifications: open for the connection
        return asyncio.get_running_loop().time() + self._post_seconds

    def _bound(self) -> int:
        return MAX_BODY_BYTES if self._limit is None else self._limit

    async def aclose(self) -> None:
        await self._inner.aclose()


class AnswerTooSlow(httpx2.StreamError):
    """A POST's body still coming past its deadline (a ``StreamError``: the SDK gives it to
    the request it answers, and the connection goes on)."""


def _expired(request: httpx2.Request) -> AnswerTooSlow:
    url = str(request.url)[:200]
    return AnswerTooSlow(f"the answer of {url} took longer than a call or a start may take")


class _Counted(httpx2.AsyncByteStream):
    """A body decoded and counted (``limit`` None: not counted), read before ``deadline`` (a
    time of the running loop; None: no deadline)."""

    def __init__(
        self,
        inner: httpx2.AsyncByteStream,
        decoder: ContentDecoder,
        limit: int | None,
        request: httpx2.Request,
        deadline: float | None,
    ) -> None:
        self._inner = inner
        self._decoder = decoder
        self._limit = limit
        self._request = request
        self._deadline = deadline
        self._seen = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._inner.__aiter__()
        try:
            while True:
                try:
                    async with asyncio.timeout_at(self._deadline):
                        chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise _expired(self._request) from None
                for part in self._decoder.decode(chunk):
                    yield self._count(part)
            for part in self._decoder.flush():
                yield self._count(part)
        finally:
            # Stopped early (past the limit): the inner stream is closed now, not by the
            # loop's finalizer later.
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()

    def _count(self, part: bytes) -> bytes:
        self._seen += len(part)
        if self._limit is not None and self._seen > self._limit:
            url = str(self._request.url)[:200]
            raise BodyTooLarge(f"the answer of {url} is over {self._limit} bytes: not read further")
        return part

    async def aclose(self) -> None:
        await self._inner.aclose()
