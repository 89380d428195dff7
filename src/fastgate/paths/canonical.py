"""Canonical paths: absolute, every symlink resolved, ``.``/``..`` collapsed.

``os.path.realpath`` walks the path one component at a time in Python (an ``lstat`` each). For a
path that exists, Linux can answer in three system calls: open it with ``O_PATH`` (no I/O, no
permission on the file itself needed, nothing triggered on FIFOs or devices) and read the
kernel's own name for the descriptor from ``/proc/self/fd``. A file that does not exist yet
(the common case for a write) is its existing parent's canonical path plus its name, once an
``lstat`` has shown the name is not a dangling symlink. Anything unusual (a loop, a name too
long, no ``/proc``) falls back to ``realpath``, which is always right. ``resolve_path`` also says
whether the kernel settled the answer (then no symlink is left to look at); ``lock_key`` is the
canonical path as a file lock's key.

Most paths are plain: absolute, in normal form, no symlink anywhere on them. Such a path is its
own canonical form, and the compiled build proves it in one or two system calls (``openat2``
refusing every symlink, see ``_core/_openat2.pyx``); any other answer takes the route above.

``consistent_paths()`` memoizes answers for the duration of one call's checks, so the worktree
check, the permission rules and the lock keys all see the same resolution of a path (and pay
for it once), while nothing is cached across calls.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from contextvars import ContextVar
from errno import ENOENT, ENOSYS, EPERM
from typing import Any, Final

from fastgate._core import open_no_symlinks
from fastgate.errors import USER_CODE_ERRORS

_O_PATH = getattr(os, "O_PATH", 0)
_FAST = bool(_O_PATH) and os.path.isdir("/proc/self/fd")
_FLAGS = _O_PATH | os.O_CLOEXEC
_DIRECTORY_FLAGS = _FLAGS | os.O_DIRECTORY
# Case-insensitive by default there; folding too much only over-serializes, which is safe.
_FOLD_CASE = sys.platform in ("win32", "darwin")
# path -> (canonical path, settled); see ``resolve_path``.
_memo: ContextVar[dict[str, tuple[str, bool]] | None] = ContextVar(
    "fastgate_path_memo", default=None
)
# Used for every path of every call, so bound once: compiled, a Final is a C static, where a
# module attribute or a method would be looked up on each use.
_memo_get: Final = _memo.get
_memo_set: Final = _memo.set
_memo_reset: Final = _memo.reset
_open: Final = os.open
_readlink: Final = os.readlink
_close: Final = os.close
_fspath: Final = os.fspath
# "/proc/self/fd/N" for the low descriptor numbers an open usually returns, made once.
_FD_LINKS: Final = tuple(f"/proc/self/fd/{fd}" for fd in range(256))
# The openat2 probe (compiled build only); dropped for good once the kernel or a sandbox shows
# it cannot answer (ENOSYS: before Linux 5.6; EPERM: a seccomp filter): the answers stay right,
# only slower. (Not EINVAL: the probe's answer for a path with a NUL byte, which must not turn
# it off for everyone.)
_probe = open_no_symlinks
_PROBE_UNSUPPORTED: Final = (ENOSYS, EPERM)


def _plain(path: str) -> bool:
    """Absolute and in normal form: no empty, ``.`` or ``..`` component, no trailing ``/``."""
    return (
        path[:1] == "/"
        and path[-1:] != "/"
        and "//" not in path
        and "/./" not in path
        and "/../" not in path
        and not path.endswith(("/.", "/.."))
    )


def _settled_as_is(path: str) -> bool:
    """Whether ``path`` is plain and its own settled canonical form: the kernel opened it, or its
    parent directory while the name itself is free, and met no symlink on the way (a dangling
    symlink as the last component is one too)."""
    global _probe
    probe = _probe
    if probe is None or not _plain(path):
        return False
    error = probe(path, False)
    if error == 0:
        return True
    if error == ENOENT:
        parent = path[: path.rfind("/")]
        return bool(parent) and probe(parent, True) == 0
    if error in _PROBE_UNSUPPORTED:
        _probe = None
    return False


def _via_proc(path: str, flags: int = _FLAGS) -> str | None:
    try:
        fd = _open(path, flags)
    except FileNotFoundError:
        return _missing_leaf(path) if flags == _FLAGS else None
    except OSError:
        return None
    try:
        resolved = _readlink(_FD_LINKS[fd] if fd < 256 else f"/proc/self/fd/{fd}")
    except OSError:
        return None
    finally:
        _close(fd)
    # A file unlinked between open and readlink reads back as "<name> (deleted)".
    if not resolved.startswith("/") or resolved.endswith(" (deleted)"):
        return None
    return resolved


def _missing_leaf(path: str) -> str | None:
    """``path`` whose last component does not exist: its parent directory's canonical path plus
    the name."""
    parent, name = os.path.split(path.rstrip("/") or "/")
    if name in ("", ".", "..") or path.endswith("/"):
        return None
    try:
        os.lstat(path)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    else:
        return None  # it exists after all: a dangling symlink, or a race; let realpath decide
    resolved_parent = _via_proc(parent or ".", _DIRECTORY_FLAGS) if parent != path else None
    if resolved_parent is None:
        return None
    return os.path.join(resolved_parent, name)


def resolve_path(path: str) -> tuple[str, bool]:
    """(the canonical form of ``path``, settled). ``path`` must be a non-empty str without NUL
    bytes.

    Settled means the kernel resolved it: an existing object's own name (so not a symlink), or
    a name that does not exist, not even as a dangling symlink, inside an existing directory's
    own name. Callers need not look at such a path again; an unsettled one came from
    ``realpath`` and may end in a dangling symlink."""
    memo = _memo_get()
    if memo is not None:
        known = memo.get(path)
        if known is not None:
            return known
    if _settled_as_is(path):
        answer = (path, True)
    else:
        resolved = _via_proc(path) if _FAST else None
        answer = (os.path.realpath(path), False) if resolved is None else (resolved, True)
    if memo is not None:
        memo[path] = answer
    return answer


def canonical_path(path: str) -> str:
    """The canonical form of ``path`` (which must be a non-empty str without NUL bytes)."""
    return resolve_path(path)[0]


def lock_key(path: str | os.PathLike[str]) -> str:
    """The key of a file's lock (SPEC §8.3): its canonical path, case-folded where file systems
    usually ignore case. Raises ``ValueError`` for an empty path or one containing a NUL byte."""
    text = _fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"path must be str or os.PathLike[str], got {type(text).__name__}")
    if not text or "\x00" in text:
        raise ValueError(f"not a usable path: {text!r}")
    key = resolve_path(text)[0]
    return key.casefold() if _FOLD_CASE else key


_case_probes: dict[str, bool] = {}
_PROBE_ENTRIES = 64  # entries of a directory looked at for a name with letters


def folds_case(directory: str) -> bool:
    """Whether names under ``directory`` are compared ignoring case: always on macOS and
    Windows (their default volumes), elsewhere probed once per directory (a case-insensitive
    mount, an ext4 casefold directory). A wrong "yes" only makes deny rules and sensitive
    patterns match more, which is safe."""
    if _FOLD_CASE:
        return True
    known = _case_probes.get(directory)
    if known is None:
        known = _probe_case(directory)
        if len(_case_probes) >= 1024:
            _case_probes.clear()
        _case_probes[directory] = known
    return known


def _probe_case(directory: str) -> bool:
    """Look up an entry's name with its letters' case swapped: the same entry (not a symlink
    to it: ``lstat``) means the file system ignores case."""
    try:
        with os.scandir(directory) as entries:
            for index, entry in enumerate(entries):
                if index >= _PROBE_ENTRIES:
                    break
                if entry.name.swapcase() != entry.name:
                    return _same_entry(directory, entry.name)
    except OSError:
        pass
    # No entry to look at: the directory's own name, in its parent.
    parent, name = os.path.split(os.path.normpath(directory))
    if name and name.swapcase() != name:
        return _same_entry(parent, name)
    return False


def _same_entry(directory: str, name: str) -> bool:
    try:
        given = os.lstat(os.path.join(directory, name))
        swapped = os.lstat(os.path.join(directory, name.swapcase()))
    except OSError:
        return False  # the other spelling names nothing: case matters here
    return (given.st_ino, given.st_dev) == (swapped.st_ino, swapped.st_dev)


def absolute_path(root: str, path: str) -> str:
    """``os.path.join(root, path)`` for two str, without the general function's cost (it runs
    for every path argument of every call)."""
    if path[:1] == "/":
        return path
    return root + path if not root or root[-1] == "/" else root + "/" + path


def names_any(names: tuple[str, ...], args: Mapping[str, Any]) -> bool:
    """Whether ``args`` has any of ``names`` (a tool has few): a dict is asked directly."""
    if isinstance(args, dict):
        arguments: dict[str, Any] = args  # compiled, ``in`` is then PyDict_Contains
        for name in names:
            if name in arguments:
                return True
        return False
    return any(name in args for name in names)


def given_paths(names: tuple[str, ...], args: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(name, value) for each of ``names`` that ``args`` gives a value other than None, in the
    order of ``names``. A dict (the frozen arguments are one) is read with ``dict.get``, which
    compiled code calls directly, where ``in`` and ``[]`` on a dict subclass go through its
    generic slots (some 300 instructions each)."""
    found: list[tuple[str, Any]] = []
    if isinstance(args, dict):
        arguments: dict[str, Any] = args
        for name in names:
            value = arguments.get(name)
            if value is not None:
                found.append((name, value))
        return found
    return [(name, args[name]) for name in names if name in args and args[name] is not None]


