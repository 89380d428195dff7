"""Canonical paths: absolute, every symlink resolved, ``.``/``..`` collapsed.

``os.path.realpath`` walks the path one component at a time in Python (an ``lstat`` each). For a
path that exists, Linux can answer in three system calls: open it with ``O_PATH`` (no I/O, no
permission on the file itself needed, nothing triggered on FIFOs or devices) and read the
kernel's own name for the descriptor from ``/proc/self/fd``. Anything unusual (a missing file, a
symlink loop, a name too long, no ``/proc``) falls back to ``realpath``, which is always right.
"""

from __future__ import annotations

import os

_O_PATH = getattr(os, "O_PATH", 0)
_FAST = bool(_O_PATH) and os.path.isdir("/proc/self/fd")
_FLAGS = _O_PATH | os.O_CLOEXEC


def _via_proc(path: str) -> str | None:
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return None
    try:
        resolved = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    finally:
        os.close(fd)
    # A file unlinked between open and readlink reads back as "<name> (deleted)".
    if not resolved.startswith("/") or resolved.endswith(" (deleted)"):
        return None
    return resolved


def canonical_path(path: str) -> str:
    """The canonical form of ``path`` (which must be a non-empty str without NUL bytes)."""
    if _FAST:
        resolved = _via_proc(path)
        if resolved is not None:
            return resolved
    return os.path.realpath(path)
