"""What stands in front of the SDK's transport for the older era (2025-11-25, with sessions).

``LegacyRequests`` reads each older-era POST before the SDK does (behind the SDK's body size
limit) and answers two kinds of request itself:

- a request whose ``id`` is not a string or an integer (an object, an array, a boolean, a
  fraction, null): JSON-RPC's invalid request (-32600) with id null and HTTP 400, as the 2026
  era answers it. The SDK would read it as a notification, answer 202 and drop it silently;
- a request reusing the id of one still in flight on the same session: refused (-32600, with
  its id, HTTP 409). The SDK keeps one response stream per id (``1`` and ``"1"`` alike), so the
  second would take over the first's and leave the first without an answer. Once the first has
  answered, a re-send is served as usual (the journal gives it the recorded result).

And it lets an older-era call in flight finish when the server shuts down gracefully: the SDK
answers these POSTs with sse-starlette's ``EventSourceResponse``, which ends every stream the
moment the server begins to shut down: the call's answer would be lost, and the call then
cancelled with its session. A stream answering a call through ``LegacyRequests`` is instead
kept until its answer is out, within the server's own graceful shutdown timeout (uvicorn's
``timeout_graceful_shutdown``), the bound a 2026-era call, answered on its request's own
response, already has. Streams that never end by themselves (a session's GET stream) still end
at once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final

import mcp.server.streamable_http as sdk_transport
from mcp.server.transport_security import RequestBodyLimitMiddleware
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from sse_starlette import EventSourceResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fastgate.serve._http import caller_of, send_json

INVALID_REQUEST: Final = -32600
_HANDSHAKE_ERA: Final = frozenset(v.encode() for v in HANDSHAKE_PROTOCOL_VERSIONS)
_SHOWN_ID: Final = 64  # characters of a refused id quoted back in the message

# Set while the SDK serves an older-era POST that came through ``LegacyRequests``: the stream
# it answers with is one to keep through a graceful shutdown.
_DRAINED: ContextVar[bool] = ContextVar("fastgate_legacy_drained", default=False)


class _AnswerOutlivesShutdown(EventSourceResponse):
    """sse-starlette's response; for a call's answer, kept open through a graceful shutdown
    until it is complete (the server's shutdown timeout bounds the wait)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if _DRAINED.get() and "shutdown_grace_period" not in kwargs:
            kwargs["shutdown_grace_period"] = math.inf
        super().__init__(*args, **kwargs)


def install() -> None:
    """Make the SDK's transport answer with ``_AnswerOutlivesShutdown`` (once per process; a
    response made outside ``LegacyRequests`` behaves exactly as before)."""
    if getattr(sdk_transport, "EventSourceResponse", None) is EventSourceResponse:
        sdk_transport.EventSourceResponse = _AnswerOutlivesShutdown  # type: ignore[attr-defined]


def older_era(scope: Scope) -> bool:
    """Whether the SDK serves this request on its older-era path (no protocol version header,
    or one of the handshake era's)."""
    for name, value in scope["headers"]:
        if name == b"mcp-protocol-version":
            return value in _HANDSHAKE_ERA
    return True


def valid_id(value: object) -> bool:
    """A request id MCP accepts: a string or an integer (never null, a bool or a fraction)."""
    return type(value) is str or type(value) is int


class LegacyRequests:
    """ASGI, in front of the SDK's manager app (``fallback``): see the module's docstring."""

    def __init__(self, fallback: ASGIApp, max_body: int, on_reject: Callable[[int], None]) -> None:
        self.fallback = fallback
        self._on_reject = on_reject
        self._limited = RequestBodyLimitMiddleware(self._checked, max_body)
        # (principal, session, the SDK's stream key) of each request being answered
        self._in_flight: set[tuple[str, str, str]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not older_era(scope):
            await self.fallback(scope, receive, send)
            return
        token = _DRAINED.set(True)
        try:
            await self._limited(scope, receive, send)
        finally:
            _DRAINED.reset(token)

    async def _checked(self, scope: Scope, receive: Receive, send: Send) -> None:
        body, replay = await _read(receive)
        if body is None:  # the client left before its body arrived
            return
        message = _parsed(body)
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            await self.fallback(scope, replay, send)  # the SDK answers all else
            return
        request_id = message["id"]
        if not valid_id(request_id):
            self._on_reject(400)
            await _rpc_error(
                send,
                400,
                None,
                "Invalid Request: a request's id must be a string or an integer",
            )
            return
        key = self._key(scope, request_id)
        if key is None:
            await self.fallback(scope, replay, send)
            return
        if key in self._in_flight:
            self._on_reject(409)
            shown = json.dumps(request_id)[:_SHOWN_ID]
            await _rpc_error(
                send,
                409,
                request_id,
                f"Invalid Request: request {shown} is still in flight on this session; its "
                "answer comes on the first request's response (give a new request a new id)",
            )
            return
        self._in_flight.add(key)
        try:
            await self.fallback(scope, replay, send)
        finally:
            self._in_flight.discard(key)

    @staticmethod
    def _key(scope: Scope, request_id: str | int) -> tuple[str, str, str] | None:
        session = None
        for name, value in scope["headers"]:
            if name == b"mcp-session-id":
                session = value.decode("latin-1")
                break
        if session is None:
            return None
        caller = caller_of(scope)
        principal = caller.principal if caller is not None else ""
        # The SDK keys a request's response stream by str(id): 1 and "1" share one.
        return principal, session, str(request_id)


async def _read(receive: Receive) -> tuple[bytes | None, Receive]:
    """The whole body (already bounded and buffered by the SDK's limit), and a ``receive``
    that gives it again, then what the client sends next (its disconnect)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None, receive
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def _parsed(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # the SDK answers it as a parse error
        return None


async def _rpc_error(send: Send, status: int, request_id: Any, message: str) -> None:
    error = {"code": INVALID_REQUEST, "message": message}
    await send_json(send, status, {"jsonrpc": "2.0", "id": request_id, "error": error})
