"""``spawn`` and ``Process``: a command, and every process it starts, from start to end.

On Linux each command is started by a launcher (``_launcher.py``; its compiled twin
``fastgate-launcher`` where the build made it) that is its parent: a child subreaper, so
whatever the command starts stays the launcher's descendant however it detaches. The compiled
launcher is forked ahead by this process's resident one (``_resident.py``: no program start of
its own per command, no fork while the command waits; its environment is empty), the pure one is
started per command with the command's environment: ``/proc/$PPID/environ`` seen from the
command shows nothing the command could not see itself.

Elsewhere (no subreapers) the command is started directly in a session of its own and its
process group is what is ended: a process that leaves the group is out of reach there.
"""

from __future__ import annotations

import asyncio
import errno
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO, NamedTuple

from fastgate._core import REQUIRE_EXTENSIONS
from fastgate.processes._descriptors import OUT_OF_DESCRIPTORS, DescriptorsExhausted
from fastgate.processes._plan import Plan, Step
from fastgate.processes._resident import ResidentGone, encode_spec, memfd, resident

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
STDOUT = subprocess.STDOUT

_HERE = os.path.dirname(os.path.abspath(__file__))
#: The compiled launcher (built by setup.py beside this module), and its pure twin.
COMPILED_LAUNCHER = os.path.join(_HERE, "fastgate-launcher")
PURE_LAUNCHER = os.path.join(_HERE, "_launcher.py")
_SUBREAPERS = sys.platform.startswith("linux")
_compiled_failed = False  # the compiled launcher could not be executed here (a noexec mount)
# What says the compiled launcher cannot be executed here at all (and the pure one should be).
_CANNOT_EXECUTE = frozenset({errno.EACCES, errno.EPERM, errno.ENOEXEC, errno.ENOENT, errno.ELIBBAD})
# After a stop's grace, how long a launcher may take to end what is left (it gives up after 2 s
# of SIGKILLs) before it is killed itself.
_LAUNCHER_BOUND = 5.0

Environment = Mapping[str, str] | Mapping[bytes, bytes]


def launcher_command() -> list[str] | None:
    """The command line that starts a launcher here: the compiled one wherever the build made
    it (it is a program, not a module: ``FASTGATE_NO_EXTENSIONS`` leaves it in use, and a
    missing one is an error under ``FASTGATE_REQUIRE_EXTENSIONS``), else the pure one; ``None``
    where processes are started directly (not Linux)."""
    if not _SUBREAPERS:
        return None
    if not _compiled_failed:
        if os.access(COMPILED_LAUNCHER, os.X_OK):
            return [COMPILED_LAUNCHER]
        if REQUIRE_EXTENSIONS:
            raise OSError(
                errno.ENOENT,
                "the compiled launcher is missing (FASTGATE_REQUIRE_EXTENSIONS is set)",
                COMPILED_LAUNCHER,
            )
    if not sys.executable:
        return None
    return [sys.executable, "-I", "-S", "-B", PURE_LAUNCHER]


def supervision() -> str:
    """How commands are supervised here: ``"compiled launcher"``, ``"pure launcher"`` or
    ``"process group"``."""
    try:
        command = launcher_command()
    except OSError:
        return "none (the compiled launcher is missing)"
    if command is None:
        return "process group"
    return "compiled launcher" if command[0] == COMPILED_LAUNCHER else "pure launcher"


