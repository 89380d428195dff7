"""Run one short-lived command with bounded output, for command hooks.

Started through ``fastgate.processes`` (its launcher is the command's parent and the reaper of
everything it starts, daemons that detach included) and driven by the running loop's
``add_reader``/``add_writer``, so asyncio and uvloop behave the same: uvloop's own
``subprocess_exec`` leaves extra copies of the stdio pipes in the child, which would let a
background grandchild hold stdout open and turn a clean reply into a timeout.

When the command exits, whatever it left running is killed at once; every other way out of
``run_bounded`` (overflow, timeout, cancellation) kills the command and everything it started.
Either way every process is gone and reaped before it returns.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any

from fastgate.processes import PIPE, Process, spawn

_CHUNK = 65536


class CommandOutput:
    """What a finished (or stopped) command produced."""

    __slots__ = ("returncode", "stderr", "stdout", "stdout_overflow")

    def __init__(self) -> None:
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.stdout_overflow = False
        self.returncode: int | None = None


class _Run:
    """The I/O of one process: feed stdin, drain stdout/stderr up to ``limit``, await the end
    of the command and of everything it started."""

    def __init__(self, process: Process, stdin: bytes, limit: int) -> None:
        self.loop = asyncio.get_running_loop()
        self.process = process
        self.limit = limit
        self.out = CommandOutput()
        self.finished = self.loop.create_future()  # output closed and processes ended, or overflow
        self.ended: asyncio.Task[int | None] | None = None
        self.pending_input = memoryview(stdin)
        assert process.stdin and process.stdout and process.stderr
        self.stdin_fd: int | None = process.stdin.fileno()
        self.open_outputs = {
            process.stdout.fileno(): self.out.stdout,
            process.stderr.fileno(): self.out.stderr,
        }

    def start(self) -> None:
        for fd in (self.stdin_fd, *self.open_outputs):
            assert fd is not None
            os.set_blocking(fd, False)
        for fd in self.open_outputs:
            self.loop.add_reader(fd, self._readable, fd)
        if self.pending_input:
            assert self.stdin_fd is not None
            self.loop.add_writer(self.stdin_fd, self._writable)
        else:
            self._close_stdin()
        self.ended = self.loop.create_task(self.process.wait())
        self.ended.add_done_callback(self._on_end)

    def _on_end(self, ended: asyncio.Task[int | None]) -> None:
        if not ended.cancelled():
            ended.exception()  # a command that could not start: raised by run_bounded itself
        self.out.returncode = self.process.returncode
        self._maybe_finish()

    def _writable(self) -> None:
        assert self.stdin_fd is not None
        try:
            written = os.write(self.stdin_fd, self.pending_input[:_CHUNK])
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the command does not read its input; that is its business
            self._close_stdin()
            return
        self.pending_input = self.pending_input[written:]
        if not self.pending_input:
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self.stdin_fd is not None:
            self.loop.remove_writer(self.stdin_fd)
            self.stdin_fd = None
            assert self.process.stdin is not None
            self.process.stdin.close()

    def _readable(self, fd: int) -> None:
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close_output(fd)
            self._maybe_finish()
            return
        buffer = self.open_outputs[fd]
        room = self.limit - len(buffer)
        buffer += data[:room]
        if len(data) > room and buffer is self.out.stdout:
            self.out.stdout_overflow = True  # a reply that large is not a reply: stop now
            self._finish()
        # stderr past the limit is dropped, but read on so the command never blocks on it.

    def _close_output(self, fd: int) -> None:
        self.loop.remove_reader(fd)
        del self.open_outputs[fd]

    def _maybe_finish(self) -> None:
        if not self.open_outputs and self.process.done():
            self._finish()

    def _finish(self) -> None:
        # The process may be done before its end task's callback ran: read its status here too.
        if self.out.returncode is None:
            self.out.returncode = self.process.returncode
        if not self.finished.done():
            self.finished.set_result(None)

    async def stop(self) -> None:
        """Kill every process (reaped before this returns), release every descriptor. A
        second cancellation waits for that too."""
        try:
            await self.process.terminate_all(0)
        finally:
            if self.ended is not None:
                self.ended.cancel()  # a no-op once it has seen the end
            self._close_stdin()
            for fd in list(self.open_outputs):
                self._close_output(fd)
            for stream in (self.process.stdout, self.process.stderr):
                assert stream is not None
                stream.close()


async def run_bounded(
    argv: Sequence[str],
    stdin: bytes,
    *,
    limit: int,
    cwd: str | None,
    env: Mapping[str, str] | None,
    sandbox: Any = None,
) -> CommandOutput:
    """Run ``argv`` until it exits and closes its output (or overflows ``limit`` on stdout).

    Raises ``OSError`` when it cannot start. Bound it with ``asyncio.timeout``: on cancellation
    (a deadline included) every process is killed and reaped before ``CancelledError``
    propagates. ``sandbox``: a ``fastgate.sandbox.SandboxPolicy`` confining the command (its
    roots: ``cwd``).
    """
    confinement = None
    if sandbox is not None:
        confinement = await sandbox.confinement(roots=None, cwd=cwd or os.getcwd())
    try:
        if confinement is not None:
            env = {**(os.environ if env is None else env), **confinement.environment}
        process = spawn(
            argv,
            stdin=PIPE,
            stdout=PIPE,
            stderr=PIPE,
            cwd=cwd,
            env=env,
            grace=0,
            plan=confinement.steps if confinement is not None else None,
            pass_fds=confinement.pass_fds if confinement is not None else (),
        )
        if confinement is not None:
            confinement.started(process)
        run = _Run(process, stdin, limit)
        try:
            run.start()
            await run.finished
        finally:
            await run.stop()
    finally:
        if confinement is not None:
            await confinement.close()
    if process.start_error is not None:
        raise process.start_error
    run.out.returncode = process.returncode  # the end may be seen before its callback ran
    return run.out
