"""The shell seam (SPEC §16): ``Shell``, ``ShellResult`` and ``LocalShell``.

``LocalShell`` runs ``bash -c`` through ``fastgate.processes`` (a launcher that is its parent
and the reaper of whatever it starts), in a session of its own, stdin from ``/dev/null``,
stdout and stderr into one pipe it reads without blocking the event loop. When the call ends
(the command exited, its timeout passed, or the caller cancelled), every process the command
started is ended, daemons that detached included: TERM first, KILL after ``kill_grace``. Then
the output pipe is read for at most ``read_grace`` more, so a process that could not be ended
and holds the pipe cannot hold the call. The launcher has the command's environment, so
``/proc/$PPID/environ`` holds none of the server's secrets.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import re
import shutil
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fastgate.builtin._output import OutputBuffer
from fastgate.model import CancelToken
from fastgate.processes import (
    DEFAULT_ENV_DENY,
    OUT_OF_DESCRIPTORS,
    DescriptorsExhausted,
    Plan,
    Process,
    Step,
    spawn,
)

if TYPE_CHECKING:
    from fastgate.sandbox import NetworkEvent

_READ_SIZE = 1 << 16


@dataclass(frozen=True, slots=True)
class ShellResult:
    """``exit_code``: the command's status (killed by signal ``n``: ``128 + n``, as a shell
    reports it), ``None`` when it was stopped before it exited. ``output``: stdout and stderr as
    they interleaved, cut head and tail to ``max_output`` characters (``truncated``).
    ``sandboxed``: whether the OS confined it (``fastgate.sandbox``); ``network``: each decision
    of the sandbox's network proxy about a connection it asked for."""

    exit_code: int | None
    output: str
    truncated: bool
    timed_out: bool
    sandboxed: bool = False
    network: tuple[NetworkEvent, ...] = ()


@runtime_checkable
class Shell(Protocol):
    """What ``bash`` and AutoVerify run commands through; a server's sandbox passes its own
    (``ExecutionContext(shell=...)``). ``env``: variables to set on top of the shell's own
    environment. ``roots``: the directories the command may write (``bash`` passes the
    workspace root and the additional directories; ``None``: ``cwd``), for a shell that
    confines it. ``run`` raises ``OSError`` when the command cannot be started at all; a
    command that ran and failed is a result. A shell cancelled while its command runs may set
    the ``CancelledError``'s ``network`` to the decisions its network made so far."""

    async def run(
        self,
        command: str,
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- the seam's signature (SPEC §16)
        max_output: int = 30_000,
        signal: CancelToken | None = None,
        roots: Sequence[str] | None = None,
    ) -> ShellResult: ...


