"""The launcher: the parent of one command, and the reaper of every process it starts (Linux).

Run as ``python -I -S -B _launcher.py GRACE_MS CONTROL_FD REPORT_FD EXECUTABLE ARG0 [ARG...]``
(standard library only: it never imports fastgate), or as its compiled twin
``fastgate-launcher`` (``_launcher.c``, the same program, started in about a millisecond).

It makes itself a child subreaper and not dumpable (no process of its user may ptrace it or
read its ``/proc`` files), then forks the command (in a session of its own, killed
should the launcher die) and execs it with the launcher's own environment. Every process the
command starts stays a descendant of the launcher however it detaches (``setsid``, a double
fork, ``nohup ... &``): an orphan is re-parented to the nearest subreaper, this one, never to
init. When the command exits, or the parent asks, every descendant gets SIGTERM (and SIGCONT,
so a stopped one sees it), then SIGKILL after the grace, searched again until none is left
(a process forked meanwhile is re-parented here when its parent dies), and each is reaped
before the launcher exits. Descendants are found through each process's parent in
``/proc/<pid>/stat``.

Protocol. REPORT_FD (written by the launcher, one line each)::

    S <pid>      the command runs (its exec succeeded)
    E <errno>    it could not be started; the launcher exits
    X <status>   the command ended: its exit code, or minus the signal that killed it
    L <count>    that many processes could not be ended (the launcher may not signal them)

CONTROL_FD (read by the launcher): a line ``T <grace_ms>`` asks it to end everything with
that grace; the end of the pipe (the parent let go of it, or died) asks the same with
GRACE_MS. SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to the launcher do too. Neither descriptor
is passed on to the command.
"""

from __future__ import annotations

import ctypes
import os
import select
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_GIVE_UP = 2.0  # after the first SIGKILL: how long the killed may take to die
_RESCAN_MS = 10  # while killing: how often to look for processes forked meanwhile
_signal = __import__("_signal")  # not ``signal``: its enums cost as much as the rest of the start
_STOPS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT)


def _report(fd: int, kind: str, value: int) -> None:
    try:
        os.write(fd, f"{kind} {value}\n".encode())
    except OSError:
        pass  # the parent is gone: ending everything goes on


def _parent_of(name: str) -> int | None:
    """The parent of ``/proc/<name>``: after the last ``)`` of its stat line (the name before
    it may hold spaces and parentheses), the state, then the parent's pid."""
    try:
        with open(f"/proc/{name}/stat", "rb") as file:
            line = file.read(512)
        return int(line[line.rindex(b")") + 2 :].split(b" ", 2)[1])
    except (OSError, ValueError, IndexError):
        return None  # gone meanwhile


