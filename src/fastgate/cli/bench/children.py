"""The servers and workers the bench starts end with it, even when it is killed.

The bench stops its children itself when it ends normally. Killed (SIGKILL, an OOM kill, a CI
timeout), it cannot: ``child_environment()`` names the bench's pid to the child, and the child
calls ``die_with_parent()`` first thing, which asks the kernel (Linux) to kill it when that
process ends, and exits at once if it already has.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

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
