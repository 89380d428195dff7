"""What every built-in tool shares: paths, the call's file system, failures a model can act on."""

from __future__ import annotations

import errno
import os
from typing import Any

from fastgate.builtin._fs import (
    FileStat,
    FileTooLarge,
    LocalFileSystem,
    NotARegularFile,
    PathChanged,
)
from fastgate.model import Failure
from fastgate.paths import WorktreeEscape, canonical_path
from fastgate.pipeline import RunContext

MAX_FILE_BYTES = 32 * 1024 * 1024  # what read, edit and apply_patch load at once


def root_of(ctx: RunContext) -> str:
    return ctx.workspace_root or os.getcwd()


def absolute(ctx: RunContext, path: str) -> str:
    """A path argument made absolute (against the workspace) and normalized."""
    return os.path.normpath(os.path.join(root_of(ctx), path))


def shown(ctx: RunContext, path: str) -> str:
    """How results name a path: relative to the workspace when inside it."""
    root = os.path.normpath(root_of(ctx))
    if path == root:
        return "."
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1 :]
    return path


def ledger_key(fs: Any, path: str) -> str:
    """The file's identity in the session's records: its canonical path on the disk (a symlink
    and its target share one), the path itself on any other file system."""
    if isinstance(fs, LocalFileSystem):
        try:
            return canonical_path(path)
        except (OSError, ValueError):
            return path
    return path


async def write_target(ctx: RunContext, fs: Any, given: str) -> str:
    """Where a writer changes the file the path argument ``given`` names. On the local disk:
    the canonical path stage 5 checked (``RunContext.checked_path``), once no symlink has
    appeared on it since (``PathChanged``; the write itself then follows none, so one that
    appears later fails it too). On any other file system: the path made absolute."""
    if not isinstance(fs, LocalFileSystem):
        return absolute(ctx, given)
    path = ctx.checked_path(given)
    await fs.refuse_symlinks(path)
    return path


async def read_file(fs: Any, path: str) -> tuple[FileStat, bytes]:
    """The file's stat and bytes: one open on the local disk, stat then read elsewhere.
    Raises ``FileNotFoundError``, ``IsADirectoryError``, ``FileTooLarge``, ..."""
    if isinstance(fs, LocalFileSystem):
        return await fs.read_stat(path, MAX_FILE_BYTES)
    stat = await fs.stat(path)
    if stat is None:
        raise FileNotFoundError(errno.ENOENT, "no such file", path)
    if stat.is_dir:
        raise IsADirectoryError(errno.EISDIR, "is a directory", path)
    if stat.size > MAX_FILE_BYTES:
        raise FileTooLarge(path, stat.size, MAX_FILE_BYTES)
    data = await fs.read_bytes(path)
    if len(data) > MAX_FILE_BYTES:
        raise FileTooLarge(path, len(data), MAX_FILE_BYTES)
    return stat, data


def os_failure(exc: OSError, name: str, doing: str) -> Failure:
    """An ``OSError`` of the file system as a failure naming the file and what to do."""
    if isinstance(exc, PathChanged):
        return Failure(
            f"{name} was not {doing}: {exc.link} became a symlink after the call was checked, "
            "and a change follows no symlink. Nothing was changed; look at the path and call "
            "again.",
            code="path_changed",
        )
    if isinstance(exc, WorktreeEscape):
        return Failure(
            f"{name} is refused: it now leads outside the workspace ({exc}). Nothing was {doing}.",
            code="outside_workspace",
        )
    if isinstance(exc, FileTooLarge):
        return Failure(
            f"{name} is {exc.size:,} bytes, more than the {exc.limit:,} bytes the file tools "
            f"load at once. Use grep (with context) to find what you need in it.",
            code="file_too_large",
            details={"size": exc.size, "limit": exc.limit},
        )
    if isinstance(exc, NotARegularFile):
        return Failure(
            f"{name} is not a regular file (a FIFO, socket or device); nothing was {doing}.",
            code="not_a_file",
        )
    if isinstance(exc, FileNotFoundError):
        return Failure(f"File does not exist: {name}.", code="not_found")
    if isinstance(exc, IsADirectoryError):
        return Failure(
            f"{name} is a directory, not a file. Use glob to list what is in it.",
            code="is_a_directory",
        )
    if isinstance(exc, NotADirectoryError):
        return Failure(f"{name}: a part of the path is a file, not a directory.", code="not_found")
    if exc.errno == errno.ENAMETOOLONG:
        return Failure(f"{name}: the path is too long for the file system.", code="bad_path")
    if exc.errno == errno.ELOOP:
        return Failure(f"{name}: the path goes through a symlink loop.", code="bad_path")
    reason = exc.strerror or type(exc).__name__
    return Failure(f"{name}: {reason}; nothing was {doing}.", code="os_error")


def stale_failure(name: str, never_read: bool) -> Failure:
    if never_read:
        message = (
            f"{name} has not been read in this session. Read it first (read), then retry: "
            "writing a file you have not seen could overwrite someone else's changes."
        )
    else:
        message = (
            f"{name} has changed since you last read it. Read it again, then redo your change "
            "on what it contains now."
        )
    return Failure(message, code="stale_file", details={"never_read": never_read})
