"""``open_beneath``: open a path so that what is opened lies inside the allowed roots at open
time, for tools that write where ``check_worktree`` looked earlier (a directory may have been
swapped for a symlink in between).

Not part of the compiled pipeline: it runs inside tool bodies, once per open, and staying
interpreted keeps its race tests able to stage the race.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable

from fastgate.paths.worktree import (
    MAX_SYMLINKS,
    WorktreeViolation,
    allowed_roots,
    check_path,
    describe_roots,
    is_within,
)


class WorktreeEscape(PermissionError):
    """Raised by ``open_beneath`` when the path leads outside the allowed roots."""

    def __init__(self, violation: WorktreeViolation) -> None:
        super().__init__(violation.message)
        self.violation = violation


def open_beneath(
    path: str,
    flags: int,
    workspace_root: str,
    additional_dirs: Iterable[str] = (),
    mode: int = 0o666,
) -> int:
    """Open ``path`` (relative paths against the workspace root) and return the descriptor,
    guaranteeing that what was opened lies inside the allowed roots *at open time*.

    Every component is opened relative to its parent's descriptor with ``O_NOFOLLOW``;
    symlinks are followed by hand (at most 40), and the resolved path is checked before the
    last component is opened or created. A directory swapped for a symlink after
    ``check_worktree`` therefore cannot carry a write outside, and nothing is created there.
    Raises ``WorktreeEscape`` (a ``PermissionError``) or the ``OSError`` of the open.
    """
    roots = allowed_roots(workspace_root, additional_dirs)
    refusal = check_path("path", path, workspace_root, roots)
    if refusal is not None:
        raise WorktreeEscape(refusal)
    absolute = path if os.path.isabs(path) else os.path.join(workspace_root, path)
    pending = [p for p in absolute.split("/") if p and p != "."][::-1]
    parts: list[str] = []  # the real path of ``fd`` so far
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    links = 0
    try:
        while pending:
            name = pending.pop()
            if name == "..":
                if parts:
                    parts.pop()
                    fd = _replace(fd, os.open("..", _DIR_FLAGS, dir_fd=fd))
                continue
            last = not pending
            target = _readlink_at(name, fd)
            if target is not None:
                links += 1
                if links > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                if target.startswith("/"):
                    parts = []
                    fd = _replace(fd, os.open("/", _DIR_FLAGS))
                pending.extend([p for p in target.split("/") if p and p != "."][::-1])
                continue
            if last:
                resolved = "/" + "/".join([*parts, name])
                if not any(is_within(resolved, root) for root in roots):
                    raise WorktreeEscape(_escape(path, resolved, roots))
                opened = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
                _verify_descriptor(opened, path, roots)
                return opened
            fd = _replace(fd, os.open(name, _DIR_FLAGS, dir_fd=fd))
            parts.append(name)
        # The path named a directory that is a root or above one (``.``): open it as such.
        resolved = "/" + "/".join(parts)
        if not any(is_within(resolved, root) for root in roots):
            raise WorktreeEscape(_escape(path, resolved, roots))
        opened = os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=fd)
        _verify_descriptor(opened, path, roots)
        return opened
    finally:
        os.close(fd)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _replace(old: int, new: int) -> int:
    os.close(old)
    return new


def _readlink_at(name: str, dir_fd: int) -> str | None:
    """The target when ``name`` is a symlink in ``dir_fd``; None otherwise (or missing)."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # not a symlink
            return None
        raise


def _verify_descriptor(fd: int, path: str, roots: tuple[str, ...]) -> None:
    """Re-check what was opened, by the kernel's own name for it (Linux ``/proc``)."""
    try:
        actual = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return  # no /proc: the component walk already guaranteed it
    if actual.startswith("/") and not actual.endswith(" (deleted)"):
        if not any(is_within(actual, root) for root in roots):
            os.close(fd)
            raise WorktreeEscape(_escape(path, actual, roots))


def _escape(path: str, resolved: str, roots: tuple[str, ...]) -> WorktreeViolation:
    reason = "it is outside the workspace"
    message = (
        f"path {path!r} (resolves to {resolved}) is refused: {reason}. Use a path inside "
        f"{describe_roots(roots)}."
    )
    return WorktreeViolation("path", path, resolved, roots, reason, message)
