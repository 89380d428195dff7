"""What every built-in tool shares: paths, the call's file system, failures a model can act on."""

from __future__ import annotations

import errno
import json
import os
import re
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


def names_directory(path: str) -> bool:
    """Whether a path argument's spelling names a directory: it ends with ``/``, or its last
    component is ``.`` or ``..`` (``a.txt/`` is a directory called ``a.txt``, which a regular
    file is not: POSIX says ``ENOTDIR``; normalizing must not drop that)."""
    return path.endswith("/") or path.rsplit("/", 1)[-1] in (".", "..")


async def file_path_refusal(ctx: RunContext, fs: Any, given: str, doing: str) -> Failure | None:
    """The failure for a file tool's path argument that names a directory by its spelling
    (``names_directory``), else None: a directory there is ``is_a_directory``, anything else
    ``not_a_directory`` (a file, or nothing, cannot be reached through a trailing slash)."""
    if not names_directory(given):
        return None
    path = absolute(ctx, given)
    name = shown(ctx, path)
    try:
        stat = await fs.stat(path)
    except OSError:
        stat = None
    if stat is not None and stat.is_dir:
        return os_failure(IsADirectoryError(errno.EISDIR, "is a directory", path), name, doing)
    what = "a file" if stat is not None else "not there"
    ending = "/" if given.endswith("/") else "/" + given.rsplit("/", 1)[-1]
    return Failure(
        f"{given} names a directory (it ends with {ending!r}), and {name} is {what}: give the "
        f"file's own path, without a trailing {ending!r}. Nothing was {doing}.",
        code="not_a_directory",
    )


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def shown(ctx: RunContext, path: str) -> str:
    """How results name a path: relative to the workspace when inside it; as a JSON string
    when it holds a control character (a file named ``x\nsrc/app.py:1:...`` must not pass
    for rows of a listing or a search)."""
    root = os.path.normpath(root_of(ctx))
    if path == root:
        return "."
    if path.startswith(root.rstrip("/") + "/"):
        path = path[len(root.rstrip("/")) + 1 :]
    if _CONTROL.search(path) is None:
        return path
    return json.dumps(path, ensure_ascii=False)


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


async def read_target(ctx: RunContext, fs: Any, given: str) -> str:
    """Where ``read`` reads the file the path argument ``given`` names: the canonical path
    stage 5 checked on the local disk (``read_file`` then follows no symlink from there, so one
    swapped in while the user decided cannot show another file); the path made absolute on any
    other file system."""
    if not isinstance(fs, LocalFileSystem):
        return absolute(ctx, given)
    return ctx.checked_path(given)


async def entry_target(ctx: RunContext, fs: Any, given: str) -> tuple[str, str | None]:
    """What a change that acts on the name itself (apply_patch's ``Delete File``, a ``Move
    to``'s source) would remove: (path, the symlink's target when the name is a symlink, else
    None).

    On the local disk a name that was a symlink when stage 5 checked it (it resolved to
    ``RunContext.checked_path``) is the link itself, in its directory resolved, and only while
    it still leads to what stage 5 saw (apply_patch then refuses: stage 5 judged the target,
    not the link); any other name is the checked path, as for ``write_target``. Raises
    ``PathChanged`` when the name is no longer what stage 5 saw. Elsewhere: the path made
    absolute (a seam's ``remove`` removes a symlink itself)."""
    lexical = absolute(ctx, given)
    if not isinstance(fs, LocalFileSystem):
        return lexical, None
    checked = ctx.checked_path(given)
    directory, name = os.path.split(lexical)
    try:
        entry = os.path.join(canonical_path(directory), name)
    except (OSError, ValueError):
        entry = lexical
    if entry == checked:
        await fs.refuse_symlinks(entry)
        return entry, None
    link = await fs.read_link(entry)
    try:
        leads_to = canonical_path(entry)
    except (OSError, ValueError):
        leads_to = None
    if link is None or leads_to != checked:
        raise PathChanged(entry, entry)
    return entry, link


async def stat_file(fs: Any, path: str) -> FileStat | None:
    """The stat of the file a writer changes, None when absent: on the local disk the name
    itself, following no symlink (``PathChanged``); elsewhere the seam's ``stat``."""
    if isinstance(fs, LocalFileSystem):
        return await fs.stat_checked(path)
    stat: FileStat | None = await fs.stat(path)
    return stat


async def read_file(fs: Any, path: str) -> tuple[FileStat, bytes]:
    """The file's stat and bytes: one open on the local disk, of the checked path and following
    no symlink (``PathChanged``); stat then read elsewhere.
    Raises ``FileNotFoundError``, ``IsADirectoryError``, ``FileTooLarge``, ..."""
    if isinstance(fs, LocalFileSystem):
        return await fs.read_checked(path, MAX_FILE_BYTES)
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
            f"{name} was not {doing}: {exc.link} changed after the call was checked (a symlink "
            "appeared or was replaced there), and the file tools follow no symlink that was not "
            f"there when the call was checked. Nothing was {doing}; look at the path and call "
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
