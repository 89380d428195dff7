"""The code-mode worker: one confined process that runs one program, then exits.

Started as ``python -I -S -B -X utf8 _worker.py CONFIG`` (no site-packages, no ``PYTHON*``
variable, an allow-listed environment, its own session, cwd its temporary directory). It
confines itself (``_sandbox.py``, loaded by path), reports ``ready`` on its channel (a socket
inherited as fd ``CONFIG["fd"]``, its stdin, moved to fd 3), waits for one ``run`` message, runs the
program and sends ``done``. Standard library only: it never imports fastgate.

The channel carries one JSON object per line, each call tagged with an id so that calls made
at once (``asyncio.gather``) are answered in any order::

    worker -> parent  {"t": "ready", "sandbox": {...}}  (carrying, SCM_RIGHTS, the listener of
                      its filter's thread notifications, which the server answers)
    parent -> worker  {"t": "run", "code": "...", "tools": [{"name", "attr", "doc"}, ...],
                       "max_output_chars": 30000}
    worker -> parent  {"t": "call", "id": 1, "name": "read", "args": {...}}
    parent -> worker  {"t": "result", "id": 1, "ok": true, "value": ...}
                      {"t": "result", "id": 1, "ok": false, "code": "...", "message": "..."}
    worker -> parent  {"t": "unread", "id": 1}  (a reply this interpreter could not decode: the
                      call raised OUTPUT_INVALID here, and the run's line for it says so)
    worker -> parent  {"t": "done", "ok": true} | {"t": "done", "ok": false, "error": {...}}
                      (with "dropped": n, "kept": m when n characters of its output were
                      never sent, and the last m were sent at its end)

A call made while nothing else of the program can run (the usual ``await tools.x()`` one after
another) waits for its reply inside the calling task rather than on the event loop, which
would cost two loop iterations and a future per call; anything else the program waits for
ends that wait (``Channel._wait_here``). Calls made at once are queued and leave together, 64
to a write and the rest at the end of the loop's turn (``Channel.flush``); the parent likewise
answers the calls of one read together, up to 8 KiB to a write.
"""

from __future__ import annotations

import _thread
import collections
import io
import json
import os
import select
import socket
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

_CHUNK = 64 * 1024  # bytes asked of one recv (a large request costs an allocation per read)
# Calls made at once that leave together before the turn of the loop ends: the parent starts on
# them while the program makes the rest.
_SEND_BATCH = 64
# How long a call's wait for its reply polls the channel before it sleeps. On a virtual machine,
# waking a process whose CPU has gone idle costs tens of microseconds (the hypervisor must run
# that CPU again): a reply that comes within the poll, a quick tool's, is read on a CPU that
# never slept. The time polled counts against the program's CPU limit.
_POLL_SECONDS = 200e-6
_clock = time.perf_counter
_yield = os.sched_yield
_YIELDED = 5e-6
_UNPOLLED = 64


def _readable(fd: int) -> bool:
    return bool(select.select((fd,), (), (), 0)[0])


