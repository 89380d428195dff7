"""One ``run_code`` call: a worker bound to the loop, its program's tool calls sent through the
executor's pipeline, its output collected, its end turned into a value or a failure.

The run ends when the worker and everything it started are gone and its output is drained. A
``done`` message (the program finished) or a broken rule of the channel makes the parent kill
the worker (and whatever it started) at once; so does the run's own cancellation (timeout or
caller), after the calls in flight have been cancelled.
"""

from __future__ import annotations

import array
import asyncio
import codecs
import collections
import dataclasses
import errno
import fcntl
import os
import re
import select
import signal
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from fastgate._core import start_body
from fastgate.codemode._pool import MAX_MESSAGE_BYTES, MAX_SCRATCH_BYTES, Worker
from fastgate.codemode._sandbox import MAX_THREADS
from fastgate.model import CancelToken, ErrorCode, ExecutionContext, Failure, ToolResult
from fastgate.tools import NAME_PATTERN

if TYPE_CHECKING:
    from fastgate.pipeline import ToolExecutor

# A line of the channel longer than MAX_MESSAGE_BYTES (4 MiB, from _pool: the worker knows it
# too) is not a tool call but a flood; it is refused before it is decoded.
# The arguments of a program's calls in flight the server holds at most; past it, the channel is
# not read until some settle.
MAX_IN_FLIGHT_BYTES = 64 * 1024 * 1024
# Output past this is not read on: the program is stopped (what was kept is reported).
MAX_OUTPUT_BYTES = 16 * 1024 * 1024
# Bytes of the program's prints the worker sends as they come; past them it keeps only the last
# max_output_chars (1 Mi at most, 4 MiB), sent when the program ends. Together they stay below
# MAX_OUTPUT_BYTES: a program that prints a flood ends with its output cut, head and tail, and
# its calls; only bytes written past ``sys.stdout`` (to fd 1 itself, by a child process) can
# reach the stop.
FORWARD_BYTES = 8 * 1024 * 1024
# What a done message may say the worker dropped of the output (more is not believed).
_MAX_DROPPED = 1 << 53
# Calls refused for the budget that a program may still make before it is stopped.
MAX_CALLS_PAST_BUDGET = 100
# New threads refused for the bound that a program may still ask for before it is stopped
# (each request is a round trip through the server's loop).
MAX_THREADS_REFUSED = 1000
# Seconds the calls in flight get to settle when the run is cancelled.
CANCEL_SETTLE = 5.0
# Characters of a name no tool can have that a refusal, and the run's line for the call, show.
_NAME_SHOWN = 60

# Bytes asked of one recv: a large request (1 MiB) makes each read allocate, and shrink, that
# much, which doubled a call's round trip.
_CHUNK = 64 * 1024
# Bytes of replies held back to leave in one write: enough that a flood of calls costs few
# writes, few enough that the program reads the first replies while the rest are worked on.
_REPLY_BATCH = 8 * 1024
# The seccomp user notifications of a new thread (linux/seccomp.h): struct seccomp_notif (80
# bytes: id, pid, flags, seccomp_data) and struct seccomp_notif_resp (24: id, val, error,
# flags), read and answered by ioctl.
_NOTIF_RECV = 0xC0502100
_NOTIF_SEND = 0xC0182101
_NOTIF_SIZE = 80
_NOTIF_CONTINUE = 1
# Room for the descriptors a message may carry (the ready message carries one).
_FDS_SPACE = socket.CMSG_SPACE(4 * array.array("i").itemsize)
_encode = msgspec.json.Encoder().encode
_UNSENDABLE = (TypeError, ValueError, OverflowError, RecursionError)
_decode = msgspec.json.Decoder().decode
# The runs of backticks in the program's text (its fence is longer than all of them), and an
# exit status shown as it is (any other is quoted).
_BACKTICKS = re.compile("`+")
_STATUS = re.compile(r"-?[0-9]{1,200}")


class WorkerExited(RuntimeError):
    """The worker ended before it reported ``ready`` (killed from outside, or it could not
    start)."""


class ProtocolViolation(Exception):
    """The program broke the channel's rules (garbage, a flood, a reused id)."""


