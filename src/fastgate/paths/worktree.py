"""Worktree isolation (SPEC §4 stage 5): every path argument must resolve inside the workspace
root or one of ``PermissionConfig.additional_dirs``.

``check_worktree`` returns a ``WorktreeViolation`` (never raises for bad input) so the executor can
turn it into ``WORKTREE_VIOLATION``. Resolution follows symlinks (also dangling ones: a write
would create their target), collapses ``..``, takes relative paths against the workspace root,
and compares by path components. It refuses NUL bytes, empty or non-string paths, paths longer
than ``PATH_MAX`` or with a component longer than ``NAME_MAX`` (``realpath`` silently stops
resolving there), and symlink loops (at most 40 links are followed, like the kernel).

This is a check at decision time. A tool that opens the path later must still open it safely
(``O_NOFOLLOW`` on the last component, or re-check the opened descriptor): a directory swapped
for a symlink in between is the tool's race to close, and ``fastgate.paths.open_beneath``
closes it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import msgspec

from fastgate.paths.canonical import absolute_path, given_paths, resolve_path

try:
    PATH_MAX = os.pathconf("/", "PC_PATH_MAX")
    NAME_MAX = os.pathconf("/", "PC_NAME_MAX")
except (OSError, ValueError, AttributeError):  # pragma: no cover - platforms without pathconf
    PATH_MAX, NAME_MAX = 4096, 255
MAX_SYMLINKS = 40


class WorktreeViolation(msgspec.Struct, frozen=True):
    """Why a path argument was refused. ``message`` is written for the model."""

    argument: str
    path: Any
    resolved: str | None
    allowed_roots: tuple[str, ...]
    reason: str
    message: str


class NamesPaths(Protocol):
    """What the check needs of a tool (a ``ToolDefinition``): the names of its path arguments."""

    @property
    def path_args(self) -> tuple[str, ...]: ...


def check_worktree(
    tool: NamesPaths,
    args: Mapping[str, Any],
    workspace_root: str,
    additional_dirs: Iterable[str] = (),
) -> WorktreeViolation | None:
    """The first path argument of ``args`` that escapes the allowed roots, or None."""
    return check_given_paths(given_paths(tool.path_args, args), workspace_root, additional_dirs)


def check_given_paths(
    given: list[tuple[str, Any]], workspace_root: str, additional_dirs: Iterable[str] = ()
) -> WorktreeViolation | None:
    """``check_worktree`` for the (name, value) pairs ``paths.given_paths`` found."""
    if not given:
        return None
    roots = allowed_roots(workspace_root, additional_dirs)
    for name, value in given:
        violation = check_path(name, value, workspace_root, roots)
        if violation is not None:
            return violation
    return None


def check_path(
    argument: str, value: Any, workspace_root: str, roots: tuple[str, ...]
) -> WorktreeViolation | None:
    problem = _path_problem(value, workspace_root, roots)
    if problem is None:
        return None
    reason, resolved = problem
    where = f" (resolves to {resolved})" if resolved is not None else ""
    message = (
        f"path argument {argument!r} = {_show(value)}{where} is refused: {reason}. "
        f"Use a path inside {describe_roots(roots)}."
    )
    return WorktreeViolation(argument, value, resolved, roots, reason, message)


def _path_problem(
    value: Any, workspace_root: str, roots: tuple[str, ...]
) -> tuple[str, str | None] | None:
    """(why the path is refused, what it resolved to if it got that far), or None."""
    if not isinstance(value, str):
        return f"a path must be a string, not {type(value).__name__}", None
    if not value:
        return "the path is empty", None
    if "\x00" in value:
        return "the path contains a NUL byte", None
    absolute = absolute_path(workspace_root, value)
    # ASCII text is its own encoding, and short: only other text needs encoding to be checked.
    if not absolute.isascii() or len(absolute) > NAME_MAX:
        try:
            encoded = os.fsencode(absolute)
        except UnicodeError:
            return "the path is not encodable", None
        if len(encoded) >= PATH_MAX:
            return f"the path is longer than PATH_MAX ({PATH_MAX} bytes)", None
        if len(encoded) > NAME_MAX and any(len(part) > NAME_MAX for part in encoded.split(b"/")):
            return f"a path component is longer than NAME_MAX ({NAME_MAX} bytes)", None
    try:
        resolved = resolve(absolute)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "the path goes through a symlink loop (or too many symlinks)", None
        return f"the path cannot be resolved ({os.strerror(exc.errno or 0)})", None
    # (At most 4 bytes per character: only long text needs encoding to be measured.)
    if len(resolved) * 4 >= PATH_MAX and len(os.fsencode(resolved)) >= PATH_MAX:
        return "the resolved path is longer than PATH_MAX", resolved
    for root in roots:
        if is_within(resolved, root):
            return None
    return "it is outside the workspace", resolved


def resolve(path: str) -> str:
    """The absolute path with every symlink followed, including a dangling last one (its
    target is where a write would land). ``OSError(ELOOP)`` for loops."""
    fast, settled = resolve_path(path)
    if settled:
        return fast  # the kernel resolved it: nothing left to follow
    try:
        if not stat.S_ISLNK(os.lstat(fast).st_mode):
            return fast  # it exists and is not a symlink: the kernel resolved it
    except FileNotFoundError:
        # A file to be created: right when its directory exists (a dangling symlink or a loop
        # on the way would have left a symlink or nothing there).
        try:
            if stat.S_ISDIR(os.lstat(os.path.dirname(fast)).st_mode):
                return fast
        except OSError:
            pass
    except OSError:
        pass
    return _walk(path)


def _walk(path: str) -> str:
    """Component-by-component resolution, like the kernel's, counting symlinks."""
    pending = [p for p in path.split("/") if p][::-1]
    parts: list[str] = []
    links = 0
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        candidate = "/" + "/".join([*parts, part])
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            parts.append(part)  # does not exist (yet): nothing more to follow here
            continue
        except NotADirectoryError:
            parts.append(part)
            continue
        if not stat.S_ISLNK(st.st_mode):
            parts.append(part)
            continue
        links += 1
        if links > MAX_SYMLINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        target = os.readlink(candidate)
        if target.startswith("/"):
            parts = []
        pending.extend([p for p in target.split("/") if p][::-1])
    return "/" + "/".join(parts)


