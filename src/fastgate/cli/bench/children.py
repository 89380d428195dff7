"""The servers and workers the bench starts end with it, even when it is killed.

The bench stops its children itself when it ends normally. Killed (SIGKILL, an OOM kill, a CI
timeout), it cannot: ``child_environment()`` names the bench's pid to the child, and the child
calls ``die_with_parent()`` first thing, which asks the kernel (Linux) to kill it when that
process ends, and exits at once if it already has. A program that is not ours (redis-server,
postgres) is started through ``dying_with_this_process(argv)``: a small Python step makes the
same request, then becomes the program (the request survives the exec).

The kernel acts when the *thread* that started the child ends: start such children from a
thread that outlives them (the main thread, as the bench and the test fixtures do).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Sequence

PARENT_VARIABLE = "FASTGATE_BENCH_PARENT"
_PR_SET_PDEATHSIG = 1


def child_environment() -> dict[str, str]:
    """This process's environment, naming it as the parent a child must not outlive."""
    environment = dict(os.environ)
    environment[PARENT_VARIABLE] = str(os.getpid())
    return environment


def die_with_parent() -> None:
    """In a child started with ``child_environment()``: be killed when the parent ends.
    Elsewhere (no such variable, not Linux) nothing happens."""
    expected = os.environ.pop(PARENT_VARIABLE, None)
    if expected is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # refused (it is not, on Linux): the parent's own clean-up still applies
    if os.getppid() != int(expected):  # the parent ended before the request was made
        os._exit(1)


# Run as ``python -I -S -c <this> PARENT_PID UID GID PROGRAM ARGS...`` (UID and GID "-" for no
# change): only the standard library, no site packages, so the step costs a bare interpreter's
# start and nothing of fastgate's. The user is changed here, before the request, because the
# kernel forgets the request when a process's user or group changes.
_BECOME_DYING_WITH_PARENT = """
import ctypes, os, signal, sys
parent, uid, gid, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
if gid != "-":
    os.setgroups([])
    os.setgid(int(gid))
if uid != "-":
    os.setuid(int(uid))
if sys.platform.startswith("linux"):
    if ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0) == 0 and os.getppid() != parent:
        os._exit(1)
os.execv(argv[0], argv)
"""


def dying_with_this_process(
    argv: Sequence[str], *, uid: int | None = None, gid: int | None = None
) -> list[str]:
    """The command line that runs ``argv`` (a path and its arguments) so that it is killed when
    this process ends, however it ends (Linux; elsewhere it simply runs ``argv``). ``uid`` and
    ``gid``: the user and group to run it as (no supplementary groups), for a starter that may
    change them (root)."""
    return [
        sys.executable,
        "-I",
        "-S",
        "-c",
        _BECOME_DYING_WITH_PARENT,
        str(os.getpid()),
        "-" if uid is None else str(uid),
        "-" if gid is None else str(gid),
        *argv,
    ]
