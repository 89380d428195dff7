"""HTTP bodies of MCP servers held to a size while they are read (SPEC §14 supervision).

The SDK reads a JSON answer of a streamable HTTP server whole (``response.aread()``) before it
parses it, and so does every read of a body of the sign-in (an unauthorized answer, a metadata
document, a redirect of the authorization server): with no bound, one answer of a server can
take all the host's memory. ``BoundedBodies`` sits under the client: every body that is not an
event stream is counted as it arrives, decoded (gzip, deflate, ...) by this transport so that
what is counted is what will be held, and one past ``MAX_BODY_BYTES`` fails the read with
``BodyTooLarge``. Event streams are not counted: the SDK bounds each of their events
(``max_sse_event_size``) and consumes them one by one. With ``utf8_events``, their bytes are
checked instead: the SDK decodes an event stream with U+FFFD for whatever is not UTF-8 and
goes on, where a reply that cannot be read must fail its request (as over stdio and in a JSON
body), so the first byte that is not UTF-8 ends the stream with ``UnreadableEvent``.
"""

from __future__ import annotations

import asyncio
import codecs
from collections.abc import AsyncIterator
from typing import Final

import httpx2
from httpx2._decoders import SUPPORTED_DECODERS, ContentDecoder, IdentityDecoder, MultiDecoder

from fastgate.mcp._stdio import MAX_MESSAGE_BYTES

MAX_BODY_BYTES: Final = MAX_MESSAGE_BYTES  # what one message may take over stdio, too
_DROPPED: Final = ("content-encoding", "content-length")


# How ``UnreadableEvent``'s words begin: the SDK fails the request the stream answers with
# "SSE stream failed: " and them, which is how the bridge tells them from a lost stream.
UNREADABLE_EVENT: Final = "an event that is "


class BodyTooLarge(httpx2.StreamError):
    """A body past the limit (a ``StreamError``: the SDK turns it into the request's error)."""


class UnreadableEvent(httpx2.SSEError):
    """An event stream's bytes that are not UTF-8. An ``SSEError``: the SDK fails the request
    the stream answers at once, and neither reconnects nor resumes it."""

    def __init__(self, reason: str) -> None:
        super().__init__(UNREADABLE_EVENT + reason)
        self.reason = reason


class BoundedBodies(httpx2.AsyncBaseTransport):
    """``inner``, its responses' bodies (but event streams) bounded to ``limit`` bytes,
    decoded; with ``post_seconds``, every POST's answer (its head and its whole body, an event
    stream's included) bounded to that many seconds, but a ``subscriptions/listen`` stream's;
    with ``utf8_events``, every event stream decoded here and checked to be UTF-8 as it comes
    (streamable HTTP: a POST's stream that is not fails its request at once; the server's own
    GET stream ends, and the SDK opens it again as after any break).

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
        utf8_events: bool = False,
    ) -> None:
        self._inner = inner
        self._limit = limit
        self._post_seconds = post_seconds
        self._utf8_events = utf8_events

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
            if deadline is None and not self._utf8_events:
                return response
            return self._event_stream(response, stream, request, deadline)
        decoder, headers = _decoded(response)
        body = _Counted(stream, decoder, self._bound(), request, deadline)
        return _answer(response, headers, body, request)

    def _event_stream(
        self,
        response: httpx2.Response,
        stream: httpx2.AsyncByteStream,
        request: httpx2.Request,
        deadline: float | None,
    ) -> httpx2.Response:
        """An event stream read before ``deadline``; with ``utf8_events``, decoded here (what
        is checked is what the SDK parses) and checked."""
        if not self._utf8_events:
            body = _Counted(stream, IdentityDecoder(), None, request, deadline)
            return _answer(response, response.headers.multi_items(), body, request)
        decoder, headers = _decoded(response)
        checked = _Utf8Checked(_Counted(stream, decoder, None, request, deadline))
        answer = _answer(response, headers, checked, request)
        answer.encoding = "utf-8"  # an event stream is UTF-8, whatever charset it names
        return answer

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


def _answer(
    response: httpx2.Response,
    headers: list[tuple[str, str]],
    body: httpx2.AsyncByteStream,
    request: httpx2.Request,
) -> httpx2.Response:
    """``response`` with ``headers`` and ``body`` instead of its own."""
    return httpx2.Response(
        response.status_code,
        headers=headers,
        stream=body,
        request=request,
        extensions=response.extensions,
    )


def _decoded(response: httpx2.Response) -> tuple[ContentDecoder, list[tuple[str, str]]]:
    """The decoder of ``response``'s content codings, and its headers once decoded (without
    the codings and the length). A coding httpx does not know is left as it is, named."""
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
    return decoder, headers


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


class _Utf8Checked(httpx2.AsyncByteStream):
    """A body passed on as it comes while it is valid UTF-8: at the first byte that is not,
    what came before it is passed on and ``UnreadableEvent`` raised. A character cut between
    two chunks is whole once the second comes; one never finished fails at the end."""

    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner
        self._utf8 = codecs.getincrementaldecoder("utf-8")("strict")
        self._passed = 0  # bytes passed on

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._inner.__aiter__()
        try:
            async for chunk in chunks:
                valid, unreadable = self._check(chunk, final=False)
                if valid:
                    yield valid
                if unreadable is not None:
                    raise unreadable
            _, unreadable = self._check(b"", final=True)
            if unreadable is not None:
                raise unreadable
        finally:
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()

    def _check(self, chunk: bytes, final: bool) -> tuple[bytes, UnreadableEvent | None]:
        """What of ``chunk`` is valid, and the error for what follows it (None: all is)."""
        held = len(self._utf8.getstate()[0])  # a character begun in the chunk before
        try:
            self._utf8.decode(chunk, final)
        except UnicodeDecodeError as exc:
            # ``exc`` counts from the held bytes, which were passed on with their chunk.
            valid = max(exc.start - held, 0)
            bad = exc.object[exc.start : exc.end][:8].hex(" ")
            offset = self._passed - held + exc.start
            return chunk[:valid], UnreadableEvent(
                f"not valid UTF-8 ({exc.reason}: byte(s) {bad} at offset {offset} of the "
                "event stream)"
            )
        self._passed += len(chunk)
        return chunk, None

    async def aclose(self) -> None:
        await self._inner.aclose()
