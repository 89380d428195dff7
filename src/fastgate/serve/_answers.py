"""How a 2026-era ``tools/call`` is answered: one JSON body, or a stream once the call runs long.

For a 2026-era request that accepts both JSON and SSE, the SDK runs the handler in a task group
beside a task watching for the client's disconnect, waits on a memory stream for the handler's
first notification, and answers JSON if the call ends silent within its keepalive window, SSE
(with pings) otherwise. For ``tools/call``, ``QuickAnswers`` keeps those semantics at a fraction
of the cost, which most calls (short ones) never need:

- the call runs in the request's own task, on the SDK's JSON path (its checks, its errors);
- a timer turns the answer into an SSE stream when the window passes, and a progress report
  does so at once; the stream is pinged every window while the call runs;
- a call still running a moment after its body arrived starts watching for the client's
  disconnect, which cancels it (in this era a client cancels by closing the stream).

Every other request goes to the SDK's manager unchanged.
"""

from __future__ import annotations

import asyncio
import json
from contextvars import ContextVar
from typing import Any, Final

from mcp.server._streamable_http_modern import handle_modern_request
from mcp.server.streamable_http import check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import RequestBodyLimitMiddleware
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

KEEPALIVE: float = 15.0
"""Seconds a call may run silent before its answer becomes a stream; then the ping interval."""
WATCH_AFTER: float = 0.05
"""Seconds after its body arrived that a call still running starts watching for a disconnect."""

_HANDSHAKE_ERA: Final = frozenset(v.encode() for v in HANDSHAKE_PROTOCOL_VERSIONS)
_SSE_HEAD: Final[Message] = {
    "type": "http.response.start",
    "status": 200,
    "headers": [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache, no-transform"),
        (b"connection", b"keep-alive"),
        (b"x-accel-buffering", b"no"),
    ],
}
_PING: Final = b": ping\r\n\r\n"

_current: ContextVar[_Answer | None] = ContextVar("fastgate_serve_answer", default=None)


def current_answer() -> _Answer | None:
    """The answer of the ``tools/call`` this task serves on the quick path, if it is one."""
    return _current.get()


def _event(message: bytes) -> bytes:
    return b"event: message\r\ndata: " + message + b"\r\n\r\n"


class _Answer:
    """One call's response: JSON until the window passes or progress is reported, then SSE."""

    __slots__ = (
        "_head_sent",
        "_lock",
        "_loop",
        "_pinger",
        "_receive",
        "_send",
        "_timers",
        "_watcher",
        "client_left",
        "done",
        "streaming",
        "task",
    )

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # an ASGI app runs in a task
        self.task = task
        self._head_sent = False  # the response's head went out (JSON's or the stream's)
        self._lock: asyncio.Lock | None = None  # made with the stream: frames never interleave
        self._pinger: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._timers = [self._loop.call_later(KEEPALIVE, self._window_passed)]
        self.streaming = False
        self.done = False  # the last byte of the answer was handed to the server
        self.client_left = False

    # -- what the SDK and the gateway call ------------------------------------------------------

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request" and not message.get("more_body", False):
            self._timers.append(self._loop.call_later(WATCH_AFTER, self._watch))
        return message

    async def send(self, message: Message) -> None:
        """The SDK's JSON answer: sent as it is, or as the stream's last event."""
        if not self.streaming:
            if message["type"] == "http.response.start":
                self._head_sent = True
            elif not message.get("more_body", False):
                self.done = True
            await self._send(message)
            return
        if message["type"] == "http.response.body":
            await self._write(_event(message.get("body", b"")), last=not message.get("more_body"))

    async def progress(
        self, token: Any, progress: float, total: float | None, message: str | None
    ) -> None:
        """A ``notifications/progress`` event on this call's stream (opening it)."""
        params: dict[str, Any] = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        body = {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
        if self._open():
            self._ping_every_window(first=KEEPALIVE)
        await self._write(_event(json.dumps(body, separators=(",", ":")).encode()))

    def finish(self) -> None:
        """Stop the timers and the helper tasks (the call is over, one way or another)."""
        self.done = True
        for timer in self._timers:
            timer.cancel()
        for task in (self._pinger, self._watcher):
            if task is not None:
                task.cancel()
        # Each timer and helper task holds a copy of the context, which holds this answer: let
        # go of them, so the call's objects are freed when it ends, not by a garbage collection.
        self._timers.clear()
        self._pinger = self._watcher = None

    # -- the stream -----------------------------------------------------------------------------

    def _open(self) -> bool:
        """Turn the answer into a stream, if its JSON head has not gone out; whether it did."""
        if self.streaming or self._head_sent or self.done:
            return False
        self.streaming = True
        self._lock = asyncio.Lock()
        return True

    def _window_passed(self) -> None:
        if self._open():
            self._ping_every_window(first=0.0)

    def _ping_every_window(self, first: float) -> None:
        self._pinger = self._loop.create_task(self._keep_alive(first))

    async def _keep_alive(self, first: float) -> None:
        await asyncio.sleep(first)
        while not self.done:
            await self._write(_PING)
            await asyncio.sleep(KEEPALIVE)

    async def _write(self, frame: bytes, last: bool = False) -> None:
        if not self.streaming:  # a JSON answer: a progress report has nowhere to go
            return
        assert self._lock is not None
        async with self._lock:
            if self.done:
                return
            if not self._head_sent:
                self._head_sent = True
                await self._send(_SSE_HEAD)
            if last:
                self.done = True
            await self._send({"type": "http.response.body", "body": frame, "more_body": not last})

    # -- the client's disconnect ----------------------------------------------------------------

    def _watch(self) -> None:
        if not self.done and self._watcher is None:
            self._watcher = self._loop.create_task(self._wait_for_disconnect())

    async def _wait_for_disconnect(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        if not self.done:  # a server also reports a disconnect once the answer is complete
            self.client_left = True
            self.task.cancel()


class QuickAnswers:
    """ASGI: 2026-era ``tools/call`` POSTs accepting JSON and SSE take the quick path (behind the
    SDK's body size limit); the rest go to ``fallback`` (the SDK's manager app)."""

    def __init__(self, manager: StreamableHTTPSessionManager, fallback: ASGIApp) -> None:
        self.manager = manager
        self.fallback = fallback
        self._limited = RequestBodyLimitMiddleware(self._answer, manager.max_request_body_size)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A manager not running (no task group) is the fallback's to refuse.
        if getattr(self.manager, "_task_group", None) is None or not _quick(scope):
            await self.fallback(scope, receive, send)
        else:
            await self._limited(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self.manager
        answer = _Answer(receive, send)
        token = _current.set(answer)
        try:
            await handle_modern_request(
                manager.app,
                manager.security_settings,
                True,  # the SDK answers JSON; the answer makes it a stream when it must
                getattr(manager, "_lifespan_state", None),
                scope,
                answer.receive,
                answer.send,
            )
        except asyncio.CancelledError:
            # The client went away: the call is cancelled and nobody waits for an answer.
            if not answer.client_left or answer.task.uncancel() > 0:
                raise
        finally:
            answer.finish()
            _current.reset(token)


def _quick(scope: Scope) -> bool:
    if scope["type"] != "http" or scope["method"] != "POST":
        return False
    version = method = None
    for name, value in scope["headers"]:
        if name == b"mcp-protocol-version":
            version = value
        elif name == b"mcp-method":
            method = value
    if version is None or version in _HANDSHAKE_ERA or method != b"tools/call":
        return False
    has_json, has_sse = check_accept_headers(Request(scope))
    return has_json and has_sse