def consistent_paths(active: bool = True) -> _PathMemo:
    """``with consistent_paths():`` within this block (and this task), each path is resolved
    once and then remembered. ``consistent_paths(False)`` does nothing (for calls that name no
    path at all) and makes nothing: one shared inert block serves them all."""
    return _PathMemo() if active else _INERT


class _PathMemo:
    __slots__ = ("_active", "_token")

    def __init__(self, active: bool = True) -> None:
        self._active = active

    def __enter__(self) -> None:
        if self._active:
            self._token = _memo_set({})

    def __exit__(self, *exc_info: object) -> None:
        if self._active:
            _memo_reset(self._token)


_INERT: Final = _PathMemo(False)


class DeclaredPathsError(ValueError):
    """A tool's ``paths(args)`` raised or did not return a list of paths (the call is refused
    as ``INVALID_ARGS`` with this message)."""


def _message_of(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # its __str__ is the user's code too
        text = ""
    return text or type(exc).__name__


def declared_paths(paths_of: Any, args: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """("paths", value) for each path a tool's ``paths(args)`` declares (SPEC §5): checked,
    resolved and locked like path arguments. Raises ``DeclaredPathsError``."""
    try:
        declared = paths_of(args)
    except USER_CODE_ERRORS as exc:
        raise DeclaredPathsError(_message_of(exc)) from exc
    if isinstance(declared, (str, bytes)) or not isinstance(declared, (list, tuple)):
        raise DeclaredPathsError(
            f"the tool's paths() returned {type(declared).__name__}, not a list of paths"
        )
    return [("paths", value) for value in declared]