def spawn(
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: Environment | None = None,
    stdin: int | None = DEVNULL,
    stdout: int | None = None,
    stderr: int | None = None,
    executable: str | None = None,
    grace: float = 1.0,
    plan: Plan | Sequence[Step] | None = None,
    pass_fds: Sequence[int] = (),
) -> Process:
    """Start ``argv`` (from a running event loop) and return at once, as ``Popen`` does; raise
    ``OSError`` when even its launcher cannot start (a missing ``cwd``), ``DescriptorsExhausted``
    (an ``OSError`` too) when the server is out of file descriptors; either way nothing of it
    is left (no pipe, no launcher). A command that cannot be executed (a missing program)
    makes ``started()``, ``exited()`` and ``wait()`` raise ``OSError`` once its launcher has
    ended.

    ``plan``: the steps the launcher makes to confine the command (``fastgate.sandbox`` makes
    them; see ``_plan.py``); a step that fails makes them raise ``PlanFailed`` naming it.
    ``pass_fds``: descriptors the plan names (the launcher gets them, never the command).

    ``stdin``/``stdout``/``stderr``: a descriptor, ``PIPE`` (then the ``Process`` holds the
    other end), ``DEVNULL``, ``STDOUT`` (stderr only) or ``None`` (this process's own).
    ``env``: the command's whole environment (``None``: this process's). ``executable``: the
    program to run, ``argv[0]`` being only its name (looked up in ``env``'s ``PATH`` when it
    holds no ``/``). ``grace``: when the command ends, or ``terminate_all()`` is called without
    one, how long the processes left have between SIGTERM and SIGKILL.

    Every ``Process`` must be awaited to its end (``wait()`` or ``terminate_all()``): that is
    when the processes are reaped and the launcher's descriptors released; the pipes asked
    with ``PIPE`` are the caller's to close.
    """
    args = [] if isinstance(argv, (str, bytes)) else list(argv)
    if not args or not all(isinstance(arg, str) for arg in args):
        raise TypeError("spawn: argv must be a non-empty list of strings")
    if not 0 <= grace < math.inf:
        raise ValueError(f"spawn: grace must be a finite number of seconds >= 0, got {grace!r}")
    program = executable if executable is not None else args[0]
    std = _Setup(stdin, stdout, stderr, cwd, env)
    try:
        return _spawn(args, program, std, grace, plan, pass_fds)
    except OSError as exc:
        # Out of descriptors, wherever it struck (a pipe, the plan's memfd, the launcher's
        # fork, the pidfd of its reply): said so, for the caller to retry; nothing was left.
        if exc.errno in OUT_OF_DESCRIPTORS and not isinstance(exc, DescriptorsExhausted):
            raise DescriptorsExhausted(exc.errno) from exc
        raise


def _spawn(
    args: list[str],
    program: str,
    std: _Setup,
    grace: float,
    plan: Plan | Sequence[Step] | None,
    pass_fds: Sequence[int],
) -> Process:
    launcher = launcher_command()
    if launcher is None:
        if plan is not None:
            raise OSError(errno.ENOSYS, "a plan needs the launcher (Linux)")
        return Process(std.popen(args, executable=program), -1, -1, grace, program, direct=True)
    if plan is not None and not isinstance(plan, Plan):
        plan = Plan(plan)
    # Every descriptor made here is closed on any failure: one that runs out of descriptors
    # halfway must not leave the ones made before it open.
    theirs: list[int] = []  # the launcher's copies: closed here once it has them
    ours: list[int] = []  # the Process's, unless this fails
    try:
        # The encoded plan in a descriptor the launcher reads to its end.
        plan_fd = memfd("fastgate-plan", plan.data) if plan is not None else -1
        if plan_fd >= 0:
            theirs.append(plan_fd)
        control_r, control_w = _pipe(theirs, ours)
        report_w, report_r = _pipe(theirs, ours, reading=False)
        extra = (plan_fd, *pass_fds) if plan_fd >= 0 else ()
        launched: subprocess.Popen[bytes] | _Forked | None = None
        if len(launcher) == 1 and not _compiled_failed:
            launched = _fork_launcher(
                launcher[0], program, args, grace, control_r, report_w, std, plan_fd, pass_fds
            )
            if launched is None:  # the compiled launcher cannot run here: the pure one
                launcher = launcher_command()
                assert launcher is not None
        if launched is None:
            launched = _start_launcher(
                launcher, [program, *args], grace, control_r, report_w, std, plan_fd, extra
            )
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        for fd in theirs:
            os.close(fd)
    process = Process(launched, control_w, report_r, grace, program, direct=False)
    process.plan = plan.steps if plan is not None else None
    return process


