"""The launcher's plan: system calls the sandbox computed, for the launcher to make.

A plan is ``b"FGP1"`` followed by steps, each ``u32 op, u32 argc`` then ``argc`` arguments
(``u32 length``, the bytes, a NUL), in the machine's byte order. Numbers are decimal text.
Which process makes a step depends on its operation (see ``_launcher.py`` for each):

- 1-9, the launcher, before anything starts: locks, placeholders, what to remove at the end,
  the namespaces to enter, the bounds it watches itself;
- 10-29, the first process of the command's namespaces (after it mapped its user): mounts,
  ``/proc``, the loopback interface, the proxy's listener, the bounds it watches;
- 30-39, the command itself before its exec: directory, limits, Landlock, capabilities,
  seccomp.

A step that fails stops the start: the launcher reports ``F <index> <errno>`` and nothing runs.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from enum import IntEnum
from typing import NamedTuple


class Op(IntEnum):
    LOCK = 1  # path: a directory, held with a shared flock until the launcher exits
    PLACEHOLDER = 2  # kind ("f"/"d": mode 0; "c": commondir naming "."), lock index, name
    REMOVE_AFTER = 3  # path: a tree removed when everything has ended
    NAMESPACES = 4  # CLONE_NEW* flags of the command's init
    WATCH_TASKS = 5  # n: more descendants than n at once ends the command ("processes")
    WATCH_TREE = 6  # path, bytes: a directory holding more ends the command ("tmp")
    PRIVATE = 10  # every mount private to the namespace
    HOLD = 11  # path: a detached copy of the mounts there, for ATTACH (ENOENT: none)
    SEAL = 12  # path: every mount beneath read-only, nosuid, nodev
    TMPFS = 13  # path, size, inodes, mode (octal)
    ATTACH = 14  # hold index, path, read-only (0/1): the copy at path (directories made)
    BIND = 15  # source, target, flags (BIND_*)
    MASK = 16  # kind, path: an unreadable empty file or directory over path
    PROC = 20  # path: a /proc of the new pid namespace
    LOOPBACK = 21  # the loopback interface up
    LISTEN = 22  # port, fd: a TCP listener on 127.0.0.1:port sent over fd (SCM_RIGHTS)
    WATCH = 23  # n, path: n processes or threads, or the file system of path full, end it
    CHDIR = 30  # path
    RLIMIT = 31  # resource, soft, hard (never above the current hard limit)
    NPROC_ABOVE = 32  # n: RLIMIT_NPROC = the user's processes now + n (not for root)
    LANDLOCK = 33  # handled fs, handled net, scoped: a ruleset
    LANDLOCK_PATH = 34  # access, path (rights of a file only, for a file; ENOENT: none)
    LANDLOCK_PORT = 35  # access, port
    RESTRICT = 36  # no_new_privs, then the ruleset enforced
    CAPS = 37  # every capability dropped (bounding, ambient, effective, permitted)
    SECCOMP = 38  # the BPF program (struct sock_filter[]), no_new_privs first


BIND_RECURSIVE = 1
BIND_READONLY = 2
BIND_OPTIONAL = 4  # a target that does not exist is skipped
BIND_DEVICES = 8  # device files usable (nodev and read-only cleared)

Arg = str | bytes | int


class Step(NamedTuple):
    op: Op
    args: tuple[Arg, ...] = ()

    def describe(self) -> str:
        """What the step does, for a message: ``mount tmpfs /tmp``."""
        shown = [
            arg if isinstance(arg, str) else str(arg) if isinstance(arg, int) else "<bytes>"
            for arg in self.args
        ]
        return " ".join([self.op.name.lower().replace("_", " "), *shown])


def _arg(value: Arg) -> bytes:
    if isinstance(value, bool):
        raise TypeError("a plan argument is text, bytes or an int")
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, str):
        return os.fsencode(value)
    return bytes(value)


def encode(steps: Iterable[Step]) -> bytes:
    parts = [b"FGP1"]
    for step in steps:
        args = [_arg(a) for a in step.args]
        if len(args) > 6:
            raise ValueError(f"{step.op.name}: at most 6 arguments")
        parts.append(struct.pack("=II", int(step.op), len(args)))
        for data in args:
            if b"\0" in data and step.op != Op.SECCOMP:
                raise ValueError(f"{step.op.name}: an argument holds a NUL byte")
            parts.append(struct.pack("=I", len(data)))
            parts.append(data)
            parts.append(b"\0")
    return b"".join(parts)


class Plan:
    """Steps and their encoding (made once: a plan reused for many commands is encoded once)."""

    __slots__ = ("_data", "steps")

    def __init__(self, steps: Iterable[Step]) -> None:
        self.steps = tuple(steps)
        self._data: bytes | None = None

    @property
    def data(self) -> bytes:
        if self._data is None:
            self._data = encode(self.steps)
        return self._data