class ToolCallError(Exception):
    """A tool call from a program did not succeed: ``code`` is the result's ``ErrorCode`` name
    (``"PERMISSION_DENIED"``, ``"INVALID_ARGS"``, ...), ``message`` what the model can act on."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class _Encoder:
    """Compact JSON (no NaN): the C encoder of ``json`` made once and reused, where
    ``json.dumps`` builds one on every call (a third of a call's own cost in this process).
    A failed encoding may leave it mid-container: it is then made afresh."""

    def __init__(self) -> None:
        self._make = getattr(json.encoder, "c_make_encoder", None)
        self._encode: Any = None
        self._fresh()

    def _fresh(self) -> None:
        if self._make is None:  # an interpreter without the C accelerator
            self._encode = json.JSONEncoder(
                separators=(",", ":"), ensure_ascii=False, allow_nan=False
            ).iterencode
            return
        self._encode = self._make(
            {}, _not_json, json.encoder.encode_basestring, None, ":", ",", False, False, False
        )

    def __call__(self, message: Any) -> str:
        try:
            return "".join(self._encode(message, 0) if self._make else self._encode(message))
        except BaseException:
            self._fresh()
            raise


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_ENCODE = _Encoder()
# The C scanner json.loads ends in, without its checks of the input's type and encoding.
_SCAN: Callable[[str, int], tuple[Any, int]]
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def encode(message: dict[str, Any]) -> bytes:
    return (_ENCODE(message) + "\n").encode()


def decode(line: bytes) -> Any:
    """One message of the parent's (compact JSON, one line); ``json.loads`` for anything the
    scanner alone does not take whole, so an error says what ``json`` says."""
    text = line.decode()
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        end = -1
    return value if end == len(text) else json.loads(text)


_REPLY_ID = b'{"t":"result","id":'


def decode_reply(line: bytes) -> Any:
    """A reply of the parent's; one this interpreter cannot decode (a value nested deeper than
    its recursion limit allows here) is the failure of its call, whose id leads the line (the
    parent writes ``t`` then ``id``), rather than an exception in the loop that would leave
    the call waiting for good."""
    try:
        return decode(line)
    except (ValueError, RecursionError, MemoryError) as exc:
        call_id = None
        if line.startswith(_REPLY_ID):
            digits = line[len(_REPLY_ID) : line.find(b",", len(_REPLY_ID))]
            call_id = int(digits) if digits.isdigit() else None
        message = f"the program could not read the tool's value ({type(exc).__name__}: {exc})"
        return {"id": call_id, "ok": False, "code": "OUTPUT_INVALID", "message": message}


class Channel:
    """The worker's end: calls wait on futures of whichever loop runs the program."""

    def __init__(self, sock: socket.socket, max_message: int = 4 * 1024 * 1024) -> None:
        import asyncio  # here, not at the top: the worker imports it once the ssl module is gone

        self.running_loop = asyncio.get_running_loop
        self.sock = sock
        self.max_message = max_message  # the server stops a program sending a longer line
        self.pending: dict[int, Any] = {}  # id -> the caller's future
        self.next_id = 0
        self.buffer = b""
        self.loop: Any = None
        self.closed = False
        self.outbox: list[tuple[int, bytes]] = []  # calls not yet sent: (id, line)
        # The loop's selector as ``wait(timeout) -> [ready fd, ...]``; None: not a stdlib loop.
        self.wait: Callable[[float | None], list[int]] | None = None
        self.unpolled = 0  # replies still to be waited for asleep, without a poll first

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
        message: dict[str, Any] = decode(line)
        return message

    async def call(self, name: str, args: dict[str, Any]) -> Any:
        loop: Any = self.running_loop()  # the stdlib's, whose ready queue _wait_here reads
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
        except (TypeError, ValueError, RecursionError) as exc:
            raise ToolCallError(
                "INVALID_ARGS", f"{name}: arguments must be JSON values ({exc})"
            ) from None
        if len(line) > self.max_message:
            raise ToolCallError(
                "INVALID_ARGS",
                f"{name}: arguments of {len(line):,} bytes; a call carries at most "
                f"{self.max_message // (1024 * 1024)} MiB",
            )
        self.next_id += 1
        call_id = self.next_id
        # The only call in flight, and nothing else of the program ready to run: the reply is
        # waited for here, inside the calling task (see _wait_here).
        alone = not self.pending and not loop._ready and not loop.get_debug()
        reply = None
        if alone:
            try:
                self.sock.sendall(line)
            except OSError as exc:
                raise ToolCallError("TOOL_ERROR", f"the tool channel failed: {exc}") from None
            if self.wait is not None:
                reply = self._wait_here(loop, call_id)
        if reply is None:  # calls at once, or something else of the program became due
            future = loop.create_future()
            self.pending[call_id] = future
            if not alone:  # sent with the others made in this turn of the loop (see flush)
                outbox = self.outbox
                if not outbox:
                    loop.call_soon(self.flush)
                outbox.append((call_id, line))
                if len(outbox) >= _SEND_BATCH:
                    self.flush()
            reply = await future
        if reply.get("ok"):
            return reply.get("value")
        raise ToolCallError(str(reply.get("code")), str(reply.get("message")))

    def flush(self) -> None:
        """Send the calls queued in this turn of the loop, in one write (``asyncio.gather`` of
        many calls: one system call, and one wake-up of the parent, for all of them)."""
        if not self.outbox:
            return
        queued, self.outbox = self.outbox, []
        try:
            self.sock.sendall(b"".join(line for _, line in queued))
        except OSError as exc:
            for call_id, _ in queued:
                future = self.pending.pop(call_id, None)
                if future is not None and not future.done():
                    future.set_exception(
                        ToolCallError("TOOL_ERROR", f"the tool channel failed: {exc}")
                    )

    def _wait_here(self, loop: Any, call_id: int) -> dict[str, Any] | None:
        """The reply to the only call in flight, waited for without a trip through the event
        loop (two of its iterations and a future: most of a call's cost in this process).

        It waits on the loop's own selector, so that whatever else the program waits for ends
        the wait: another file descriptor of the loop, its self-pipe (a signal, another
        thread's call_soon_threadsafe), or the loop's next timer. It then returns ``None`` and
        the caller waits for the reply on the loop as usual; epoll is level-triggered, so what
        this wait saw and did not read, the loop sees again. Before it sleeps there, it polls
        the channel alone for at most _POLL_SECONDS (``_poll``; a timer due sooner ends the
        poll), so the rest of the loop waits that long at most."""
        assert self.wait is not None
        fd = self.sock.fileno()
        polled = False
        while True:
            reply = self._take_reply(call_id)
            if reply is not None:
                return reply
            scheduled = loop._scheduled
            timeout = None
            if scheduled:
                timeout = scheduled[0].when() - loop.time()
                if timeout <= 0:
                    return None
            if polled:
                if self.wait(timeout) != [fd]:
                    return None  # a timer is due, or another file descriptor is ready
            elif self.unpolled:  # this CPU was lately shared with the parent: see _poll
                self.unpolled -= 1
                polled = True
                continue
            else:  # once per reply, first: see _POLL_SECONDS
                polled = True
                if not self._poll(_POLL_SECONDS if timeout is None else timeout):
                    continue
            try:
                chunk = self.sock.recv(_CHUNK, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self._closed_by_parent()
                raise ToolCallError("TOOL_ERROR", "the tool channel closed before the reply")
            self.buffer += chunk

    def _poll(self, limit: float) -> bool:
        """Whether the channel became readable within ``limit`` seconds (at most
        _POLL_SECONDS), asked without sleeping: each time it is not, this process yields its
        CPU, so that a parent woken on this same CPU runs at once."""
        deadline = _clock() + min(limit, _POLL_SECONDS)
        fd = self.sock.fileno()
        while not _readable(fd):
            now = _clock()
            if now >= deadline:
                return False
            _yield()
            if _clock() - now > _YIELDED:
                # Another process ran on this CPU; if the reply came meanwhile, the parent
                # did, and polling would only take the CPU from it: the next replies are
                # waited for asleep.
                if _readable(fd):
                    self.unpolled = _UNPOLLED
                    return True
                return False
        return True

    def _reply(self, line: bytes) -> Any:
        """One reply of the parent's (``decode_reply``); one that could not be decoded is told
        to the parent, so that the run reports the error the call raised here, not the value
        the parent sent."""
        reply = decode_reply(line)
        if reply.get("t") != "result" and type(reply.get("id")) is int:
            # Written without the encoder: the stack may be at its limit right here.
            notice = b'{"t":"unread","id":%d}\n' % reply["id"]
            try:
                self.sock.sendall(notice)
            except OSError:
                pass
        return reply

    def _take_reply(self, call_id: int) -> dict[str, Any] | None:
        """The reply to ``call_id`` if a whole one is buffered (others go to their futures)."""
        found = None
        while b"\n" in self.buffer:
            line, _, self.buffer = self.buffer.partition(b"\n")
            reply = self._reply(line)
            if reply.get("id") == call_id:
                found = reply
                continue
            future = self.pending.pop(reply.get("id"), None)
            if future is not None and not future.done():
                future.set_result(reply)
        return found

    def _attach(self, loop: Any) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.remove_reader(self.sock.fileno())
        self.loop = loop
        loop.add_reader(self.sock.fileno(), self._readable)
        self.wait = _waiter(loop)

    def _readable(self) -> None:
        try:
            chunk = self.sock.recv(_CHUNK, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._closed_by_parent()
            return
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            reply = self._reply(line)
            future = self.pending.pop(reply.get("id"), None)
            if future is not None and not future.done():
                future.set_result(reply)

    def _closed_by_parent(self) -> None:
        self.closed = True
        self.loop.remove_reader(self.sock.fileno())
        for future in self.pending.values():
            if not future.done():
                future.set_exception(
                    ToolCallError("TOOL_ERROR", "the tool channel closed before the reply")
                )
        self.pending.clear()


def _waiter(loop: Any) -> Callable[[float | None], list[int]] | None:
    """``wait(timeout)``: the file descriptors of the loop's selector that are ready, for the
    stdlib's selector loop (whose ready queue, timers and selector a call reads); ``None``
    for any other loop. The epoll object is polled directly where there is one (the
    selector's ``select`` builds a key and an event mask for each)."""
    selector = getattr(loop, "_selector", None)
    if not (hasattr(loop, "_ready") and hasattr(loop, "_scheduled") and selector is not None):
        return None
    epoll = getattr(selector, "_selector", None)
    if isinstance(epoll, select.epoll):
        # Two events at most: all a wait needs to know is whether anything but the channel
        # is ready.
        return lambda timeout: [fd for fd, _ in epoll.poll(timeout, 2)]
    return lambda timeout: [key.fd for key, _ in selector.select(timeout)]


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


# The defaults of what the server's run message says: bytes of the program's prints sent as
# they come, and at most how many characters of the rest (the last) are kept and sent at its end.
FORWARD_BYTES = 8 * 1024 * 1024
MAX_TAIL_CHARS = 1024 * 1024


class BoundedOutput(io.TextIOBase):
    """The program's ``sys.stdout`` and ``sys.stderr``: writes go to ``stream`` until
    ``forward_bytes`` have; after that only the last ``tail_chars`` characters are kept
    (``finish`` sends them), and the characters between are counted in ``dropped``. A flood
    of prints then costs the server nothing, and the program is not stopped for it."""

    def __init__(self, stream: Any) -> None:
        super().__init__()
        self._stream = stream
        self._lock = _thread.allocate_lock()  # the program's threads print too
        self._sent = 0  # bytes
        self._tail: collections.deque[str] = collections.deque()
        self._tail_size = 0
        self.forward_bytes = FORWARD_BYTES
        self.tail_chars = 30_000
        self.dropped = 0

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:
            room = self.forward_bytes - self._sent
            if room > 0:
                size = len(text) if text.isascii() else len(text.encode("utf-8", "replace"))
                if size <= room:
                    self._stream.write(text)
                    self._sent += size
                    return len(text)
                # The part that surely fits (4 bytes a character at most); then no more is sent.
                head = text[: room if text.isascii() else room // 4]
                self._stream.write(head)
                self._sent = self.forward_bytes
                self._keep(text[len(head) :])
            else:
                self._keep(text)
        return len(text)

    def _keep(self, text: str) -> None:
        limit = self.tail_chars
        if len(text) >= limit:  # the text alone fills the tail
            self.dropped += self._tail_size + len(text) - limit
            self._tail.clear()
            text = text[len(text) - limit :] if limit else ""
            self._tail_size = 0
        if text:
            self._tail.append(text)
            self._tail_size += len(text)
        while self._tail_size > limit:
            first = self._tail[0]
            over = self._tail_size - limit
            if len(first) <= over:
                self._tail.popleft()
                self._tail_size -= len(first)
                self.dropped += len(first)
            else:
                self._tail[0] = first[over:]
                self._tail_size -= over
                self.dropped += over

    def finish(self) -> tuple[int, int]:
        """Send the tail kept: how many characters were never sent, and how many the tail has."""
        with self._lock:
            tail, self._tail = "".join(self._tail), collections.deque()
            self._tail_size = 0
            self._sent = self.forward_bytes  # what is printed after this is kept, not sent
        try:
            self._stream.write(tail)
            self._stream.flush()
        except Exception:  # the program may have closed fd 1
            pass
        return self.dropped, len(tail)

    def flush(self) -> None:
        self._stream.flush()

    def fileno(self) -> int:
        return int(self._stream.fileno())

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(self._stream.encoding)

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._stream.errors  # type: ignore[no-any-return]

    @property
    def buffer(self) -> Any:
        """The byte stream below (bytes written there reach the server as they are)."""
        return self._stream.buffer


def _bounded(message: dict[str, Any], key: str, default: int, most: int) -> int:
    value = message.get(key)
    return min(value, most) if type(value) is int and value >= 0 else default


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
        if fd == 0:  # it came as stdin: a program reads an empty stdin, as before the move
            os.open(os.devnull, os.O_RDONLY)  # the lowest free descriptor: 0
    channel = Channel(socket.socket(fileno=CHANNEL_FD), int(config["max_message"]))
    loop = asyncio.new_event_loop()  # before seccomp: it makes its self-pipe socket
    try:
        report = sandbox.confine(config)
    except Exception as exc:  # a limit that cannot be set: say so, run nothing
        report = {"errors": [f"{type(exc).__name__}: {exc}"]}
    output = BoundedOutput(sys.stdout)
    sys.stdout = sys.stderr = output  # one stream, in the order written
    listener = report.pop("listener", None)
    if listener is None:
        channel.send({"t": "ready", "sandbox": report})
    else:  # the server counts the program's threads: the listener is its, never the program's
        try:
            socket.send_fds(channel.sock, [encode({"t": "ready", "sandbox": report})], [listener])
        finally:
            os.close(listener)
    message = channel.receive_one()
    if message is None or message.get("t") != "run":
        os._exit(0)  # the pool was closed (or the parent is gone) before a program came
    output.forward_bytes = _bounded(message, "forward_bytes", FORWARD_BYTES, FORWARD_BYTES)
    output.tail_chars = _bounded(message, "max_output_chars", 30_000, MAX_TAIL_CHARS)
    done = run_program(channel, message, loop)
    channel.flush()  # calls the program made but did not wait for still go
    _flush_output()
    dropped, kept = output.finish()
    if dropped:
        done["dropped"], done["kept"] = dropped, kept
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