def descendants() -> list[int]:
    """Every live or unreaped descendant of this process."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            parent = _parent_of(name)
            if parent is not None:
                children.setdefault(parent, []).append(int(name))
    found: list[int] = []
    seen = {os.getpid()}
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in seen:  # a pid reused during the scan cannot make a loop
                seen.add(child)
                found.append(child)
                todo.append(child)
    return found


def _signal_all(sig: int, command: int, command_done: bool) -> tuple[int, int]:
    """Send ``sig`` to every descendant (and the command and its group by pid, while it is
    unreaped: reached even where /proc cannot be read); return how many were found and how
    many may not be signalled from here."""
    if not command_done:
        for target in (-command, command):
            try:
                os.kill(target, sig)
            except OSError:
                pass
    found = descendants()
    refused = 0
    for pid in found:
        try:
            os.kill(pid, sig)
            if sig == _signal.SIGTERM:
                os.kill(pid, _signal.SIGCONT)  # a stopped process gets it too
        except PermissionError:
            refused += 1
        except OSError:
            pass
    return len(found), refused


def _environment() -> dict[bytes, bytes]:
    """The environment this process was started with, as the kernel holds it: the command gets
    exactly that (the interpreter may have added to its own, e.g. a coerced locale)."""
    with open("/proc/self/environ", "rb") as file:
        entries = file.read().split(b"\0")
    return dict(entry.split(b"=", 1) for entry in entries if b"=" in entry)


def _start(
    libc: ctypes.CDLL,
    executable: str,
    argv: list[str],
    env: dict[bytes, bytes],
    started_w: int,
    self_pid: int,
) -> None:
    """In the forked child: become the command (never returns)."""
    try:
        os.setsid()
        libc.prctl(_PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)  # should the launcher be killed
        if os.getppid() != self_pid:
            os._exit(127)
        _signal.set_wakeup_fd(-1)
        for sig in (_signal.SIGCHLD, _signal.SIGPIPE, *_STOPS):
            _signal.signal(sig, _signal.SIG_DFL)
        if "/" in executable:
            os.execve(executable, argv, env)
        else:
            os.execvpe(executable, argv, env)
    except OSError as exc:
        os.write(started_w, (exc.errno or 0).to_bytes(4, sys.byteorder))
    finally:
        os._exit(127)


def _quiet_stdio() -> None:
    """The launcher lets go of the command's stdio: its output ends when its processes do."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def main(args: list[str]) -> int:
    if len(args) < 5:
        print(
            "usage: _launcher.py GRACE_MS CONTROL_FD REPORT_FD EXECUTABLE ARG0 [ARG...]",
            file=sys.stderr,
        )
        return 125
    grace_ms, control, report = int(args[0]), int(args[1]), int(args[2])
    executable, argv = args[3], args[4:]
    os.set_inheritable(control, False)
    os.set_inheritable(report, False)
    _signal.signal(_signal.SIGPIPE, _signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    env = _environment()  # first: not dumpable, its own /proc files are root's
    # Not dumpable: a process of the same user (the command included) may not ptrace this one
    # or open its /proc files (environ, mem, fd: its pipes to the parent). The command, once
    # exec'd, is dumpable again.
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        _report(report, "E", ctypes.get_errno())
        return 0
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    _signal.set_wakeup_fd(wake_w)  # each signal's number arrives as a byte
    for sig in (_signal.SIGCHLD, *_STOPS):
        _signal.signal(sig, lambda *_: None)
    started_r, started_w = os.pipe()
    self_pid = os.getpid()
    try:
        command = os.fork()
    except OSError as exc:
        _report(report, "E", exc.errno or 0)
        return 0
    if command == 0:
        os.close(started_r)
        _start(libc, executable, argv, env, started_w, self_pid)
    os.close(started_w)
    _quiet_stdio()
    error = os.read(started_r, 4)
    os.close(started_r)
    if len(error) == 4:
        os.waitpid(command, 0)
        _report(report, "E", int.from_bytes(error, sys.byteorder))
        return 0
    _report(report, "S", command)
    _supervise(command, grace_ms, control, report, wake_r)
    return 0


def _supervise(command: int, grace_ms: int, control: int, report: int, wake: int) -> None:
    """Until every descendant is gone: see the module's docstring."""
    poller = select.poll()
    poller.register(wake, select.POLLIN)
    poller.register(control, select.POLLIN)
    command_done = False
    phase = 0  # 0 running, 1 TERM sent, 2 KILL
    stop_grace = -1  # >= 0: a stop was asked, with this grace (ms)
    kill_at = give_up_at = 0.0
    while True:
        left, ended = _reap(command, report)
        if not left:
            return
        if ended:
            command_done = True
            if stop_grace < 0:
                stop_grace = grace_ms
        now = time.monotonic()
        if stop_grace >= 0 and phase == 0:
            phase = 1
            _signal_all(_signal.SIGTERM, command, command_done)
            kill_at = now + stop_grace / 1000
        elif stop_grace >= 0 and phase == 1:
            kill_at = min(kill_at, now + stop_grace / 1000)  # asked again, maybe sooner
        if phase == 1 and now >= kill_at:
            phase = 2
            give_up_at = now + _GIVE_UP
        if phase == 2:
            found, refused = _signal_all(_signal.SIGKILL, command, command_done)
            if (found and found == refused) or now >= give_up_at:
                _report(report, "L", found)
                return  # what is left cannot be ended from here
        timeout = None if phase == 0 else _RESCAN_MS if phase == 2 else (kill_at - now) * 1000
        for fd, _ in poller.poll(timeout):
            if fd == wake:
                if any(n != _signal.SIGCHLD for n in _drain(wake)) and stop_grace < 0:
                    stop_grace = grace_ms
            elif fd == control:
                asked = _read_control(control, grace_ms)
                if asked is None:
                    poller.unregister(control)  # the parent is gone, or has let go
                    os.close(control)
                    asked = grace_ms
                if stop_grace < 0 or asked < stop_grace:
                    stop_grace = asked


def _reap(command: int, report: int) -> tuple[bool, bool]:
    """Collect every exited child, reporting the command's status. Returns whether a child is
    left (if none is, no descendant is: every orphan below is re-parented here) and whether
    the command was among those collected."""
    ended = False
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False, ended
        if pid == 0:
            return True, ended
        if pid == command:
            ended = True
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            _report(report, "X", code)


def _drain(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 64)
        except BlockingIOError:
            return data
        if not chunk:
            return data
        data += chunk


def _read_control(fd: int, default: int) -> int | None:
    """The grace a stop request asks for; ``None`` at the end of the pipe."""
    try:
        line = os.read(fd, 32)
    except OSError:
        return None
    if not line:
        return None
    if line.startswith(b"T"):
        try:
            return int(line[1:])
        except ValueError:
            pass
    return default


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