def _pipe(theirs: list[int], ours: list[int], *, reading: bool = True) -> tuple[int, int]:
    """A pipe whose end the launcher reads (``reading``) or writes goes to ``theirs``, the
    other to ``ours``: ``(theirs, ours)``."""
    read_end, write_end = os.pipe()
    mine, other = (write_end, read_end) if reading else (read_end, write_end)
    theirs.append(other)
    ours.append(mine)
    return other, mine


class PlanFailed(OSError):
    """A step of the launcher's plan failed: the command did not start. ``step``: the step
    (``None`` when unknown)."""

    def __init__(self, code: int, step: Step | None) -> None:
        what = step.describe() if step is not None else "a step"
        super().__init__(code, f"the sandbox could not {what}: {os.strerror(code)}")
        self.step = step


class _Setup(NamedTuple):
    """What the command starts with."""

    stdin: int | None
    stdout: int | None
    stderr: int | None
    cwd: str | None
    env: Environment | None

    def popen(
        self, argv: list[str], *, executable: str | None = None, pass_fds: tuple[int, ...] = ()
    ) -> subprocess.Popen[bytes]:
        # Popen only forks and execs (no wait): what asyncio's own subprocess support does.
        return subprocess.Popen(
            argv,
            executable=executable,
            stdin=self.stdin,
            stdout=self.stdout,
            stderr=self.stderr,
            cwd=self.cwd,
            env=self.env,
            pass_fds=pass_fds,
            close_fds=True,
            start_new_session=True,
        )


def _start_launcher(
    launcher: list[str],
    command: list[str],
    grace: float,
    control: int,
    report: int,
    std: _Setup,
    plan_fd: int = -1,
    extra: tuple[int, ...] = (),
) -> subprocess.Popen[bytes]:
    global _compiled_failed
    options = ["--plan", str(plan_fd)] if plan_fd >= 0 else []
    argv = [*launcher, *options, str(round(grace * 1000)), str(control), str(report), *command]
    try:
        return std.popen(argv, pass_fds=(control, report, *extra))
    except OSError as exc:
        if launcher[0] != COMPILED_LAUNCHER or exc.filename != COMPILED_LAUNCHER:
            raise  # the directory or a descriptor, not the launcher
        if exc.errno not in _CANNOT_EXECUTE:
            raise  # a passing failure (no memory, too many processes): not a reason to switch
    _compiled_failed = True  # e.g. installed on a noexec mount: the pure one from now on
    pure = launcher_command()
    assert pure is not None
    return _start_launcher(pure, command, grace, control, report, std, plan_fd, extra)


class _Forked:
    """A launcher the resident forked: not this process's child, so watched through the
    pidfd the resident sent, and its exit status is not known here (its reports say it)."""

    def __init__(self, pid: int, pidfd: int, stdio: list[IO[bytes] | None]) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.stdin, self.stdout, self.stderr = stdio

    def wait(self) -> int | None:
        return None


