"""The code-mode worker: one confined process that runs one program, then exits.

Started as ``python -I -S -B -X utf8 _worker.py CONFIG`` (no site-packages, no ``PYTHON*``
variable, an allow-listed environment, its own session, cwd its temporary directory). It
confines itself (``_sandbox.py``, loaded by path), reports ``ready`` on its channel (a socket
inherited as fd ``CONFIG["fd"]``, moved to fd 3), waits for one ``run`` message, runs the
program and sends ``done``. Standard library only: it never imports fastgate.

The channel carries one JSON object per line, each call tagged with an id so that calls made
at once (``asyncio.gather``) are answered in any order::

    worker -> parent  {"t": "ready", "sandbox": {...}}
    parent -> worker  {"t": "run", "code": "...", "tools": [{"name", "attr", "doc"}, ...]}
    worker -> parent  {"t": "call", "id": 1, "name": "read", "args": {...}}
    parent -> worker  {"t": "result", "id": 1, "ok": true, "value": ...}
                      {"t": "result", "id": 1, "ok": false, "code": "...", "message": "..."}
    worker -> parent  {"t": "done", "ok": true} | {"t": "done", "ok": false, "error": {...}}
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any

_CHUNK = 64 * 1024  # bytes asked of one recv (a large request costs an allocation per read)


class ToolCallError(Exception):
    """A tool call from a program did not succeed: ``code`` is the result's ``ErrorCode`` name
    (``"PERMISSION_DENIED"``, ``"INVALID_ARGS"``, ...), ``message`` what the model can act on."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


# Made once: json.dumps with options builds an encoder on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode(message: dict[str, Any]) -> bytes:
    return (_ENCODER.encode(message) + "\n").encode()


class Channel:
    """The worker's end: calls wait on futures of whichever loop runs the program."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pending: dict[int, Any] = {}  # id -> the caller's future
        self.next_id = 0
        self.buffer = b""
        self.loop: Any = None
        self.closed = False

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(encode(message))  # blocking: the parent always reads

    def receive_one(self) -> dict[str, Any] | None:
        """Block for the next message (before the program runs); ``None`` at end of stream."""
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(_CHUNK)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    async def call(self, name: str, args: dict[str, Any]) -> Any:
        import asyncio

        loop = asyncio.get_running_loop()
        if self.closed:
            raise ToolCallError("TOOL_ERROR", "the tool channel is closed; no call can be made")
        if loop is not self.loop:  # the program may run a loop of its own (asyncio.run)
            try:
                self._attach(loop)
            except (OSError, ValueError) as exc:
                self.closed = True
                raise ToolCallError("TOOL_ERROR", f"the tool channel failed: {exc}") from None
        try:
            line = encode({"t": "call", "id": self.next_id + 1, "name": name, "args": args})
        except (TypeError, ValueError) as exc:
            raise ToolCallError(
                "INVALID_ARGS", f"{name}: arguments must be JSON values ({exc})"
            ) from None
        self.next_id += 1
        future = loop.create_future()
        self.pending[self.next_id] = future
        try:
            self.sock.sendall(line)
        except OSError as exc:
            self.pending.pop(self.next_id, None)
            raise ToolCallError("TOOL_ERROR", f"the tool channel failed: {exc}") from None
        reply = await future
        if reply.get("ok"):
            return reply.get("value")
        raise ToolCallError(str(reply.get("code")), str(reply.get("message")))

    def _attach(self, loop: Any) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.remove_reader(self.sock.fileno())
        self.loop = loop
        loop.add_reader(self.sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            chunk = self.sock.recv(_CHUNK, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.closed = True
            self.loop.remove_reader(self.sock.fileno())
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(
                        ToolCallError("TOOL_ERROR", "the tool channel closed before the reply")
                    )
            self.pending.clear()
            return
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            reply = json.loads(line)
            future = self.pending.pop(reply.get("id"), None)
            if future is not None and not future.done():
                future.set_result(reply)


def _tool_function(channel: Channel, name: str, attr: str, doc: str) -> Callable[..., Any]:
    async def call(*args: Any, **kwargs: Any) -> Any:
        if args:
            raise ToolCallError(
                "INVALID_ARGS", f"{name} takes keyword arguments only: tools.{attr}(name=value)"
            )
        return await channel.call(name, kwargs)

    call.__name__ = call.__qualname__ = attr
    call.__doc__ = doc
    return call


class Tools:
    """The ``tools`` namespace: one async function per tool the program may call, keyword
    arguments as in the tool's schema. A name that is not a Python identifier (``-``) is
    reached as ``tools["name"]`` or with ``_`` in place of ``-``."""

    def __init__(self, channel: Channel, specs: list[dict[str, Any]]) -> None:
        self._channel = channel
        self._by_name: dict[str, Callable[..., Any]] = {}
        for spec in specs:
            function = _tool_function(channel, spec["name"], spec["attr"], spec.get("doc", ""))
            self._by_name[spec["name"]] = function
            self.__dict__.setdefault(spec["attr"], function)

    def __getattr__(self, attr: str) -> Callable[..., Any]:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _tool_function(self._channel, attr, attr, "")  # refused by the parent

    def __getitem__(self, name: str) -> Callable[..., Any]:
        found = self._by_name.get(name)
        return found if found is not None else _tool_function(self._channel, name, name, "")

    def __dir__(self) -> list[str]:
        return sorted(k for k in self.__dict__ if not k.startswith("_"))

    def __repr__(self) -> str:
        return f"<tools: {', '.join(self._by_name) or 'none'}>"


CHANNEL_FD = 3
_CO_COROUTINE = 0x80
_TOP_LEVEL_AWAIT = 0x2000  # ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
_TRACEBACK_LINES = 20


def _syntax_error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, SyntaxError):
        return {
            "type": type(exc).__name__,
            "message": exc.msg,
            "line": exc.lineno,
            "column": exc.offset,
            "text": (exc.text or "").rstrip("\n"),
        }
    return {"type": type(exc).__name__, "message": str(exc), "line": None, "column": None}


def _traceback_tail(exc: BaseException) -> str:
    """The last lines of the program's traceback, without the worker's own frames (they say
    nothing about the program)."""
    import traceback

    own = os.path.abspath(__file__)
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if os.path.abspath(frame.filename) != own
    ]
    lines = ["Traceback (most recent call last):"]
    lines += "".join(traceback.format_list(frames)).rstrip("\n").splitlines()
    lines += "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n").splitlines()
    if len(lines) > _TRACEBACK_LINES:
        lines = ["Traceback (most recent call last, the last lines):", *lines[-_TRACEBACK_LINES:]]
    return "\n".join(lines)


def run_program(channel: Channel, message: dict[str, Any], loop: Any) -> dict[str, Any]:
    """Compile and run the program; the ``done`` message to send."""
    import asyncio
    import builtins
    import linecache

    code = message.get("code")
    if not isinstance(code, str):
        return {"t": "done", "ok": False, "error": {"kind": "protocol", "message": "no code"}}
    try:
        compiled = compile(code, "<program>", "exec", flags=_TOP_LEVEL_AWAIT, dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as exc:
        return {"t": "done", "ok": False, "error": {"kind": "syntax", **_syntax_error(exc)}}
    linecache.cache["<program>"] = (len(code), None, code.splitlines(True), "<program>")
    namespace = {
        "__name__": "__main__",
        "__builtins__": builtins,
        "tools": Tools(channel, message.get("tools", [])),
        "ToolCallError": ToolCallError,
        "asyncio": asyncio,
    }
    try:
        if compiled.co_flags & _CO_COROUTINE:
            asyncio.set_event_loop(loop)
            program: Coroutine[Any, Any, Any] = eval(compiled, namespace)
            loop.run_until_complete(program)
        else:  # no top-level await: plain code, which may run a loop of its own
            exec(compiled, namespace)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            return {
                "t": "done",
                "ok": False,
                "error": {"kind": "exit", "type": "SystemExit", "message": str(exc.code)},
            }
    except BaseException as exc:
        error = {
            "kind": "exception",
            "type": type(exc).__name__,
            "message": str(exc)[:2000],
            "traceback": _traceback_tail(exc),
        }
        return {"t": "done", "ok": False, "error": error}
    return {"t": "done", "ok": True}


def _flush_output() -> None:
    """Everything the program printed is in the pipe before ``done`` is sent (the parent stops
    the process when it reads ``done``; what is in the pipe stays readable)."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # the program may have replaced or closed them
            pass


