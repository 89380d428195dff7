"""The stdio transport: one server process and everything it starts (SPEC §14 supervision).

The SDK's ``stdio_client`` hides the process; this one keeps it, because the bridge must
report the pid, drain stderr into a bounded tail (an undrained pipe deadlocks a chatty server),
notice a crash at once, and end every process the server started, when it is closed and when
the server crashes. The server runs under ``fastgate.processes``' launcher, its parent and the
reaper of its descendants: one that detached (``setsid``, a double fork) is ended too. Messages
are newline-delimited JSON-RPC, parsed and written with the SDK's own types.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import IO

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from fastgate.mcp._text import printable
from fastgate.processes import PIPE, Process, spawn

log = logging.getLogger("fastgate.mcp")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # one JSON-RPC line; past it the connection is dropped
STDERR_TAIL_LINES = 40
STDERR_LINE_CHARS = 500
NOISE_LINE_CHARS = 200  # of the last stdout line that was not JSON-RPC, kept for errors
CLOSE_GRACE = 2.0  # after stdin closes, before SIGTERM
TERM_GRACE = 2.0  # after SIGTERM, before SIGKILL
# What a server inherits from us unless its config says otherwise (as MCP clients do: a
# server gets no secrets from the host's environment by accident).
INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")


class StderrTail:
    """The last lines a server wrote to stderr, each cut to a readable length, its control
    characters (terminal escapes, BEL, carriage returns) escaped: the tail is shown to
    operators, in ``status()``, startup errors and logs."""

    def __init__(self, lines: int = STDERR_TAIL_LINES) -> None:
        self._lines: deque[str] = deque(maxlen=lines)
        self._partial = ""

    def feed(self, chunk: str) -> None:
        text = self._partial + chunk
        *complete, self._partial = text.split("\n")
        if len(self._partial) > STDERR_LINE_CHARS:
            complete.append(self._partial)
            self._partial = ""
        for line in complete:
            line = line.rstrip("\r")
            if line:
                self._lines.append(printable(line[:STDERR_LINE_CHARS]))

    def text(self) -> str:
        lines = list(self._lines)
        if self._partial:
            lines.append(printable(self._partial[:STDERR_LINE_CHARS]))
        return "\n".join(lines)


class Unreadable:
    """The ``data`` of the error a request of ours fails with when the server's reply to it
    could not be read (not UTF-8): why. A server's own error can never carry one (its data is
    JSON)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class StdioTransport:
    """An async context manager yielding the (read, write) streams an MCP session drives.

    ``lost`` is set when the connection ends by itself (the server exited, closed stdout, or
    sent garbage that cannot be framed); ``exit_reason`` says why.
    """

    def __init__(
        self,
        argv: tuple[str, ...],
        env: Mapping[str, str],
        cwd: str | None,
        stderr: StderrTail,
    ) -> None:
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.stderr = stderr
        self.process: Process | None = None
        self.lost = asyncio.Event()
        self.exited = asyncio.Event()  # set by the event loop the moment the process ends
        self.exit_reason = ""
        self.noise_lines = 0  # stdout lines that were not JSON-RPC (a banner, a stray print)
        self.last_noise = ""
        self.unreadable = 0  # JSON-RPC messages that were not UTF-8 (their requests failed)
        self.on_lost: Callable[[str], None] | None = None
        self.on_spawn: Callable[[int], None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stdout: asyncio.StreamReader | None = None
        self._stderr: asyncio.StreamReader | None = None
        self._stdin: asyncio.StreamWriter | None = None
        self._pipes: list[asyncio.BaseTransport] = []  # each owns (and closes) its pipe
        self._handed: list[object] = []  # the pipes given to those transports
        self._reader_out: MemoryObjectSendStream[SessionMessage | Exception] | None = None
        self._writer_in: MemoryObjectReceiveStream[SessionMessage] | None = None
        self._pidfd = -1  # the server's, polled by alive(); -1 where the OS has none
        self._gone = False  # it had exited before its pidfd could be opened

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    async def __aenter__(
        self,
    ) -> tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ]:
        env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
        env.update(self.env)
        process = await _start(self.argv, env, self.cwd)
        self.process = process
        try:
            await self._connect_pipes(process)
        except BaseException:
            await process.terminate_all(0)
            self._close_pipes(process)
            raise
        pidfd = _open_pidfd(process.pid)
        self._gone = pidfd is None
        self._pidfd = -1 if pidfd is None else pidfd
        if self.on_spawn is not None:
            self.on_spawn(process.pid)
        loop = asyncio.get_running_loop()
        read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
        self._reader_out, self._writer_in = read_send, write_receive
        self._tasks = [
            loop.create_task(self._read_stdout(read_send), name="fastgate-mcp:stdout"),
            loop.create_task(self._write_stdin(write_receive), name="fastgate-mcp:stdin"),
            loop.create_task(self._drain_stderr(), name="fastgate-mcp:stderr"),
            loop.create_task(self._watch_exit(), name="fastgate-mcp:exit"),
        ]
        return read_receive, write_send

    async def _connect_pipes(self, process: Process) -> None:
        """The server's pipes as streams of the running loop."""
        assert process.stdin and process.stdout and process.stderr
        self._stdout = await self._reader(process.stdout, MAX_MESSAGE_BYTES)
        self._stderr = await self._reader(process.stderr, 65536)
        loop = asyncio.get_running_loop()
        writer, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(), loop=loop), process.stdin
        )
        self._pipes.append(writer)
        self._handed.append(process.stdin)
        self._stdin = asyncio.StreamWriter(writer, protocol, None, loop)

    async def _reader(self, pipe: IO[bytes], limit: int) -> asyncio.StreamReader:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit, loop)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe
        )
        self._pipes.append(transport)
        self._handed.append(pipe)
        return reader

    def _close_pipes(self, process: Process) -> None:
        for transport in self._pipes:
            transport.close()  # and its pipe, in the loop's own time
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None and not any(pipe is handed for handed in self._handed):
                pipe.close()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.shield(self._shutdown())

    async def _shutdown(self) -> None:
        process = self.process
        assert process is not None
        if self._stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                self._stdin.close()
        if await _exited(self.exited, CLOSE_GRACE):
            # What the server left running is being ended by its launcher: at once, now.
            await process.terminate_all(0)
        else:  # TERM to the server and all it started, KILL after the grace
            await process.terminate_all(TERM_GRACE)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._close_pipes(process)
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        for stream in (self._reader_out, self._writer_in):
            if stream is not None:
                stream.close()

    def alive(self) -> bool:
        """Whether the server process runs now, asked of the OS: its exit reaches ``lost``
        only once the event loop has read it, and until then the connection looked ready."""
        if self._gone or self.lost.is_set() or self.exited.is_set():
            return False
        if self._pidfd >= 0:
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            return not poller.poll(0)  # a pidfd is readable once its process has exited
        process = self.process
        return process is not None and process.returncode is None

    def _lose(self, reason: str) -> None:
        if not self.lost.is_set():
            self.exit_reason = reason
            self.lost.set()
            if self.on_lost is not None:
                self.on_lost(reason)
        if self._reader_out is not None:
            self._reader_out.close()  # pending requests learn the connection is gone

    async def _watch_exit(self) -> None:
        """A crash is noticed at once, even while a child of the server still holds its stdout
        open (its launcher is ending that child meanwhile)."""
        assert self.process is not None
        with contextlib.suppress(OSError):
            await self.process.exited()
        self.exited.set()
        self._lose(f"the server exited with status {self.process.returncode}")

    async def _read_stdout(self, out: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        process, stdout = self.process, self._stdout
        assert process is not None and stdout is not None
        reason = "the server closed its stdout"
        try:
            while True:
                try:
                    line = await stdout.readuntil(b"\n")
                except asyncio.IncompleteReadError as exc:
                    line = exc.partial
                    if not line.strip():
                        break
                except asyncio.LimitOverrunError:
                    reason = f"the server sent a message over {MAX_MESSAGE_BYTES} bytes"
                    break
                if not line.strip():
                    continue
                try:
                    message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError as exc:
                    if await self._unreadable(line, out):
                        continue
                    reply = _unvalidated_reply(line)
                    if reply is not None:  # ours, but its result is not one the SDK can hold
                        await out.send(SessionMessage(reply))
                        continue
                    # Not JSON-RPC (a stray print): the session is told, the stream goes on.
                    self.noise_lines += 1
                    self.last_noise = line[:NOISE_LINE_CHARS].decode("utf-8", "replace").strip()
                    await out.send(exc)
                    continue
                await out.send(SessionMessage(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return  # our side closed first
        finally:
            code = process.returncode
            if code is None and await _exited(self.exited, 0.5):
                code = process.returncode
            if code is not None:
                reason = f"the server exited with status {code}"
            self._lose(reason)
            out.close()

    async def _unreadable(
        self, line: bytes, out: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> bool:
        """Whether ``line`` was a JSON-RPC message that is not valid UTF-8, now dealt with: the
        request of ours it answers fails at once (an error carrying ``Unreadable``, which no
        server can send), a request of the server's is answered with an error. Its other
        messages go on. Any other line that is not UTF-8 is a stray line like the rest."""
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = exc.object[exc.start : exc.end][:8].hex(" ")
            reason = f"not valid UTF-8 ({exc.reason}: byte(s) {bad} at offset {exc.start})"
        else:
            return False
        # Which message it is: the invalid bytes left out (never an ASCII character, so never
        # one of JSON's), only to read its id; nothing of its content is used.
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(
                line.decode("utf-8", "ignore"), by_name=False
            )
        except ValueError:
            return False
        if isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError):
            if message.id is None:
                return False
            self.unreadable += 1
            error = mcp_types.ErrorData(
                code=mcp_types.PARSE_ERROR,
                message=f"the reply is {reason}",
                data=Unreadable(reason),
            )
            failed = mcp_types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
            await out.send(SessionMessage(failed))
            return True
        if isinstance(message, mcp_types.JSONRPCRequest):
            self.unreadable += 1
            log.warning("MCP server request %s is %s: refused", printable(str(message.id)), reason)
            refusal = mcp_types.JSONRPCError(
                jsonrpc="2.0",
                id=message.id,
                error=mcp_types.ErrorData(
                    code=mcp_types.PARSE_ERROR, message=f"the request is {reason}"
                ),
            )
            stdin = self._stdin
            if stdin is not None:
                with contextlib.suppress(OSError, RuntimeError):
                    data = refusal.model_dump_json(by_alias=True, exclude_unset=True)
                    stdin.write(data.encode() + b"\n")
            return True
        return False  # a notification: nothing waits for it

    async def _write_stdin(self, messages: MemoryObjectReceiveStream[SessionMessage]) -> None:
        stdin = self._stdin
        assert stdin is not None
        try:
            async for message in messages:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                stdin.write(data.encode() + b"\n")
                await stdin.drain()
        except (OSError, RuntimeError, anyio.ClosedResourceError):
            self._lose("the server stopped reading its stdin")

    async def _drain_stderr(self) -> None:
        stderr = self._stderr
        assert stderr is not None
        while True:
            chunk = await stderr.read(65536)
            if not chunk:
                return
            self.stderr.feed(chunk.decode("utf-8", "replace"))


async def _start(argv: tuple[str, ...], env: dict[str, str], cwd: str | None) -> Process:
    """The server, started: ``OSError`` naming the program when it cannot be (said the same
    way whatever failed: the launcher, the directory, the program)."""
    try:
        process = spawn(
            list(argv), stdin=PIPE, stdout=PIPE, stderr=PIPE, env=env, cwd=cwd, grace=TERM_GRACE
        )
    except OSError as exc:
        raise OSError(exc.errno, f"cannot start {argv[0]!r}: {exc.strerror}") from None
    try:
        await process.started()
    except BaseException as exc:
        await process.terminate_all(0)
        for pipe in (process.stdin, process.stdout, process.stderr):
            assert pipe is not None
            pipe.close()
        if isinstance(exc, OSError):
            raise OSError(exc.errno, f"cannot start {argv[0]!r}: {exc.strerror}") from None
        raise
    return process


def _open_pidfd(pid: int) -> int | None:
    """A pidfd of ``pid``: -1 where the OS has none, None when the process is gone already."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except (AttributeError, OSError):
        return -1


async def _exited(exited: asyncio.Event, within: float) -> bool:
    """Whether the server ended within ``within`` seconds (not the end of its pipes, which a
    child that inherited them can hold open for a while)."""
    if not exited.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(exited.wait(), within)
    return exited.is_set()


def process_group_members(pgid: int) -> list[int]:
    """Pids of the live processes in group ``pgid`` (Linux /proc; empty elsewhere)."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid):
            members.append(int(entry))
    return members


def _unvalidated_reply(line: bytes) -> mcp_types.JSONRPCResponse | None:
    """A reply (``id`` and ``result``) that the SDK's model of a message refused, passed on as
    it came: its result nested past the model's depth, or not an object. The request it answers
    then fails on its result (a listing is checked tool by tool, a call's result is a protocol
    error) at once, where a line dropped as noise left it waiting out its timeout."""
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict) or raw.get("jsonrpc") != "2.0" or "result" not in raw:
        return None
    request_id = raw.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    return mcp_types.JSONRPCResponse.model_construct(
        jsonrpc="2.0", id=request_id, result=raw["result"]
    )
