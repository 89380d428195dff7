"""Running out of file descriptors: the error a command that could not be started for want of
them gets, and a check for the headroom starting one needs."""

from __future__ import annotations

import errno
import os
import resource
from typing import Final

from fastgate.model.results import ErrorCode, ToolFault

#: The errors that say a descriptor could not be made: this process's limit (``EMFILE``) or
#: the system's (``ENFILE``).
OUT_OF_DESCRIPTORS: Final = frozenset({errno.EMFILE, errno.ENFILE})


def soft_limit() -> int | None:
    """This process's ``RLIMIT_NOFILE`` soft limit now (``None``: unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


class DescriptorsExhausted(ToolFault, OSError):
    """A command was not started: the server is out of file descriptors. Nothing of it was
    made (no pipe, no launcher). An ``OSError`` (``errno`` is ``EMFILE`` or ``ENFILE``) for
    every spawner, and a ``ToolFault`` for a tool that lets it through: ``TOOL_ERROR``,
    retryable, ``details = {"reason": "resource_exhausted", "resource": "file_descriptors",
    "limit": <the soft limit>}``."""

    def __init__(self, code: int) -> None:
        limit = soft_limit()
        if code == errno.ENFILE:
            what = "the system's limit on open files"
        elif limit is None:
            what = "its limit on open files"
        else:
            what = f"its limit of {limit} open files"
        reason = f"the server is out of file descriptors ({what})"
        super().__init__(
            f"The command was not started: {reason}. Retry once fewer commands or network "
            "connections are running.",
            code=ErrorCode.TOOL_ERROR,
            retryable=True,
            details={
                "reason": "resource_exhausted",
                "resource": "file_descriptors",
                "limit": limit,
            },
        )
        # What callers that read it as an OSError see (the shell's "could not start: ...").
        self.errno = code
        self.strerror = reason


def ensure_free(needed: int) -> None:
    """``DescriptorsExhausted`` when fewer than ``needed`` descriptor numbers are free below
    the soft limit now. A descriptor's number must be below the limit, so those at or above it
    (opened before the limit was lowered) take none of the room. Where ``/proc`` cannot be read
    this checks nothing: a spawn that runs out still fails with ``DescriptorsExhausted``."""
    limit = soft_limit()
    if limit is None:
        return
    try:
        names = os.listdir("/proc/self/fd")  # its own descriptor is among them, and closed
    except OSError as exc:
        if exc.errno in OUT_OF_DESCRIPTORS:
            raise DescriptorsExhausted(exc.errno) from None
        return
    used = sum(1 for name in names if name.isdigit() and int(name) < limit) - 1
    if limit - used < needed:
        raise DescriptorsExhausted(errno.EMFILE)