class Output:
    """The program's output as text, its head and tail kept within ``max_chars``."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._head: list[str] = []
        self._head_chars = 0
        self._tail: collections.deque[str] = collections.deque()
        self._tail_chars = 0
        self.chars = 0
        self.bytes = 0
        self.dropped = 0  # characters the worker never sent (the middle of a flood)
        self.kept = 0  # characters it sent at the end, after that middle

    def feed(self, data: bytes, final: bool = False) -> None:
        self.bytes += len(data)
        text = self._decoder.decode(data, final)
        self.chars += len(text)
        room = self.max_chars - self._head_chars
        if room > 0:
            self._head.append(text[:room])
            self._head_chars += min(room, len(text))
            text = text[room:]
        if text:
            self._tail.append(text)
            self._tail_chars += len(text)
            while self._tail_chars - len(self._tail[0]) >= self.max_chars:
                self._tail_chars -= len(self._tail.popleft())

    def text(self) -> str:
        """What was printed, or its head and tail with a marker saying how much was cut."""
        self.feed(b"", final=True)
        head, tail = "".join(self._head), "".join(self._tail)
        total = self.chars + self.dropped
        if total <= self.max_chars:
            return head + tail
        marker = "\n[... {} characters cut ...]\n"
        if self._head_chars + self._tail_chars == self.chars:  # nothing dropped here yet
            if self.dropped:  # all that came fits: the worker's cut is before its last `kept`
                whole = head + tail
                split = max(0, len(whole) - self.kept)
                return whole[:split] + marker.format(self.dropped) + whole[split:]
            head = tail = head + tail
        keep = max(0, self.max_chars - len(marker.format(total)))
        keep_head = keep * 2 // 3
        keep_tail = keep - keep_head
        omitted = total - keep_head - keep_tail
        return head[:keep_head] + marker.format(omitted) + (tail[-keep_tail:] if keep_tail else "")


class Run:
    """The parent's side of one program."""

    def __init__(
        self,
        worker: Worker,
        executor: ToolExecutor,
        ctx: ExecutionContext,
        execution_id: str,
        max_tool_calls: int,
        max_output_chars: int,
    ) -> None:
        self.worker = worker
        self.executor = executor
        # The program's calls run under the run's context, with a token of the run's own: to
        # cancel them is to fire it, so each ends with its own result (ABORTED...), recorded.
        self._cancel = CancelToken.any(ctx.cancel)  # follows the caller's token, if any
        self.ctx = dataclasses.replace(ctx, cancel=self._cancel)
        self.execution_id = execution_id
        self.max_tool_calls = max_tool_calls
        self.output = Output(max_output_chars)
        self.calls: list[dict[str, Any]] = []  # in the order the program made them
        self.attempts = 0
        self.threads_refused = 0
        self.violation: str | None = None
        self.done: dict[str, Any] | None = None
        self.returncode: int | None = None
        self.channel_closed = False  # its end of the channel closed (by it, or at its exit)
        self._ids: set[int] = set()  # ids of calls not yet answered
        # Calls answered with a value, by id: what an ``unread`` notice may turn into an error.
        self._delivered: dict[int, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._inbox = bytearray()
        self._lines: collections.deque[bytearray] = collections.deque()  # read, not yet handled
        self._in_flight_bytes = 0  # the size of the calls in flight, as sent
        self._paused = False  # not reading the channel until calls in flight settle
        self._processing = False  # handling the lines read: replies wait for its end
        self._stopped = False
        self._outbox = bytearray()
        self._loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._exited: asyncio.Future[None] = self._loop.create_future()
        self._drained: asyncio.Future[None] = self._loop.create_future()
        self._readers: list[int] = []
        self._writing = False
        self._end_watch: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        worker = self.worker
        worker.channel.setblocking(False)
        self._watch(worker.channel.fileno(), self._on_channel)
        self._watch(worker.output, self._on_output)
        self._watch_the_end()

    def _watch_the_end(self) -> None:
        """Watch for the end of the worker and of everything it started: its launcher's exit,
        seen on this loop (else told by the launcher's loop)."""
        if self._exited.done() or self._end_watch is not None:
            return
        end_fd = self.worker.end_fd
        if end_fd is None:
            self._end_watch = self._loop.create_task(self._watch_end())
        elif end_fd not in self._readers:
            self._watch(end_fd, self._on_end)

    def _on_end(self) -> None:
        assert self.worker.end_fd is not None
        self._unwatch(self.worker.end_fd)
        if self.done is not None or self.worker.process.returncode is not None:
            self._on_exit()
        else:  # its status, needed to say how it ended, is still on its way
            self._end_watch = self._loop.create_task(self._watch_end())

    async def _watch_end(self) -> None:
        await self.worker.ended()
        self._on_exit()

    async def ready(self) -> dict[str, Any]:
        """The worker's report of its confinement, once it has confined itself."""
        await asyncio.wait((self._ready, self._exited), return_when=asyncio.FIRST_COMPLETED)
        if not self._ready.done():
            raise WorkerExited(
                f"the code-mode worker exited while starting (status {self.returncode}): "
                f"{self.output.text()[-2000:]}"
            )
        return self._ready.result()

    def send_program(self, code: str, specs: list[dict[str, Any]]) -> None:
        self._send(
            {
                "t": "run",
                "code": code,
                "tools": specs,
                "max_output_chars": self.output.max_chars,
                "forward_bytes": FORWARD_BYTES,
            }
        )

    async def finish(self) -> None:
        """Wait for the program to end, then for the calls it left in flight."""
        # Shielded: cancelling the run must not cancel these, which say what really happened.
        await asyncio.shield(self._exited)
        await asyncio.shield(self._drained)
        self._drain_channel()  # a done message written just before the exit
        while self._tasks:
            await asyncio.wait(tuple(self._tasks))

    async def cancel_calls(self) -> None:
        """Cancel the calls in flight (through their token: each ends with its own result) and
        give them a bounded time to settle; those still running then are cancelled outright."""
        self._cancel.cancel("run_code was cancelled")
        tasks = tuple(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_SETTLE)
        for task in tasks:
            task.cancel()

    def detach(self) -> None:
        """Stop following the caller's token (a session's may live long)."""
        self._cancel.detach()

    def stop(self) -> None:
        """Kill the program (its launcher then ends what it started) and stop listening to it
        (synchronous)."""
        self._stopped = True
        self.worker.kill()
        for fd in self._readers:
            self._loop.remove_reader(fd)
        if self._writing:
            self._loop.remove_writer(self.worker.channel.fileno())
            self._writing = False
        self._readers.clear()

    async def reaped(self) -> None:
        """Wait until the killed worker, and all it started, are reaped, its launcher too."""
        self._watch_the_end()  # again: stop() let go of every descriptor
        await asyncio.shield(self._exited)
        if not self.worker.process.done():
            # The launcher's exit is seen here first; its parent, the supervisor's loop, reaps
            # it a moment later: until then it would be left as a zombie of this process.
            await self.worker.ended()

    def release_when_reaped(self) -> None:
        """Close the worker's ends once it is reaped (at once, or when its exit is seen)."""
        if self._exited.done():
            self.worker.release()
        else:  # interrupted while waiting: released when its processes are gone
            for fd in tuple(self._readers):
                self._unwatch(fd)
            self.worker.release_when_ended()

    def _watch(self, fd: int, callback: Callable[[], None]) -> None:
        self._loop.add_reader(fd, callback)
        self._readers.append(fd)

    def _unwatch(self, fd: int) -> None:
        if fd in self._readers:
            self._loop.remove_reader(fd)
            self._readers.remove(fd)

    # -- events -------------------------------------------------------------------------------

    def _on_exit(self) -> None:
        if self._exited.done():
            return
        self.returncode = self.worker.process.returncode
        self._exited.set_result(None)

    def _on_output(self) -> None:
        try:
            data = _read(self.worker.output)
        except BlockingIOError:
            return
        if not data:
            self._unwatch(self.worker.output)
            if not self._drained.done():
                self._drained.set_result(None)
            return
        self.output.feed(data)
        if self.output.bytes > MAX_OUTPUT_BYTES:
            self._violate(f"it printed more than {MAX_OUTPUT_BYTES // (1024 * 1024)} MiB")

    def _receive(self) -> bytes:
        """The next bytes of the channel; until the worker is ready, with the descriptor its
        ready message carries (the listener of its thread notifications: kept, any other
        closed). Afterwards a plain ``recv``: a descriptor the program sends is dropped by the
        kernel, never received."""
        sock = self.worker.channel
        if self._ready.done():
            return sock.recv(_CHUNK)
        data, ancillary, _, _ = sock.recvmsg(_CHUNK, _FDS_SPACE, socket.MSG_CMSG_CLOEXEC)
        for level, kind, payload in ancillary:
            if level != socket.SOL_SOCKET or kind != socket.SCM_RIGHTS:
                continue
            fds = array.array("i")
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            for fd in fds:
                if self.worker.listener is None:
                    self.worker.listener = fd
                else:
                    os.close(fd)
        return data

    def _on_thread_request(self) -> None:
        """A thread of the program asks to start: it may while it has fewer than MAX_THREADS
        (EAGAIN otherwise, which ``threading`` raises as ``RuntimeError``)."""
        listener = self.worker.listener
        assert listener is not None
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        events = poller.poll(0)
        mask = events[0][1] if events else 0
        if not mask & select.POLLIN:  # no request: an ioctl would block
            if mask & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                self._unwatch(listener)  # the program is gone
            return
        request = bytearray(_NOTIF_SIZE)
        try:
            fcntl.ioctl(listener, _NOTIF_RECV, request, True)
        except OSError:  # withdrawn: the thread was interrupted or killed
            return
        (request_id,) = struct.unpack_from("=Q", request)
        allowed = _threads(self.worker.pid) < MAX_THREADS
        if not allowed:
            self.threads_refused += 1
            if self.threads_refused > MAX_THREADS_REFUSED:
                self._violate(f"it went on starting threads past its bound of {MAX_THREADS}")
        if allowed:
            answer = struct.pack("=QqiI", request_id, 0, 0, _NOTIF_CONTINUE)
            try:
                fcntl.ioctl(listener, _NOTIF_SEND, answer)
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # EINVAL: a kernel without CONTINUE; refused
                    return
        try:
            fcntl.ioctl(
                listener, _NOTIF_SEND, struct.pack("=QqiI", request_id, 0, -errno.EAGAIN, 0)
            )
        except OSError:
            pass

    def _on_channel(self) -> None:
        try:
            data = self._receive()
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._unwatch(self.worker.channel.fileno())
            self.channel_closed = True
            return
        self._take(data)

    def _drain_channel(self) -> None:
        while True:
            try:
                data = self._receive()
            except OSError:  # nothing more (BlockingIOError) or already closed
                return
            if not data:
                return
            self._take(data)

    def _take(self, data: bytes) -> None:
        # Every line's size is checked before any is decoded: decoding costs tens of times a
        # line's bytes, so no line past the limit, complete or not, is ever decoded.
        self._inbox += data
        complete = b"\n" in data
        if complete:
            lines = self._inbox.split(b"\n")
            self._inbox = lines.pop()
            if any(len(line) > MAX_MESSAGE_BYTES for line in lines):
                self._too_large()
                return
            self._lines.extend(lines)
        if len(self._inbox) > MAX_MESSAGE_BYTES:
            self._too_large()
            return
        if complete:
            self._process()

    def _too_large(self) -> None:
        self._inbox = bytearray()
        self._lines.clear()
        limit = MAX_MESSAGE_BYTES // (1024 * 1024)
        self._violate(f"it sent a message larger than {limit} MiB on the tool channel")

    def _process(self) -> None:
        self._processing = True
        try:
            self._process_lines()
        finally:
            self._processing = False
        if self._outbox and not self._writing:
            self._flush_replies()

    def _process_lines(self) -> None:
        while self._lines and not self._paused:
            line = self._lines.popleft()
            try:
                self._on_message(_decode(line), len(line))
            except (msgspec.DecodeError, RecursionError, ProtocolViolation) as exc:
                # RecursionError: a message nested deeper than the decoder goes.
                self._violate(f"it broke the tool channel ({exc})")
                return
            if self._in_flight_bytes > MAX_IN_FLIGHT_BYTES:
                # Backpressure: the program's sends block until its calls in flight settle,
                # so the server holds at most this (and one call) of its arguments at once.
                self._paused = True
                self._unwatch(self.worker.channel.fileno())

    def _on_message(self, message: Any, size: int) -> None:
        if self.violation is not None or self.done is not None:
            return  # stopped or finished: what comes after is ignored
        kind = message.get("t") if type(message) is dict else None
        if kind == "call":
            self._on_call(message, size)
        elif kind == "unread" and self._ready.done():
            self._on_unread(message)
        elif kind == "done" and self._ready.done():
            self.done = message
            # What the worker kept back of a flood of prints: counted in the marker of the cut.
            dropped, kept = message.get("dropped"), message.get("kept")
            if type(dropped) is int and 0 < dropped < _MAX_DROPPED:
                self.output.dropped = dropped
                self.output.kept = kept if type(kept) is int and kept >= 0 else 0
            self.worker.kill()  # nothing of the program may outlive its end
        elif kind == "ready" and not self._ready.done():
            sandbox = message.get("sandbox")
            self._ready.set_result(sandbox if type(sandbox) is dict else {})
            if self.worker.listener is not None:
                self._watch(self.worker.listener, self._on_thread_request)
        else:
            raise ProtocolViolation(f"unexpected message {str(message)[:80]!r}")

    def _on_unread(self, message: dict[str, Any]) -> None:
        """The program could not read the value a call was answered with (its interpreter could
        not decode it): the call's line says OUTPUT_INVALID, the error the program got. Only a
        call answered with a value can be so marked, once; the notice for any other is moot."""
        call_id = message.get("id")
        if type(call_id) is not int:
            raise ProtocolViolation("an unread notice needs a call's integer id")
        entry = self._delivered.pop(call_id, None)
        if entry is not None:
            entry["ok"] = False
            entry["code"] = ErrorCode.OUTPUT_INVALID.value

    def _on_call(self, message: dict[str, Any], size: int) -> None:
        call_id, name, args = message.get("id"), message.get("name"), message.get("args")
        if type(call_id) is not int or type(name) is not str or call_id in self._ids:
            raise ProtocolViolation("a call needs a fresh integer id and a tool name")
        self.attempts += 1
        self._delivered.pop(call_id, None)  # an id used again names the new call from now on
        # A name no tool can have (every registered name matches NAME_PATTERN) is refused here,
        # before any stage: the program chose it, up to a whole line of the channel, and the
        # run keeps each call's name and shows it on a line of its result.
        known = NAME_PATTERN.fullmatch(name) is not None
        entry: dict[str, Any] = {
            "name": name if known else _shown_name(name),
            "ok": False,
            "code": None,
            "execution_id": None,
        }
        self.calls.append(entry)
        if self.attempts > self.max_tool_calls:  # counted before dispatch
            entry["code"] = ErrorCode.RESOURCE_EXHAUSTED.value
            if self.attempts > self.max_tool_calls + MAX_CALLS_PAST_BUDGET:
                raise ProtocolViolation(
                    f"it went on calling tools after its budget of {self.max_tool_calls} calls"
                )
            message_text = (
                f"This program has used its {self.max_tool_calls} tool calls; no more calls "
                "can be made from it."
            )
            self._reply(call_id, False, code=entry["code"], message=message_text)
            return
        if not known:
            entry["code"] = ErrorCode.UNKNOWN_TOOL.value
            message_text = (
                f"There is no tool named {entry['name']} for programs: a tool's name is 1 to 64 "
                "characters from A-Z a-z 0-9 _ -."
            )
            self._reply(call_id, False, code=entry["code"], message=message_text)
            return
        self._ids.add(call_id)
        self._in_flight_bytes += size
        # Started at once: a call that never waits (a refusal, or a body that finishes at once)
        # is answered within this read, without a task's trip through the loop; its reply
        # leaves with the others this read answers.
        task = start_body(
            self._nested(call_id, name, args, entry, size), self._loop, "fastgate:nested-call"
        )
        if not task.done():
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _nested(
        self, call_id: int, name: str, args: Any, entry: dict[str, Any], size: int
    ) -> None:
        try:
            result = await self.executor.execute_nested(self.execution_id, name, args, self.ctx)
        except asyncio.CancelledError:
            entry["code"] = ErrorCode.ABORTED.value
            raise
        finally:
            self._ids.discard(call_id)
            self._settled(size)
        entry["execution_id"] = result.meta.execution_id
        if result.ok:
            # The call's line says what the program got: its value, or OUTPUT_INVALID when the
            # value could not be sent (here) or read (there: the worker's ``unread`` notice).
            if self._reply(call_id, True, value=result.value, fallback=result):
                entry["ok"] = True
                self._delivered[call_id] = entry
            else:
                entry["code"] = ErrorCode.OUTPUT_INVALID.value
        else:
            assert result.error is not None
            entry["code"] = result.error.code.value
            self._reply(call_id, False, code=entry["code"], message=result.error.message)

    def _settled(self, size: int) -> None:
        self._in_flight_bytes -= size
        if self._paused and self._in_flight_bytes <= MAX_IN_FLIGHT_BYTES:
            self._paused = False
            self._process()  # what was read already, first
            if not (self._paused or self._stopped or self.violation or self.done):
                self._watch(self.worker.channel.fileno(), self._on_channel)

    # -- sending ------------------------------------------------------------------------------

    def _reply(
        self,
        call_id: int,
        ok: bool,
        *,
        value: Any = None,
        fallback: ToolResult | None = None,
        code: str | None = None,
        message: str | None = None,
    ) -> bool:
        """Answer a call; whether the answer was a value (False: an error, the one given or
        OUTPUT_INVALID for a value that cannot be sent)."""
        if ok:
            reply = {"t": "result", "id": call_id, "ok": True, "value": value}
            try:
                self._send(reply)
                return True
            except _UNSENDABLE:  # a value JSON cannot carry, or nested past the encoder: text
                content = fallback.content if fallback is not None else None
            try:
                reply["value"] = content if isinstance(content, str) else repr(content)
                self._send(reply)
                return True
            except _UNSENDABLE:
                code = ErrorCode.OUTPUT_INVALID.value
                message = "The tool's value cannot be sent to the program."
        self._send({"t": "result", "id": call_id, "ok": False, "code": code, "message": message})
        return False

    def _send(self, message: dict[str, Any]) -> None:
        data = _encode(message)  # raises before anything is queued
        if self.violation is not None:
            return
        outbox = self._outbox
        if (self._ids or self._processing) and not self._writing and len(outbox) < _REPLY_BATCH:
            # Other calls in flight, or more lines to handle: the replies ready in this turn of
            # the loop go together at its end, one write and one wake-up of the worker for all
            # of them (_flush_replies drops them if the worker is gone by then).
            if not outbox and not self._processing:
                self._loop.call_soon(self._flush_replies)
            outbox += data
            outbox += b"\n"
            return
        if self.worker.process.returncode is not None:
            return
        data += b"\n"
        if not outbox:  # the usual case: all of it goes at once, nothing is queued
            try:
                sent = self.worker.channel.send(data)
            except BlockingIOError:
                sent = 0
            except OSError:  # the program closed its end: nobody to answer
                return
            if sent == len(data):
                return
            data = data[sent:]
        outbox += data
        self._flush()

    def _flush_replies(self) -> None:
        gone = self.worker.process.returncode is not None
        if self._stopped or self.violation is not None or gone:
            self._outbox.clear()  # nobody to answer
        elif not self._writing:  # else its writer callback sends them
            self._flush()

    def _flush(self) -> None:
        sock = self.worker.channel
        while self._outbox:
            try:
                sent = sock.send(self._outbox)
            except BlockingIOError:
                break
            except OSError:  # the program closed its end: nobody to answer
                self._outbox.clear()
                break
            del self._outbox[:sent]
        if self._outbox and not self._writing:
            self._loop.add_writer(sock.fileno(), self._flush)
            self._writing = True
        elif not self._outbox and self._writing:
            self._loop.remove_writer(sock.fileno())
            self._writing = False

    def _violate(self, reason: str) -> None:
        if self.violation is None and self.done is None:
            self.violation = reason
            self.worker.kill()

    # -- the outcome --------------------------------------------------------------------------

    def outcome(self) -> dict[str, Any] | Failure:
        """The value ``{"stdout", "calls"}``, or the program's failure."""
        stdout = self.output.text()
        calls = [dict(entry) for entry in self.calls]
        if self.violation is not None:
            return _failure(
                stdout, calls, f"The program was stopped: {self.violation}.", "protocol"
            )
        done = self.done
        if done is None and self.worker.process.bound == "tmp":
            limit = MAX_SCRATCH_BYTES // (1024 * 1024 * 1024)
            text = f"The program was stopped: its scratch directory held more than {limit} GiB."
            return _failure(stdout, calls, text, "limit", {"bound": "tmp"})
        if done is None:
            if self.returncode == 0 and self.channel_closed:
                ended = "The program closed its tool channel and ended without reporting."
            else:
                ended = _ended_early(self.returncode)
            return _failure(stdout, calls, ended, "crashed")
        if done.get("ok") is True:
            return {"stdout": stdout, "calls": calls}
        # The done message is the program's to write (it holds its channel): every field is
        # taken as text or a number of the expected type, and the text is cut like its output.
        error = done.get("error")
        error = error if type(error) is dict else {}
        kind = error.get("kind")
        cut = self.output.max_chars
        type_name = _text(error.get("type"))[:200]
        if kind == "syntax":
            line, column = _number(error.get("line")), _number(error.get("column"))
            where = f" at line {line}, column {column}" if line is not None else ""
            text = f"{type_name or 'SyntaxError'}{where}: {_text(error.get('message'))}"
            if _text(error.get("text")):
                text += f"\n    {_text(error.get('text'))}"
            where_at = {"line": line, "column": column}
            return _failure(stdout, calls, quoted(_cut(text, cut)), "syntax_error", where_at)
        if kind == "exit":
            status = _text(error.get("message"))[:200]
            if not _STATUS.fullmatch(status):  # sys.exit("text"): quoted, on this line
                status = repr(status)
            return _failure(stdout, calls, f"The program exited with status {status}.", "exit")
        text = _text(error.get("traceback")) or f"{type_name}: {_text(error.get('message'))}"
        return _failure(
            stdout, calls, quoted(_cut(text, cut)), "exception", {"type": type_name or None}
        )


def _threads(pid: int) -> int:
    """The threads of process ``pid`` now (as many as allowed when they cannot be counted)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return MAX_THREADS


def _text(value: Any) -> str:
    """A field of the program's done message that should be text ("" if it is not)."""
    return value if type(value) is str else ""


def _number(value: Any) -> int | None:
    """A field of the program's done message that should be a line or column number."""
    return value if type(value) is int else None


def _cut(text: str, max_chars: int) -> str:
    """``text`` within ``max_chars``, head and tail kept (as the program's output is)."""
    if len(text) <= max_chars:
        return text
    kept = Output(max_chars)
    kept.feed(text.encode("utf-8", "surrogatepass"))
    return kept.text()


def _shown_name(name: str) -> str:
    """A name no tool has, as a refusal and the run's line for the call show it: quoted, its
    control characters escaped (no line of its own), cut."""
    shown = repr(name[:_NAME_SHOWN])
    return shown + "…" if len(name) > _NAME_SHOWN else shown


def _read(fd: int) -> bytes:
    return os.read(fd, 1 << 16)


def _ended_early(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        signum = -returncode
        name = signal.Signals(signum).name if signum in signal.valid_signals() else str(signum)
        hint = {
            "SIGXCPU": " (its CPU time limit)",
            "SIGKILL": " (it may have run out of memory)",
        }.get(name, "")
        return f"The program was killed by {name}{hint} before it finished."
    return f"The program exited (status {returncode}) before it finished."


def _failure(
    stdout: str,
    calls: list[dict[str, Any]],
    error_text: str,
    reason: str,
    extra: dict[str, Any] | None = None,
) -> Failure:
    parts = [quoted(stdout.rstrip("\n"))] if stdout.strip() else []
    parts.append(error_text)
    lines = call_lines(calls)
    if lines:
        parts.append("Tool calls:\n" + "\n".join(lines))
    details = {"reason": reason, "calls": calls, **(extra or {})}
    return Failure("\n\n".join(parts), details=details)


def call_lines(calls: list[dict[str, Any]]) -> list[str]:
    """A line per call, in the order they were made: its tool's name, ok or the error code
    (as many as ``max_tool_calls`` allows, and the few refused past it)."""
    return [f"- {entry['name']}: {'ok' if entry['ok'] else entry['code']}" for entry in calls]


def quoted(text: str) -> str:
    """Text of the program's (its output, its traceback) as a block fenced with more backticks
    than any run of them in it: no line of it can close the block, whatever it holds (a line
    like ``Tool calls:``, a fence of its own, any line break), so nothing it prints reads as
    the run's own lines around it."""
    longest = max(map(len, _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def render(value: Any) -> str:
    """run_code's content: the program's output (fenced, see ``quoted``), then a line per tool
    call."""
    parts = []
    stdout = value.get("stdout", "") if isinstance(value, dict) else ""
    if stdout.strip():
        parts.append(quoted(stdout.rstrip("\n")))
    lines = call_lines(value.get("calls", [])) if isinstance(value, dict) else []
    if lines:
        parts.append("Tool calls:\n" + "\n".join(lines))
    return "\n\n".join(parts) or "(the program printed nothing and called no tool)"
