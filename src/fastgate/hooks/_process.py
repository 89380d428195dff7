"""Run one short-lived command with bounded output, for command hooks.

Spawned with ``subprocess.Popen`` (``close_fds=True``, ``start_new_session=True``) and driven by
the running loop's ``add_reader``/``add_writer``, so asyncio and uvloop behave the same: uvloop's
own ``subprocess_exec`` leaves extra copies of the stdio pipes in the child, which would let a
background grandchild hold stdout open and turn a clean reply into a timeout.

The command's pid is the id of its process group. Every way out of ``run_bounded`` (reply,
failure, timeout, cancellation) SIGKILLs that group and reaps the command before returning.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from contextlib import suppress

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
    """The I/O of one process: feed stdin, drain stdout/stderr up to ``limit``, await exit."""

    def __init__(self, proc: subprocess.Popen[bytes], stdin: bytes, limit: int) -> None:
        self.loop = asyncio.get_running_loop()
        self.proc = proc
        self.limit = limit
        self.out = CommandOutput()
        self.finished = self.loop.create_future()  # output closed and process exited, or overflow
        self.exited = self.loop.create_future()
        self.pending_input = memoryview(stdin)
        assert proc.stdin and proc.stdout and proc.stderr
        self.stdin_fd: int | None = proc.stdin.fileno()
        self.open_outputs = {
            proc.stdout.fileno(): self.out.stdout,
            proc.stderr.fileno(): self.out.stderr,
        }
        self.pidfd: int | None = None

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
        self._watch_exit()

    def _watch_exit(self) -> None:
        try:
            self.pidfd = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):  # no pidfd (not Linux, old kernel): a waiting thread
            waiter = self.loop.run_in_executor(None, self.proc.wait)
            waiter.add_done_callback(lambda _: self._on_exit())
            return
        self.loop.add_reader(self.pidfd, self._on_exit)

    def _on_exit(self) -> None:
        if self.pidfd is not None:
            self.loop.remove_reader(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = None
        self.out.returncode = self.proc.wait()  # reaps: the process has already exited
        if not self.exited.done():
            self.exited.set_result(None)
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
            assert self.proc.stdin is not None
            self.proc.stdin.close()

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
        if not self.open_outputs and self.exited.done():
            self._finish()

    def _finish(self) -> None:
        if not self.finished.done():
            self.finished.set_result(None)

    async def stop(self) -> None:
        """Kill the process group, reap the command, release every descriptor."""
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._close_stdin()
        for fd in list(self.open_outputs):
            self._close_output(fd)
        for stream in (self.proc.stdout, self.proc.stderr):
            assert stream is not None
            stream.close()
        if not self.exited.done():
            # The kill is sent, so this is short; shielded so a second cancellation cannot
            # leave the command unreaped.
            await asyncio.shield(self.exited)


async def run_bounded(
    argv: Sequence[str],
    stdin: bytes,
    *,
    limit: int,
    cwd: str | None,
    env: Mapping[str, str] | None,
) -> CommandOutput:
    """Run ``argv`` until it exits and closes its output (or overflows ``limit`` on stdout).

    Raises ``OSError`` when it cannot start. Bound it with ``asyncio.timeout``: on cancellation
    (a deadline included) the group is killed and the command reaped before ``CancelledError``
    propagates.
    """
    # Popen's fork/exec is a short blocking call (vfork where possible), as in asyncio's own
    # subprocess_exec; everything after it is non-blocking.
    proc = subprocess.Popen(  # noqa: ASYNC220
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        close_fds=True,
        start_new_session=True,
    )
    run = _Run(proc, stdin, limit)
    try:
        run.start()
        await run.finished
        return run.out
    finally:
        await run.stop()