def _fork_launcher(
    program_of_launcher: str,
    program: str,
    args: list[str],
    grace: float,
    control: int,
    report: int,
    std: _Setup,
    plan_fd: int,
    pass_fds: Sequence[int],
) -> _Forked | None:
    """The command's launcher, forked by this process's resident launcher (started on first
    use; a new one when it has died); ``None`` when the compiled launcher cannot be executed
    here at all (the caller then starts the pure one)."""
    global _compiled_failed
    env = os.environb if std.env is None else std.env
    spec = encode_spec(round(grace * 1000), program, args, env, pass_fds)
    cwd = None
    if std.cwd is not None:
        cwd = os.open(std.cwd, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    files: list[IO[bytes] | None] = []
    ours: list[int] = []
    try:
        # Inside: a pipe that cannot be made (out of descriptors) must not leave ``cwd`` open.
        stdio, files, ours = _stdio(std)
        slots = [control, report, *stdio, cwd, plan_fd if plan_fd >= 0 else None]
        for attempt in (1, 2):
            try:
                pid, pidfd = resident(program_of_launcher).fork(spec, slots, pass_fds)
                break
            except ResidentGone:
                if attempt == 2:
                    raise
    except BaseException as exc:
        for file in files:
            if file is not None:
                file.close()
        cannot_execute = isinstance(exc, OSError) and exc.errno in _CANNOT_EXECUTE
        if cannot_execute and getattr(exc, "filename", None) == program_of_launcher:
            _compiled_failed = True  # e.g. installed on a noexec mount
            return None
        raise
    finally:
        for fd in ours:
            os.close(fd)
        if cwd is not None:
            os.close(cwd)
    return _Forked(pid, pidfd, files)


def _stdio(std: _Setup) -> tuple[list[int | None], list[IO[bytes] | None], list[int]]:
    """The command's stdin, stdout and stderr as descriptors to send (``None``: /dev/null),
    this side's ends of the pipes asked (as ``Popen`` gives them), and the descriptors made
    here to close once sent."""
    slots: list[int | None] = []
    files: list[IO[bytes] | None] = []
    ours: list[int] = []
    try:
        for number, asked in enumerate((std.stdin, std.stdout, std.stderr)):
            file: IO[bytes] | None = None
            slot: int | None
            if asked == PIPE:
                read_end, write_end = os.pipe()
                if number == 0:
                    slot, file = read_end, open(write_end, "wb")
                else:
                    slot, file = write_end, open(read_end, "rb")
                ours.append(slot)
            elif asked == DEVNULL:
                slot = None
            elif asked == STDOUT and number == 2:
                slot = slots[1]
            elif asked is None:
                slot = number if _is_open(number) else None
            else:
                slot = asked
            slots.append(slot)
            files.append(file)
    except BaseException:
        for fd in ours:
            os.close(fd)
        for file in files:
            if file is not None:
                file.close()
        raise
    return slots, files, ours


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


class Process:
    """One started command and everything it started.

    ``pid``: the command's (0 until its launcher reported it). ``returncode``: its status once
    it ended (an exit code, or minus the signal that killed it; ``None`` while it runs, or when
    it could not be told). ``start_error``: the ``OSError`` of a command that could not be
    started. ``left``: processes that could not be ended (the launcher may not signal them).
    ``bound``: the bound of the plan that ended it (``"processes"``, ``"tmp"``), or ``None``.
    ``stdin``, ``stdout``, ``stderr``: the ends of the pipes asked with ``PIPE``.
    """

    __slots__ = (
        "_buffer",
        "_control",
        "_deadline",
        "_direct",
        "_end_callbacks",
        "_ended",
        "_ending",
        "_exited",
        "_grace",
        "_group",
        "_loop",
        "_pid",
        "_pidfd",
        "_popen",
        "_program",
        "_reading",
        "_report",
        "_returncode",
        "_started",
        "bound",
        "left",
        "plan",
        "start_error",
        "stderr",
        "stdin",
        "stdout",
    )

    def __init__(
        self,
        popen: subprocess.Popen[bytes] | _Forked,
        control: int,
        report: int,
        grace: float,
        program: str,
        *,
        direct: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._popen = popen
        self._control = control
        self._report = report
        self._grace = grace
        self._direct = direct
        self._program = program
        self._buffer = b""
        self._pidfd = -1
        self._ending: asyncio.TimerHandle | None = None  # without a launcher: the KILL
        self._deadline: asyncio.TimerHandle | None = None  # the launcher's own KILL
        self._started: asyncio.Future[None] = loop.create_future()
        self._exited: asyncio.Future[None] = loop.create_future()  # the command itself
        self._ended: asyncio.Future[None] = loop.create_future()  # and all it started
        self._end_callbacks: list[Callable[[], object]] = []
        self._pid = popen.pid if direct else 0
        self._group = 0  # the command's first process, reported before its exec
        self._returncode: int | None = None
        self._reading = False  # the reports are read as they come (else when asked, and at the end)
        self.start_error: OSError | None = None
        self.left = 0
        self.bound: str | None = None
        self.plan: tuple[Step, ...] | None = None
        self.stdin: IO[bytes] | None = popen.stdin
        self.stdout: IO[bytes] | None = popen.stdout
        self.stderr: IO[bytes] | None = popen.stderr
        if direct:
            self._started.set_result(None)
        else:
            os.set_blocking(control, False)
            os.set_blocking(report, False)
        self._watch_end()

    # The launcher's reports are read as they come only once someone waits for the start or
    # the exit; otherwise when the pid or the status is asked, and at the end. A command
    # supervised to its end then costs the loop one wake-up (the end), not one per report.
    @property
    def pid(self) -> int:
        self._catch_up()
        return self._pid

    @property
    def returncode(self) -> int | None:
        self._catch_up()
        return self._returncode

    def _catch_up(self) -> None:
        if not self._reading and self._report >= 0:
            self._read_report()

    def _watch_reports(self) -> None:
        if not self._reading and self._report >= 0:
            self._reading = True
            self._loop.add_reader(self._report, self._read_report)

    @property
    def supervisor_pid(self) -> int:
        """The launcher's pid (the command's own where there is none)."""
        return self._popen.pid

    def done(self) -> bool:
        """Whether every process is gone and reaped."""
        return self._ended.done()

    def has_exited(self) -> bool:
        """Whether the command itself has ended (or could not start)."""
        self._catch_up()
        return self._exited.done()

    def add_end_callback(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` in the loop's thread as soon as every process is gone (at once
        when they are): the moment ``wait()`` returns, without its hops through the loop."""
        if self._ended.done():
            callback()
        else:
            self._end_callbacks.append(callback)

    async def started(self) -> int:
        """Wait until the command runs; its pid. ``OSError`` when it could not be started."""
        self._watch_reports()
        await asyncio.shield(self._started)
        self._raise_start_error()
        return self._pid

    async def exited(self) -> int | None:
        """Wait until the command itself ended (what it started may still be ending); its
        status. ``OSError`` when it could not be started."""
        self._watch_reports()
        await asyncio.shield(self._exited)
        self._raise_start_error()
        return self._returncode

    async def wait(self) -> int | None:
        """Wait until the command and everything it started are gone; its status. ``OSError``
        when it could not be started."""
        await asyncio.shield(self._ended)
        self._raise_start_error()
        return self._returncode

    def _raise_start_error(self) -> None:
        if self.start_error is not None:
            raise self.start_error

    async def terminate_all(self, grace: float | None = None) -> None:
        """End every process: SIGTERM, then SIGKILL after ``grace`` (default: the spawn's;
        ``0``: SIGKILL at once), and wait until all are gone. A cancellation of the caller
        waits for that too, then propagates."""
        if grace is None:
            grace = self._grace
        elif not 0 <= grace < math.inf:
            raise ValueError(f"terminate_all: grace must be finite and >= 0, got {grace!r}")
        if not self._ended.done():
            if self._direct:
                self._end_group(grace)
            else:
                self._ask_launcher(grace)
        cancelled = False
        while not self._ended.done():
            try:
                await asyncio.shield(self._ended)
            except asyncio.CancelledError:
                cancelled = True  # bounded: see _ask_launcher
        if cancelled:
            raise asyncio.CancelledError

    def _ask_launcher(self, grace: float) -> None:
        """Ask the launcher to end everything with ``grace``, and make sure it can: it is
        continued (a command may have stopped it: same user), and should it still not be done
        ``_LAUNCHER_BOUND`` seconds after the grace, it is killed (its command dies with it,
        its command's group is ended by ``_on_end``)."""
        try:
            os.write(self._control, f"T {round(grace * 1000)}\n".encode())
        except OSError:
            pass  # the launcher is ending already
        self._signal_launcher(signal.SIGCONT)
        if self._deadline is None:
            self._deadline = self._loop.call_later(
                grace + _LAUNCHER_BOUND, self._signal_launcher, signal.SIGKILL
            )

    def _signal_launcher(self, sig: int) -> None:
        """Through its pidfd while it is watched (a launcher the resident forked is not this
        process's child: once reaped there, its pid may be another process's)."""
        try:
            if self._pidfd >= 0:
                signal.pidfd_send_signal(self._pidfd, sig)
            elif not self._ended.done():
                os.kill(self._popen.pid, sig)  # our child, not reaped yet
        except OSError:
            pass  # it has exited

    # -- the launcher's reports ---------------------------------------------------------------

    def _read_report(self) -> None:
        while True:
            try:
                chunk = os.read(self._report, 4096)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self._loop.remove_reader(self._report)
                break
            self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._on_line(line)

    def _on_line(self, line: bytes) -> None:
        kind, _, value = line.partition(b" ")
        if kind == b"B":
            self.bound = self.bound or value.decode("ascii", "replace")
            return
        if kind == b"F":
            self._on_plan_failure(value)
            return
        try:
            number = int(value)
        except ValueError:
            return
        if kind == b"P":
            self._group = number
        elif kind == b"S":
            self._pid = number
            _resolve(self._started)
        elif kind == b"E" and self.start_error is None:
            self.start_error = OSError(number, os.strerror(number), self._program)
            _resolve(self._started)
        elif kind == b"X":
            self._returncode = number
            _resolve(self._exited)

        elif kind == b"L":
            self.left = number

    def _on_plan_failure(self, value: bytes) -> None:
        try:
            index, code = (int(part) for part in value.split())
        except ValueError:
            return
        if self.start_error is None:
            plan = self.plan or ()
            step = plan[index] if 0 <= index < len(plan) else None
            self.start_error = PlanFailed(code, step)
        _resolve(self._started)

    # -- the end --------------------------------------------------------------------------------

    def _watch_end(self) -> None:
        """The launcher's exit (the command's, without one): a pidfd where the OS has them,
        else a thread waiting."""
        if isinstance(self._popen, _Forked):
            self._pidfd = self._popen.pidfd
            self._loop.add_reader(self._pidfd, self._on_end)
            return
        try:
            self._pidfd = os.pidfd_open(self._popen.pid)
        except (AttributeError, OSError):
            waiting = self._loop.run_in_executor(None, self._popen.wait)
            waiting.add_done_callback(lambda _: self._on_end())
            return
        self._loop.add_reader(self._pidfd, self._on_end)

    def _on_end(self) -> None:
        if self._pidfd >= 0:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        status = self._popen.wait()  # it has exited: this only collects it (None: forked)
        for timer in (self._ending, self._deadline):
            if timer is not None:
                timer.cancel()
        if self._direct:
            self._returncode = status
            _signal_group(self._pid, signal.SIGKILL)  # what is left of its group
        else:
            self._read_report()  # what it wrote before it exited
            self._loop.remove_reader(self._report)
            os.close(self._report)
            os.close(self._control)
            self._report = self._control = -1
            group = self._pid or self._group  # the command's, else its first process's
            killed = status != 0 and self.start_error is None  # None: not known here
            if killed and not self._exited.done() and group:
                # The launcher itself was killed (SIGKILL from outside), maybe before it could
                # report the start: its command died with it; what is left of the command's
                # group is ended here.
                _signal_group(group, signal.SIGKILL)
        if not self._started.done():
            self.start_error = OSError(
                errno.EIO, f"its launcher ended before the command started ({status})"
            )
        _resolve(self._started)
        _resolve(self._exited)
        _resolve(self._ended)
        callbacks, self._end_callbacks = self._end_callbacks, []
        for callback in callbacks:
            callback()

    def _end_group(self, grace: float) -> None:
        """Without a launcher: the command's process group, TERM then KILL after ``grace``
        (the KILL is called off when the command has ended: its group may be gone)."""
        if grace == 0:
            _signal_group(self.pid, signal.SIGKILL)
            return
        _signal_group(self.pid, signal.SIGTERM)
        if self._ending is None:
            self._ending = self._loop.call_later(grace, _signal_group, self.pid, signal.SIGKILL)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        pass  # the group is empty