def _report_on_output(done: dict[str, Any]) -> None:
    """No channel to send ``done`` on (the program closed it): say how it ended on its output."""
    error = done.get("error") or {}
    text = error.get("traceback") or f"{error.get('type', '')}: {error.get('message', '')}"
    try:
        os.write(1, ("\n" + str(text) + "\n").encode(errors="replace"))
    except OSError:
        pass


def main(argv: list[str]) -> None:
    config = json.loads(argv[1])
    sandbox = _load_sandbox()
    sys.modules["ssl"] = None  # type: ignore[assignment]  # no network: no TLS, a faster start
    import asyncio

    fd = int(config["fd"])
    if fd != CHANNEL_FD:  # always fd 3 in the worker, whatever number the parent gave it
        os.dup2(fd, CHANNEL_FD)
        os.close(fd)
    channel = Channel(socket.socket(fileno=CHANNEL_FD))
    loop = asyncio.new_event_loop()  # before seccomp: it makes its self-pipe socket
    try:
        report = sandbox.confine(config)
    except Exception as exc:  # a limit that cannot be set: say so, run nothing
        report = {"errors": [f"{type(exc).__name__}: {exc}"]}
    sys.stderr = sys.stdout  # one stream, in the order written
    channel.send({"t": "ready", "sandbox": report})
    message = channel.receive_one()
    if message is None or message.get("t") != "run":
        os._exit(0)  # the pool was closed (or the parent is gone) before a program came
    done = run_program(channel, message, loop)
    _flush_output()
    try:
        channel.send(done)
    except OSError:
        if not done.get("ok"):
            _report_on_output(done)
    os._exit(0)


def _load_sandbox() -> Any:
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox.py")
    spec = importlib.util.spec_from_file_location("_fastgate_sandbox", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    main(sys.argv)
