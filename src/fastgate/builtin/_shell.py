"""The shell seam (SPEC §16): ``Shell``, ``ShellResult`` and ``LocalShell``.

``LocalShell`` runs ``bash -c`` in a session of its own, stdin from ``/dev/null``, stdout and
stderr into one pipe it reads without blocking the event loop. When the call ends (the command
exited, its timeout passed, or the caller cancelled), every process the command started is
ended: the members of its process group, its descendants, and every process still carrying the
run's marker variable (how a grandchild that called ``setsid`` and lost its parent is found).
TERM first, KILL after ``kill_grace``; then the output pipe is read for at most ``read_grace``
more, so a process that could not be ended and holds the pipe cannot hold the call.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import shutil
import signal as signals
import subprocess
import time
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import psutil

from fastgate.builtin._output import OutputBuffer
from fastgate.cancel import CancelToken

#: Substrings (any case) that mark an environment variable as a secret.
DEFAULT_ENV_DENY: tuple[str, ...] = ("KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL", "AUTH")
#: Set in each command's environment (inherited by whatever it starts) to find its processes.
MARKER = "FASTGATE_SHELL_RUN"
_MARKER_BYTES = MARKER.encode()
_READ_SIZE = 1 << 16
_EXIT_DRAIN = 0.2  # after the command exits, how long the rest of its output may take
_PROC = os.path.isfile("/proc/self/stat")  # Linux: processes are read from /proc directly
_PROBE_RANGE = 256  # up to this many new pids are looked up one by one rather than listed
_KILL_ROUNDS = 50  # searches for processes left (each followed by a KILL and 10 ms)
_runs = itertools.count(1)


@dataclass(frozen=True, slots=True)
class ShellResult:
    """``exit_code``: the command's status (killed by signal ``n``: ``128 + n``, as a shell
    reports it), ``None`` when it was stopped before it exited. ``output``: stdout and stderr as
    they interleaved, cut head and tail to ``max_output`` characters (``truncated``)."""

    exit_code: int | None
    output: str
    truncated: bool
    timed_out: bool


@runtime_checkable
class Shell(Protocol):
    """What ``bash`` and AutoVerify run commands through; a server's sandbox passes its own
    (``ExecutionContext(shell=...)``). ``env``: variables to set on top of the shell's own
    environment. ``run`` raises ``OSError`` when the command cannot be started at all; a
    command that ran and failed is a result."""

    async def run(
        self,
        command: str,
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- the seam's signature (SPEC §16)
        max_output: int = 30_000,
        signal: CancelToken | None = None,
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
        if not kill_grace >= 0 or not read_grace >= 0:
            raise ValueError("kill_grace and read_grace must be >= 0 seconds")
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
            filtered.pop(_MARKER_BYTES, None)
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
    ) -> ShellResult:
        if type(command) is not str:
            raise TypeError(f"command: expected str, got {type(command).__name__}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout: expected a positive number of seconds, got {timeout!r}")
        environment = self._environment(env)
        marker = f"{os.getpid()}-{next(_runs)}-{time.monotonic_ns()}"
        environment[_MARKER_BYTES] = marker.encode()
        run = _Run(asyncio.get_running_loop(), max_output, marker)
        read_fd, write_fd = os.pipe()
        try:
            # Popen only spawns (no wait): what asyncio's own subprocess support does too.
            proc = subprocess.Popen(  # noqa: ASYNC220
                [self.executable, "-c", command],  # $0 as given: errors say "bash: ..."
                executable=self._program,
                stdin=subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,
                cwd=cwd,
                env=environment,
                start_new_session=True,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return await run.supervise(proc, read_fd, timeout, signal, self)


class _Run:
    """One command, from its start to the end of every process it started."""

    __slots__ = (
        "eof",
        "exit_code",
        "loop",
        "marker",
        "max_output",
        "output",
        "pid",
        "poller",
        "proc",
        "read_fd",
        "wake",
        "watch_fd",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, max_output: int, marker: str) -> None:
        self.loop = loop
        self.max_output = max_output
        self.marker = marker
        self.output = OutputBuffer(max(max_output, 1))
        self.eof: asyncio.Future[None] = loop.create_future()
        self.wake: asyncio.Future[str] = loop.create_future()  # "exited", "timeout", "cancel"
        self.exit_code: int | None = None
        self.read_fd = -1
        self.watch_fd = -1
        self.pid = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.poller: asyncio.Task[None] | None = None  # where no pidfd can watch the exit

    async def supervise(
        self,
        proc: subprocess.Popen[bytes],
        read_fd: int,
        seconds: float | None,
        signal: CancelToken | None,
        shell: LocalShell,
    ) -> ShellResult:
        loop = self.loop
        self.proc, self.pid, self.read_fd = proc, proc.pid, read_fd
        timer: asyncio.TimerHandle | None = None
        link = None
        ended = False
        try:
            os.set_blocking(read_fd, False)
            loop.add_reader(read_fd, self._readable)
            self._watch_exit()
            if seconds is not None:
                timer = loop.call_later(seconds, self._wake, "timeout")
            if signal is not None:
                link = signal.add_callback(self._on_signal)
                if signal.cancelled:
                    self._wake("cancel")
            reason = await self.wake
            if reason != "exited" or not await self._settled():
                await self._end_all(shell.kill_grace)  # stopped, or it left processes behind
            await self._drain(shell.read_grace)
            ended = True
        finally:
            if timer is not None:
                timer.cancel()
            if link is not None:
                link.remove()
            if not ended:  # cancelled (or failed): end everything before the call is over
                await _uninterrupted(self._end_all(shell.kill_grace, then_drain=shell.read_grace))
            self._close()
        output, truncated = self.output.render(self.max_output)
        if reason == "exited":
            return ShellResult(self.exit_code, output, truncated, False)
        return ShellResult(None, output, truncated, reason == "timeout")

    # -- waiting ---------------------------------------------------------------------------

    def _wake(self, reason: str) -> None:
        if not self.wake.done():
            self.wake.set_result(reason)

    def _on_signal(self, _: CancelToken) -> None:
        self.loop.call_soon_threadsafe(self._wake, "cancel")  # maybe from another thread

    def _watch_exit(self) -> None:
        """Wake on the command's exit: a pidfd where the OS has them, else polling."""
        try:
            self.watch_fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self.poller = self.loop.create_task(self._poll_exit())
            return
        self.loop.add_reader(self.watch_fd, self._exited)

    def _exited(self) -> None:
        self.loop.remove_reader(self.watch_fd)
        self._reap()

    async def _poll_exit(self) -> None:
        delay = 0.002
        while self.exit_code is None and not self._reap():
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _reap(self) -> bool:
        """Collect the command's status once it exited (it is our child: no zombie is left)."""
        proc = self.proc
        assert proc is not None
        code = proc.poll()
        if code is None:
            return False
        self.exit_code = 128 - code if code < 0 else code
        self._wake("exited")
        return True

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

    async def _settled(self) -> bool:
        """After the exit: whether nothing the command started is left (no live member of its
        group, and the pipe reached its end)."""
        if self._find():
            return False
        if self.eof.done():
            return True
        try:
            await asyncio.wait_for(asyncio.shield(self.eof), _EXIT_DRAIN)
        except TimeoutError:
            return False  # a process outside the group holds the pipe
        return True

    async def _drain(self, grace: float) -> None:
        """Read what is left, for at most ``grace`` seconds. A process still holding the pipe
        by now is found by the pipe itself (it escaped every other search) and killed."""
        if self.eof.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self.eof), min(_EXIT_DRAIN, grace))
            return
        except TimeoutError:
            pass
        holders = self._pipe_holders()
        self._signal_all(signals.SIGKILL, holders, group=False)
        deadline = time.monotonic() + grace
        try:
            await asyncio.wait_for(asyncio.shield(self.eof), grace)
        except TimeoutError:
            pass  # held open by a process that could not be ended: stop reading
        while time.monotonic() < deadline:  # the pipe closes as a process exits, before it is gone
            if not _any_alive(holders):
                break
            await asyncio.sleep(0.005)

    # -- ending ----------------------------------------------------------------------------

    async def _end_all(self, grace: float, then_drain: float | None = None) -> None:
        """TERM every process found, KILL what is left after ``grace``, then search and KILL
        again until a search finds nothing alive (a process forked between a search and its
        signal is found by the next search: it carries the marker). ``then_drain``: also
        read what is left of the output (``_drain``) for that long."""
        victims = self._find()
        self._signal_all(signals.SIGTERM, victims)
        deadline = time.monotonic() + grace
        delay = 0.002
        while time.monotonic() < deadline and _any_alive(victims):
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        for _ in range(_KILL_ROUNDS):
            found = self._find()
            if not found:
                break
            self._signal_all(signals.SIGKILL, found)
            await asyncio.sleep(0.01)
        self._reap()
        if then_drain is not None:
            await self._drain(then_drain)

    def _signal_all(self, sig: signals.Signals, found: list[int], group: bool = True) -> None:
        if group:
            try:
                os.killpg(self.pid, sig)
            except OSError:
                pass  # the group is empty
        for pid in found:
            try:
                os.kill(pid, sig)  # found a moment ago: pids are reused only after a wrap
            except OSError:
                pass

    def _find(self) -> list[int]:
        """Every live process the command started (zombies are dead: left out)."""
        if _PROC:
            return self._find_in_proc()
        return self._find_with_psutil()

    def _find_in_proc(self) -> list[int]:
        """Linux: only processes newer than the command can be its own (unless pids wrapped
        around since: then all are looked at), and most are told apart by their stat line
        alone: the command's session, its group, a parent or a session already found to be
        the command's. Only a process in a session begun since the command started (one that
        called ``setsid``, or lives in such a session) has its environment read for the
        marker. One file read per process on the common path."""
        me, root = os.getpid(), self.pid
        last = _last_pid()
        every = last is None or last < root
        if last is None or every:
            pids: Iterable[int] = sorted(int(n) for n in os.listdir("/proc") if n.isdigit())
        elif last - root <= _PROBE_RANGE:  # few pids handed out since: look each one up
            pids = range(root, last + 1)
        else:
            pids = sorted(int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) >= root)
        marker = b"\x00" + _MARKER_BYTES + b"=" + self.marker.encode() + b"\x00"
        found: list[int] = []
        family = {root}
        for pid in pids:
            if pid == me:
                continue
            try:
                with open(f"/proc/{pid}/stat", "rb") as file:
                    stat = file.read()
                state, ppid, group, session = stat[stat.rindex(b")") + 2 :].split(b" ", 4)[:4]
                session_id = int(session)
                ours = (
                    pid == root
                    or session_id == root
                    or int(group) == root
                    or int(ppid) in family
                    or session_id in family
                )
                if not ours and (every or session_id >= root):
                    with open(f"/proc/{pid}/environ", "rb") as file:
                        ours = marker in b"\x00" + file.read()
            except (OSError, ValueError):
                continue  # gone meanwhile, or not ours to read
            if ours:
                family.add(pid)
                if state != b"Z":
                    found.append(pid)
        return found

    def _find_with_psutil(self) -> list[int]:
        """Elsewhere: the command's descendants, its group's members and every process
        carrying its marker, over every process."""
        found: dict[int, psutil.Process] = {}
        try:
            root = psutil.Process(self.pid)
            found[root.pid] = root
            for child in root.children(recursive=True):
                found[child.pid] = child
        except psutil.Error:
            pass
        me = os.getpid()
        for process in psutil.process_iter():
            pid = process.pid
            if pid in found or pid == me:
                continue
            try:
                if os.getpgid(pid) == self.pid or process.environ().get(MARKER) == self.marker:
                    found[pid] = process
            except (psutil.Error, OSError):
                continue
        return [pid for pid in found if _alive(pid)]

    def _pipe_holders(self) -> list[int]:
        """The processes holding the output pipe (Linux: their open files are in /proc)."""
        if self.read_fd < 0 or not os.path.isdir("/proc/self/fd"):
            return []
        target = f"pipe:[{os.fstat(self.read_fd).st_ino}]"
        me = os.getpid()
        holders = []
        for pid in psutil.pids():
            if pid == me:
                continue
            try:
                descriptors = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in descriptors:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        holders.append(pid)
                        break
                except OSError:
                    continue
        return holders

    def _close(self) -> None:
        loop = self.loop
        if self.read_fd >= 0:
            loop.remove_reader(self.read_fd)
            os.close(self.read_fd)
            self.read_fd = -1
        if self.watch_fd >= 0:
            loop.remove_reader(self.watch_fd)
            os.close(self.watch_fd)
            self.watch_fd = -1
        if self.poller is not None:
            self.poller.cancel()


def _environ_bytes() -> Mapping[bytes, bytes]:
    """The server's environment as bytes: CPython's own mapping behind ``os.environ`` where it
    holds bytes (POSIX), without a copy; else ``os.environb``."""
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict) and all(type(key) is bytes for key in itertools.islice(data, 1)):
        return data
    return os.environb


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _any_alive(pids: list[int]) -> bool:
    return any(_alive(pid) for pid in pids)


def _last_pid() -> int | None:
    """The last pid the kernel handed out (Linux), to tell which processes are newer."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as file:
            return int(file.read())
    except (OSError, ValueError):
        return None


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
