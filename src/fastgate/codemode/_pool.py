"""Worker processes: how one is started, and the warm pool that starts them ahead.

A worker is started with everything a program must not have already gone: no site-packages
(``-I -S``), an environment of a few fixed variables, a fresh temporary directory as its cwd,
no file descriptor but its channel (as its stdin) and its output, a session (and process
group) of its own. It confines itself before it says ``ready``, so a warm worker is ready to
run a program at once. It runs under ``fastgate.processes``' launcher, its parent and the reaper
of anything it might start: a worker ends with all its descendants.

Workers are not tied to the event loop of a run while they wait: their processes belong to one
loop of this module's own, in a thread (``_Supervisor``), and a run binds a worker's channel
and output to its loop.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import weakref
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from fastgate.processes import Op, Process, Step, launcher_command, spawn

log = logging.getLogger("fastgate.codemode")

WORKER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker.py")
_MAX_FILES = 64
# One line of the tool channel (a call and its arguments) at most: the server decodes a line
# whole, at tens of times its size in objects, so one line must stay small; a call's arguments
# are no larger than a request the gateway takes (its 4 MiB body limit). The worker refuses a
# larger call (INVALID_ARGS); the server stops a program that writes one anyway.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
_MAX_FILE_BYTES = 64 * 1024 * 1024  # each file of the scratch directory (RLIMIT_FSIZE)
# The whole scratch directory: past it the launcher (which reads it every 100 ms) ends the
# program, whose result says so. The disk, or the memory of a /tmp in RAM, is the host's: a
# program writes gigabytes a second, and a session runs several at once.
MAX_SCRATCH_BYTES = 1 << 30
# Variables a program sees; nothing of the server's environment but the time zone.
_ENV_PASSED = ("TZ",)
_T = TypeVar("_T")


def _interpreter() -> str:
    """The base interpreter, never a virtual environment's (whose packages a program must not
    see)."""
    base = getattr(sys, "_base_executable", None)
    if base and os.path.exists(base):
        return str(base)
    return sys.executable


@dataclass(frozen=True)
class WorkerSpec:
    """How every worker of one ``CodeMode`` is started and confined."""

    memory_mb: int
    cpu_seconds: int
    landlock_abi: int  # 0: no Landlock layer
    seccomp_arch: str | None  # None: no seccomp layer

    def config(self, tmp: str, fd: int) -> dict[str, Any]:
        memory = self.memory_mb * 1024 * 1024
        return {
            "fd": fd,
            "tmp": tmp,
            "memory_bytes": memory,
            "cpu_seconds": self.cpu_seconds,
            "max_files": _MAX_FILES,
            "max_file_bytes": min(memory, _MAX_FILE_BYTES),
            "landlock": self.landlock_abi,
            "seccomp": self.seccomp_arch,
            "max_message": MAX_MESSAGE_BYTES,
        }


def _environment(tmp: str) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": tmp,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "MALLOC_ARENA_MAX": "2",  # each thread's malloc arena would reserve address space
    }
    for name in _ENV_PASSED:
        if name in os.environ:
            env[name] = os.environ[name]
    return env


class _Supervisor:
    """The event loop every worker's ``Process`` belongs to, run by a daemon thread of its own.

    ``spawn`` binds a process to the running loop, but a worker is started ahead, from a
    thread, then taken by a run on whichever loop it runs, or stopped from synchronous code
    (the pool closed or collected): its process lives here, and is reached from elsewhere
    through thread-safe calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._owner = 0  # the pid of the process that started the thread (a fork has none)
        self._pending: set[concurrent.futures.Future[Any]] = set()

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._owner != os.getpid():
                loop = asyncio.SelectorEventLoop()
                name = "fastgate-codemode-processes"
                thread = threading.Thread(target=loop.run_forever, name=name, daemon=True)
                thread.start()
                self._loop, self._thread, self._owner = loop, thread, os.getpid()
            return self._loop

    def here(self) -> bool:
        """Whether this is its thread (where nothing may wait for it: a pool collected there)."""
        return threading.current_thread() is self._thread

    def call(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Run ``work`` there and wait for its result (from any thread but that one)."""
        return asyncio.run_coroutine_threadsafe(work, self.loop()).result()

    async def wait(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Run ``work`` there, awaited from the caller's loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.loop()))

    def soon(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` there, not waiting for it (held until it is done)."""
        future = asyncio.run_coroutine_threadsafe(work, self.loop())
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)


_SUPERVISOR = _Supervisor()


