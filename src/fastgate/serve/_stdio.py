"""The stdio transport of ``Gateway.run_stdio``: the MCP SDK's ``stdio_server``, each line of
stdin looked at here before the SDK reads it.

The SDK answers nothing to a line it cannot read as a JSON-RPC message: not JSON, JSON that is
no object (a number, a batch), a request it cannot validate. Worse, it reads a request whose
``id`` is not a string or an integer (an object, an array, a bool, a fraction, null) as a
notification: the client waits for ever, or the message acts as one. Here those lines get
JSON-RPC's answers on stdout (-32700 for a line that is not JSON, -32600 otherwise, with the
request's id when it has a valid one, else null), as over HTTP, and the session goes on. A
notification and a response are never answered, valid or not; a blank line is skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator
from io import TextIOWrapper
from typing import IO, Any, Final, cast

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from fastgate.serve._legacy import valid_id

log = logging.getLogger("fastgate.serve")

_NOT_JSON: Final = object()
_BAD_ID: Final = "Invalid Request: a request's id must be a string or an integer"


def refusal(line: str) -> types.JSONRPCError | None:
    """JSON-RPC's answer to ``line``, or ``None`` to hand it to the SDK (a message it reads as
    sent, or a notification or response it drops: those are never answered)."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        message = None
    # The SDK reads a request with an invalid id as a notification: look at the raw id then.
    if message is not None and not isinstance(message, types.JSONRPCNotification):
        return None
    raw = _loads(line)
    if raw is _NOT_JSON:
        return _error(None, types.PARSE_ERROR, "Parse error: the line is not valid JSON")
    if not isinstance(raw, dict):
        return _error(
            None,
            types.INVALID_REQUEST,
            f"Invalid Request: a message is one JSON object, got {_kind(raw)}",
        )
    if "method" not in raw and ("result" in raw or "error" in raw):
        return None  # a response: JSON-RPC never answers one
    if "id" not in raw:
        if "method" in raw:
            return None  # a notification, however malformed
        return _error(None, types.INVALID_REQUEST, "Invalid Request: a message needs a method")
    if not valid_id(raw["id"]):
        return _error(None, types.INVALID_REQUEST, _BAD_ID)
    return _error(
        raw["id"],
        types.INVALID_REQUEST,
        'Invalid Request: a request is {"jsonrpc": "2.0", "id", "method": a string, "params": '
        "an object (optional)}",
    )


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a batch (an array), which MCP does not take"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return "a string" if isinstance(value, str) else "a number"


def _loads(line: str) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _error(request_id: str | int | None, code: int, message: str) -> types.JSONRPCError:
    # Every field set explicitly: the SDK writes a message without its unset fields.
    error = types.ErrorData(code=code, message=message)
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


class _Lines:
    """stdin line by line, as the SDK's reader takes it (``async for line in stdin``), less the
    lines answered here; the answers go out through the SDK's write stream once it is given
    (``answer_with``), so they never tear another message on stdout."""

    def __init__(self, source: AsyncIterator[str]) -> None:
        self._source = source
        self._write: Any = None
        self._ready = anyio.Event()

    def answer_with(self, write: Any) -> None:
        self._write = write
        self._ready.set()

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await anext(self._source)
            if not line.strip():
                continue  # no message at all
            answer = refusal(line)
            if answer is None:
                return line
            log.debug("stdio: answered a line with JSON-RPC error %d", answer.error.code)
            await self._ready.wait()
            try:
                await self._write.send(SessionMessage(answer))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                raise StopAsyncIteration from None  # the session is over


class _Unowned(TextIOWrapper):
    """A text layer whose close leaves the buffer open (it may be ``sys.stdin``'s own)."""

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.detach()


@contextlib.contextmanager
def _claimed_stdin() -> Iterator[IO[bytes]]:
    """The client's stdin for this transport alone: while it serves, fd 0 reads the null device
    (a tool, hook or server started meanwhile reads EOF, never the client's messages), as the
    SDK does when it reads stdin itself; fd 0 is restored after. Where descriptors cannot be
    moved, stdin is read in place."""
    try:
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        yield sys.stdin.buffer
        return
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
    except OSError:
        os.close(private)
        yield sys.stdin.buffer
        return
    try:
        # Never closed: a worker thread may still be blocked reading it after the transport.
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        with contextlib.suppress(OSError):
            os.dup2(private, 0)


@contextlib.asynccontextmanager
async def checked_stdio_server() -> AsyncIterator[tuple[Any, Any]]:
    """``stdio_server()``'s read and write streams, with the lines it would drop or misread
    answered here."""
    with _claimed_stdin() as buffer:
        text = anyio.wrap_file(_Unowned(buffer, encoding="utf-8", errors="replace"))
        lines = _Lines(aiter(text))
        async with stdio_server(stdin=cast("anyio.AsyncFile[str]", lines)) as (read, write):
            lines.answer_with(write)
            yield read, write