class LocalShell:
    """Commands on this machine, each in a fresh ``bash -c``: no directory or variable carries
    over from one call to the next.

    Each command gets the server's environment without its secrets (names containing one of
    ``env_deny``, in any case, unless listed in ``env_allow``), plus ``PAGER=cat`` and the
    ``env`` given to ``run``.
    """

    def __init__(
        self,
        *,
        env_allow: Iterable[str] = (),
        env_deny: Iterable[str] = DEFAULT_ENV_DENY,
        kill_grace: float = 1.0,
        read_grace: float = 2.0,
        executable: str = "bash",
    ) -> None:
        if isinstance(env_allow, str) or isinstance(env_deny, str):
            raise TypeError("env_allow and env_deny take lists of names, not a single string")
        if not 0 <= kill_grace < math.inf or not 0 <= read_grace < math.inf:
            raise ValueError("kill_grace and read_grace must be finite numbers of seconds >= 0")
        self.env_allow = frozenset(env_allow)
        self.env_deny = tuple(part for part in env_deny if part)
        self.kill_grace = kill_grace
        self.read_grace = read_grace
        self.executable = executable
        self._allow = frozenset(os.fsencode(name) for name in self.env_allow)
        alternatives = b"|".join(re.escape(os.fsencode(part)) for part in self.env_deny)
        self._secret = re.compile(alternatives, re.IGNORECASE) if alternatives else None
        self._filtered: tuple[dict[bytes, bytes], dict[bytes, bytes]] | None = None
        # Looked up once: Popen would search PATH on every call otherwise.
        self._program = shutil.which(executable) or executable

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a command gets, as text (``run`` passes the bytes)."""
        return {
            os.fsdecode(name): os.fsdecode(value)
            for name, value in self._environment(extra).items()
        }

    def _environment(self, extra: Mapping[str, str] | None) -> dict[bytes, bytes]:
        # Bytes, as the OS keeps them, and filtered again only when the server's environment
        # changed: comparing two small dicts is cheaper than filtering through os.environb.
        source = _environ_bytes()
        cached = self._filtered
        if cached is None or cached[0] != source:
            secret, allow = self._secret, self._allow
            filtered = {
                name: value
                for name, value in source.items()
                if secret is None or secret.search(name) is None or name in allow
            }
            filtered[b"PAGER"] = b"cat"
            cached = self._filtered = (dict(source), filtered)
        env = dict(cached[1])
        if extra:
            for name, value in extra.items():
                env[os.fsencode(name)] = os.fsencode(value)
        return env

    async def run(
        self,
        command: str,
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- the seam's signature (SPEC §16)
        max_output: int = 30_000,
        signal: CancelToken | None = None,
        roots: Sequence[str] | None = None,
    ) -> ShellResult:
        """Run ``command``; ``roots`` is for a confining shell (this one runs unconfined)."""
        check_arguments(command, timeout)
        result, _ = await self.supervised(command, cwd, env, timeout, max_output, signal)
        return result

    async def supervised(
        self,
        command: str,
        cwd: str,
        env: Mapping[str, str] | None,
        timeout: float | None,  # noqa: ASYNC109 -- the seam's own timeout
        max_output: int,
        signal: CancelToken | None,
        *,
        plan: Plan | Sequence[Step] | None = None,
        pass_fds: Sequence[int] = (),
        on_start: Any = None,
    ) -> tuple[ShellResult, Process]:
        """Start ``command`` (with the launcher's ``plan``, when given) and supervise it to
        the end of every process it started; the result and the ended process. ``on_start``
        is called with the process once it is spawned."""
        run_env = self._environment(env)
        try:
            read_fd, write_fd = os.pipe()
        except OSError as exc:  # as spawn reports it: nothing was made
            if exc.errno in OUT_OF_DESCRIPTORS:
                raise DescriptorsExhausted(exc.errno) from exc
            raise
        try:
            process = spawn(
                [self.executable, "-c", command],  # $0 as given: errors say "bash: ..."
                executable=self._program,
                stdout=write_fd,
                stderr=write_fd,
                cwd=cwd,
                env=run_env,
                grace=self.kill_grace,
                plan=plan,
                pass_fds=pass_fds,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        if on_start is not None:
            on_start(process)
        run = _Run(asyncio.get_running_loop(), max_output, read_fd, process)
        return await run.supervise(timeout, signal, self), process


class _Run:
    """One command, from its start to the end of every process it started."""

    __slots__ = ("eof", "loop", "max_output", "output", "process", "read_fd", "wake")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, max_output: int, read_fd: int, process: Process
    ) -> None:
        self.loop = loop
        self.process = process
        self.max_output = max_output
        self.read_fd = read_fd
        self.output = OutputBuffer(max(max_output, 1))
        self.eof: asyncio.Future[None] = loop.create_future()
        self.wake: asyncio.Future[str] = loop.create_future()  # "exited", "timeout", "cancel"

    async def supervise(
        self,
        seconds: float | None,
        signal: CancelToken | None,
        shell: LocalShell,
    ) -> ShellResult:
        loop, process = self.loop, self.process
        timer: asyncio.TimerHandle | None = None
        link = None
        # Woken once every process is gone: after the command's exit the launcher ends what it
        # left running (TERM, then KILL after the grace) by itself.
        process.add_end_callback(self._on_end)
        try:
            os.set_blocking(self.read_fd, False)
            loop.add_reader(self.read_fd, self._readable)
            if seconds is not None:
                timer = loop.call_later(seconds, self._wake, "timeout")
            if signal is not None:
                link = signal.add_callback(self._on_signal)
                if signal.cancelled:
                    self._wake("cancel")
            reason = await self.wake
        finally:
            if timer is not None:
                timer.cancel()
            if link is not None:
                link.remove()
            try:
                # At once after the end; after a timeout or a cancel: TERM, then KILL.
                await process.terminate_all(shell.kill_grace)
            finally:
                if not self.eof.done():  # else no task is made for it
                    await _uninterrupted(self._drain(shell.read_grace))
                self._close()
        if process.start_error is not None:
            raise process.start_error  # bash itself could not be started
        output, truncated = self.output.render(self.max_output)
        if reason == "exited":
            return ShellResult(_shell_status(process.returncode), output, truncated, False)
        return ShellResult(None, output, truncated, reason == "timeout")

    def _wake(self, reason: str) -> None:
        # A command that has exited is not timed out or cancelled while what it left running
        # is ended (within the grace).
        if not self.wake.done() and not (reason != "exited" and self.process.has_exited()):
            self.wake.set_result(reason)

    def _on_end(self) -> None:
        self._wake("exited")

    def _on_signal(self, _: CancelToken) -> None:
        self.loop.call_soon_threadsafe(self._wake, "cancel")  # maybe from another thread

    def _readable(self) -> None:
        try:
            chunk = os.read(self.read_fd, _READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self.output.add(chunk)
            return
        self.loop.remove_reader(self.read_fd)
        if not self.eof.done():
            self.eof.set_result(None)

    async def _drain(self, grace: float) -> None:
        """Read what is left, for at most ``grace`` seconds: every process the command started
        is gone by now, unless one could not be ended (and holds the pipe)."""
        try:
            await asyncio.wait_for(asyncio.shield(self.eof), grace)
        except TimeoutError:
            pass  # held open by a process that could not be ended: stop reading

    def _close(self) -> None:
        if self.read_fd >= 0:
            self.loop.remove_reader(self.read_fd)
            os.close(self.read_fd)
            self.read_fd = -1


def check_arguments(command: object, timeout: float | None) -> None:
    if type(command) is not str:
        raise TypeError(f"command: expected str, got {type(command).__name__}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout: expected a positive number of seconds, got {timeout!r}")


def _shell_status(code: int | None) -> int | None:
    """A status as a shell reports it: killed by signal ``n`` is ``128 + n``."""
    if code is None or code >= 0:
        return code
    return 128 - code


def _environ_bytes() -> Mapping[bytes, bytes]:
    """The server's environment as bytes: CPython's own mapping behind ``os.environ`` where it
    holds bytes (POSIX), without a copy; else ``os.environb``."""
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict) and all(type(key) is bytes for key in itertools.islice(data, 1)):
        return data
    return os.environb


async def _uninterrupted(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end even if the awaiting task is cancelled again meanwhile (it is
    bounded: the grace, then a few rounds of KILL)."""
    task = asyncio.ensure_future(work)
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            continue
    task.result()