async def _start(
    argv: list[str], channel: int, output: int, tmp: str
) -> tuple[Process, tuple[int, int] | None]:
    """A worker's process, running (``OSError`` when the interpreter cannot be started), and
    its pidfds (``_pidfds``)."""
    # The launcher bounds the scratch directory (where there is one: Linux).
    plan = [Step(Op.WATCH_TREE, (tmp, MAX_SCRATCH_BYTES))] if launcher_command() else None
    process = spawn(
        argv,
        stdin=channel,
        stdout=output,
        stderr=output,
        cwd=tmp,
        env=_environment(tmp),
        grace=0,
        plan=plan,
    )
    try:
        await process.started()
    except BaseException:
        await process.terminate_all(0)
        raise
    return process, _pidfds(process)


def _pidfds(process: Process) -> tuple[int, int] | None:
    """A pidfd of the worker (to kill it at once, without a word to its launcher) and one of
    its launcher (readable when the launcher exits: the worker and all it started are gone and
    reaped then); ``None`` where the system has no pidfds. Made on the supervisor's loop, which
    alone reaps the launcher: its pid cannot be another process's yet."""
    try:
        launcher = os.pidfd_open(process.supervisor_pid)
    except (AttributeError, OSError):
        return None
    try:
        worker = os.pidfd_open(process.pid)
    except OSError:
        os.close(launcher)
        return None
    if process.pid != process.supervisor_pid and _parent(process.pid) != process.supervisor_pid:
        os.close(worker)  # it has already been reaped: the pid may name another process now
        os.close(launcher)
        return None
    return worker, launcher


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            line = stat.read(512)
        return int(line[line.rindex(b")") + 2 :].split(b" ", 2)[1])
    except (OSError, ValueError, IndexError):
        return None