def is_within(path: str, root: str) -> bool:
    """Component-wise containment of canonical absolute paths (``/ab`` is not inside ``/a``)."""
    if root == "/":
        return path.startswith("/")
    root = root.rstrip("/")
    # The root, then the end or a separator: never a mere string prefix ("/ab" vs "/a").
    return path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/")


_root_cache: dict[tuple[str, ...], tuple[str, ...]] = {}
# (workspace root, additional dirs, their roots) of the last call, compared by identity.
_last_roots: tuple[Any, Any, tuple[str, ...]] = (None, None, ())


def allowed_roots(workspace_root: str, additional_dirs: Iterable[str]) -> tuple[str, ...]:
    """The canonical allowed roots. Cached: a root swapped for a symlink later can only make
    paths resolve *outside* the cached canonical root (refused), never let one escape."""
    global _last_roots
    last = _last_roots  # one read: another thread may replace it meanwhile
    if last[0] is workspace_root and last[1] is additional_dirs:
        return last[2]  # the same objects as the previous call (the usual case): no key to hash
    key = (workspace_root, *additional_dirs)
    cached = _root_cache.get(key)
    if cached is None:
        cached = _resolve_roots(key)
        if not all(os.path.isabs(root) for root in key):
            return cached  # relative to the working directory, which may change
        if len(_root_cache) >= 1024:
            _root_cache.clear()
        _root_cache[key] = cached
    if type(additional_dirs) is tuple:  # immutable: the same object means the same dirs
        _last_roots = (workspace_root, additional_dirs, cached)
    return cached


def _resolve_roots(given: tuple[str, ...]) -> tuple[str, ...]:
    roots: list[str] = []
    for root in given:
        try:
            resolved = resolve(os.path.abspath(root))
        except OSError:
            continue  # a root we cannot resolve admits nothing
        if resolved not in roots:
            roots.append(resolved)
    return tuple(roots)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:199] + "…"


def describe_roots(roots: tuple[str, ...]) -> str:
    if not roots:
        return "the workspace (no root could be resolved)"
    return " or ".join(roots)
