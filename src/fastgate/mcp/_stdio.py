"""The stdio transport: one server process in its own process group (SPEC §14 supervision).

The SDK's ``stdio_client`` hides the process; this one keeps it, because the bridge must
report the pid, drain stderr into a bounded tail (an undrained pipe deadlocks a chatty server),
notice a crash at once, and end the whole group on close, stragglers a server left behind
included. Messages are newline-delimited JSON-RPC, parsed and written with the SDK's own types.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType

import anyio
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

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
    """The last lines a server wrote to stderr, each cut to a readable length."""

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
                self._lines.append(line[:STDERR_LINE_CHARS])

    def text(self) -> str:
        lines = list(self._lines)
        if self._partial:
            lines.append(self._partial[:STDERR_LINE_CHARS])
        return "\n".join(lines)


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
        self.process: asyncio.subprocess.Process | None = None
        self.lost = asyncio.Event()
        self.exited = asyncio.Event()  # set by the event loop the moment the process ends
        self.exit_reason = ""
        self.noise_lines = 0  # stdout lines that were not JSON-RPC (a banner, a stray print)
        self.last_noise = ""
        self.on_lost: Callable[[str], None] | None = None
        self.on_spawn: Callable[[int], None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._reader_out: MemoryObjectSendStream[SessionMessage | Exception] | None = None
        self._writer_in: MemoryObjectReceiveStream[SessionMessage] | None = None

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
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _Protocol(self.exited, loop),
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=self.cwd,
                start_new_session=True,  # its own group: closing ends it and all it started
            )
        except OSError as exc:  # said the same way on every loop (uvloop omits the file name)
            raise OSError(exc.errno, f"cannot start {self.argv[0]!r}: {exc.strerror}") from None
        self.process = asyncio.subprocess.Process(transport, protocol, loop)
        if self.on_spawn is not None:
            self.on_spawn(self.process.pid)
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
        if process.stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                process.stdin.close()
        if not await _exited(process, self.exited, CLOSE_GRACE):
            _signal_group(process.pid, signal.SIGTERM)
            if not await _exited(process, self.exited, TERM_GRACE):
                _signal_group(process.pid, signal.SIGKILL)
                await _exited(process, self.exited, TERM_GRACE)
        # A server that exited by itself can leave children in its group: end them too, and
        # return once the kernel has (a killed process lingers for a moment).
        _signal_group(process.pid, signal.SIGKILL)
        for _ in range(int(TERM_GRACE / 0.01)):
            if not process_group_members(process.pid):
                break
            await asyncio.sleep(0.01)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for stream in (self._reader_out, self._writer_in):
            if stream is not None:
                stream.close()

    def _lose(self, reason: str) -> None:
        if not self.lost.is_set():
            self.exit_reason = reason
            self.lost.set()
            if self.on_lost is not None:
                self.on_lost(reason)
        if self._reader_out is not None:
            self._reader_out.close()  # pending requests learn the connection is gone

    async def _watch_exit(self) -> None:
        """A crash is noticed even when a child of the server still holds its stdout open."""
        await self.exited.wait()
        assert self.process is not None
        self._lose(f"the server exited with status {self.process.returncode}")

    async def _read_stdout(self, out: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        process = self.process
        assert process is not None and process.stdout is not None
        stdout = process.stdout
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
            if code is None and await _exited(process, self.exited, 0.5):
                code = process.returncode
            if code is not None:
                reason = f"the server exited with status {code}"
            self._lose(reason)
            out.close()

    async def _write_stdin(self, messages: MemoryObjectReceiveStream[SessionMessage]) -> None:
        process = self.process
        assert process is not None and process.stdin is not None
        stdin = process.stdin
        try:
            async for message in messages:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                stdin.write(data.encode() + b"\n")
                await stdin.drain()
        except (OSError, RuntimeError, anyio.ClosedResourceError):
            self._lose("the server stopped reading its stdin")

    async def _drain_stderr(self) -> None:
        process = self.process
        assert process is not None and process.stderr is not None
        while True:
            chunk = await process.stderr.read(65536)
            if not chunk:
                return
            self.stderr.feed(chunk.decode("utf-8", "replace"))


async def _exited(
    process: asyncio.subprocess.Process, exited: asyncio.Event, within: float
) -> bool:
    """Whether the process ended within ``within`` seconds. Not ``process.wait()``: that also
    waits for the pipes to close, which a child that inherited them can hold open for long."""
    if process.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(exited.wait(), within)
    return process.returncode is not None


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    """The usual stream protocol, telling at once when the process ends."""

    def __init__(self, exited: asyncio.Event, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=MAX_MESSAGE_BYTES, loop=loop)
        self._exited = exited

    def process_exited(self) -> None:
        super().process_exited()
        self._exited.set()


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


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