class Worker:
    """One started worker: its process, its channel socket and its output pipe (stdout and
    stderr together)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.tmp = tempfile.mkdtemp(prefix="fastgate-code-")
        ours, theirs = socket.socketpair()
        out_read, out_write = os.pipe()
        try:
            argv = [_interpreter(), "-I", "-S", "-B", "-X", "utf8", WORKER_PATH]
            # The channel is its stdin: the launcher hands a command its stdio, nothing else.
            argv.append(_json(spec.config(self.tmp, 0)))
            started = _start(argv, theirs.fileno(), out_write, self.tmp)
            self.process, pidfds = _SUPERVISOR.call(started)
        except BaseException:
            ours.close()
            os.close(out_read)
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        finally:
            theirs.close()
            os.close(out_write)
        self.pid = self.process.pid
        self.pidfd: int | None = pidfds[0] if pidfds is not None else None
        self.end_fd: int | None = pidfds[1] if pidfds is not None else None
        self.channel = ours
        self.output = out_read
        # The listener of its filter's thread notifications, once its ready message brought it
        # (``_run``): the server's to answer, closed with the rest.
        self.listener: int | None = None
        self._closed = False

    def confined(self) -> bool:
        """Whether it has reported ``ready`` (confined, waiting for a program); not consumed."""
        try:
            return bool(self.channel.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except OSError:  # nothing yet (BlockingIOError), or closed
            return False

    def alive(self) -> bool:
        return self.process.returncode is None and not self.process.done()

    def kill(self) -> None:
        """SIGKILL the worker, without waiting: its launcher then kills whatever it started
        (a pid of those, once reaped, could be another process's: the launcher knows them)."""
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it has exited
        elif not self.process.done():
            _SUPERVISOR.soon(self.process.terminate_all(0))

    async def ended(self) -> int | None:
        """Wait, on the caller's loop, until the worker and everything it started are gone
        and reaped; its status."""
        return await _SUPERVISOR.wait(self.process.wait())

    def release(self) -> None:
        """Close our ends and remove its temporary directory (once it has been reaped)."""
        if self._closed:
            return
        self._closed = True
        self.channel.close()
        for fd in (self.output, self.pidfd, self.end_fd, self.listener):
            if fd is not None:
                os.close(fd)
        remove_scratch(self.tmp)

    def release_when_ended(self) -> None:
        """``release()`` once every process is gone: now, or when its launcher has ended
        them (whatever becomes of the loop of the run that used it)."""
        if self.process.done():
            self.release()
        else:
            _SUPERVISOR.soon(self._release_at_end())

    async def _release_at_end(self) -> None:
        await self.process.wait()
        self.release()

    def destroy(self) -> None:
        """Kill, reap and release, blocking (the worker dies at once: SIGKILL); on the
        supervisor's own thread, without waiting."""
        if _SUPERVISOR.here():
            self.kill()
            self.release_when_ended()
            return
        if not self.process.done():
            _SUPERVISOR.call(self.process.terminate_all(0))
        self.release()


def remove_scratch(path: str) -> None:
    """Remove a worker's scratch directory, whatever modes its program gave what it made.

    A directory made without read or write permission for its owner (``os.mkdir(d, 0o300)``:
    the program may not chmod, but ``mkdir`` takes a mode) cannot be listed or emptied by a
    server that is not root, and would be left in the temporary directory for good, holding
    what the program wrote. Every directory of the tree (never a symbolic link: each is checked
    with ``lstat``) is given back its owner's rights first. Called once the worker and all it
    started are reaped: nothing changes the tree meanwhile."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    pending = [path]
    while pending:
        directory = pending.pop()
        try:
            if not stat.S_ISDIR(os.lstat(directory).st_mode):
                continue
            os.chmod(directory, 0o700)
            entries = os.listdir(directory)
        except OSError:
            continue
        pending.extend(os.path.join(directory, entry) for entry in entries)
    shutil.rmtree(path, ignore_errors=True)


def _json(value: Any) -> str:
    import json

    return json.dumps(value, separators=(",", ":"))


class Pool:
    """Keeps ``size`` idle workers started ahead. ``take()`` hands one out (or starts one when
    none is idle); each runs one program and exits, and ``refill()`` replaces it."""

    def __init__(self, spec: WorkerSpec, size: int) -> None:
        self.spec = spec
        self.size = size
        self._idle: collections.deque[Worker] = collections.deque()
        self._lock = threading.Lock()
        self._closed = False
        self._refilling = False
        self._thread: threading.Thread | None = None
        # Idle workers die with the pool (also when it is collected, or at interpreter exit).
        self._finalizer = weakref.finalize(self, _destroy_all, self._idle, self._lock)

    @property
    def closed(self) -> bool:
        return self._closed

    def idle(self) -> int:
        return len(self._idle)

    def confined_idle(self) -> int:
        with self._lock:
            return sum(1 for w in self._idle if w.confined())

    def idle_pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._idle]

    def take_idle(self) -> Worker | None:
        """An idle worker that is still alive, or ``None``."""
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError("code mode has been closed")
                worker = self._idle.popleft() if self._idle else None
            if worker is None or worker.alive():
                return worker
            worker.destroy()  # died while idle (killed from outside): try the next

    async def start(self) -> Worker:
        """A new worker, started in a thread of its own (the event loop does not wait for the
        exec); one that arrives after the caller was cancelled is stopped."""
        loop = asyncio.get_running_loop()
        started: asyncio.Future[Worker] = loop.create_future()

        def deliver(worker: Worker | None, error: BaseException | None) -> None:
            if started.done():  # cannot happen while shielded; never leak a process
                if worker is not None:
                    worker.destroy()
            elif worker is not None:
                started.set_result(worker)
            else:
                started.set_exception(error or RuntimeError("the worker did not start"))

        def start_in_thread() -> None:
            worker, error = None, None
            try:
                worker = Worker(self.spec)
            except BaseException as exc:
                error = exc
            try:
                loop.call_soon_threadsafe(deliver, worker, error)
            except RuntimeError:  # the loop is closed: nobody will take it
                if worker is not None:
                    worker.destroy()

        threading.Thread(target=start_in_thread, name="fastgate-codemode-start").start()
        try:
            return await asyncio.shield(started)
        except asyncio.CancelledError:
            started.add_done_callback(_destroy_unclaimed)
            raise

    def refill_soon(self) -> None:
        """``refill()`` in a thread of its own (one at a time): starting a process blocks for
        milliseconds (the exec of the interpreter), which the event loop must not wait for."""
        with self._lock:
            if self._refilling or self._closed or len(self._idle) >= self.size:
                return
            self._refilling = True
            thread = threading.Thread(target=self._refill_in_thread, name="fastgate-codemode-pool")
            self._thread = thread
        thread.start()

    def _refill_in_thread(self) -> None:
        try:
            self.refill()
        finally:
            with self._lock:
                self._refilling = False

    def refill(self) -> None:
        """Start workers until ``size`` are idle."""
        while True:
            with self._lock:
                if self._closed or len(self._idle) >= self.size:
                    return
            try:
                worker = Worker(self.spec)
            except OSError as exc:
                log.warning("code mode: could not start a warm worker: %s", exc)
                return
            with self._lock:
                closed = self.closed  # closed meanwhile (a property: read afresh)
                if not closed:
                    self._idle.append(worker)
            if closed:
                worker.destroy()
                return

    def close(self) -> None:
        """Stop every idle worker; later ``take()`` calls fail. Idempotent."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()  # a worker it is starting now is stopped by it, before we return
        self._finalizer()


def _destroy_unclaimed(started: asyncio.Future[Worker]) -> None:
    if not started.cancelled() and started.exception() is None:
        started.result().destroy()


def _destroy_all(idle: collections.deque[Worker], lock: threading.Lock) -> None:
    with lock:
        workers = list(idle)
        idle.clear()
    for worker in workers:
        worker.destroy()
