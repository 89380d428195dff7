"""The file-system seam (SPEC §16): ``FileStat``, the ``FileSystem`` protocol, ``LocalFileSystem``.

Tools touch files only through a ``FileSystem`` (``RunContext.fs``), so a server can hand them a
sandbox or an in-memory tree instead of the disk. Every method is async and takes absolute paths
that stage 5 already checked; errors are the ``OSError`` subclasses Python uses
(``FileNotFoundError``, ``IsADirectoryError``, ``NotADirectoryError``, ``PermissionError``).

``LocalFileSystem`` checks again at use. The seam's reads (``read_bytes``, ``stat``,
``list_dir``) open each path component by component beneath the allowed roots
(``fastgate.paths.open_beneath``), following symlinks only while they stay inside, so a directory
swapped for a symlink to the outside after stage 5 cannot carry a read out.
Changes (``write_bytes``, ``remove``) and the file tools' own reads (``read_checked``,
``stat_checked``) follow no symlink at all: the tools pass the canonical path stage 5 resolved
(``RunContext.checked_path``), and every component of it is opened with ``O_NOFOLLOW`` from ``/``
down, so a symlink that appeared since, pointing inside the workspace or out, makes the call fail
with ``PathChanged`` before anything is read or written (a read whose new symlink leads out of the
roots raises ``WorktreeEscape`` instead, which says so). Every operation then works on the
descriptor it opened. Blocking calls run in the loop's default executor.
"""

from __future__ import annotations

import asyncio
import errno
import os
import secrets
import shutil
import stat as stat_
import sys
import sysconfig
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from fastgate.paths import (
    MAX_SYMLINKS,
    WorktreeEscape,
    WorktreeViolation,
    allowed_roots,
    describe_roots,
    is_within,
    open_beneath,
)

T = TypeVar("T")
_O_PATH = getattr(os, "O_PATH", 0)
_STAT_FLAGS = (_O_PATH or (os.O_RDONLY | os.O_NONBLOCK)) | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class FileStat:
    """What ``FileSystem.stat`` tells: ``size`` in bytes, ``mtime_ns``, ``is_dir``;
    ``is_symlink`` when the name itself is a symlink (walks do not follow those);
    ``is_special`` for a FIFO, socket or device (searches skip those without opening them)."""

    size: int
    mtime_ns: int
    is_dir: bool
    is_symlink: bool = False
    is_special: bool = False


@runtime_checkable
class FileSystem(Protocol):
    """The seam the built-in tools use for files. Paths are absolute and already checked."""

    async def stat(self, path: str) -> FileStat | None:
        """The file's stat, following a symlink; None when nothing is there."""
        ...

    async def read_bytes(self, path: str) -> bytes: ...

    async def write_bytes(self, path: str, data: bytes) -> None:
        """Replace the file atomically (readers see the old or the new bytes, never a mix);
        missing parent directories are created. The local file system follows no symlink on
        ``path`` (``PathChanged``): writers pass the path stage 5 resolved."""
        ...

    async def remove(self, path: str) -> None:
        """Delete a file (a symlink itself, not its target); never a directory. The local file
        system follows no symlink on ``path``'s directories (``PathChanged``)."""
        ...

    async def list_dir(self, path: str) -> list[str]:
        """The names of a directory's entries."""
        ...


class FileTooLarge(OSError):
    """``read_stat(path, limit)`` found the file larger than ``limit`` bytes (nothing read)."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{size} bytes, over the {limit} bytes read at once", path)
        self.size = size
        self.limit = limit


class PathChanged(OSError):
    """A symlink is on a path a change was to follow no symlink on: one appeared after the call
    was checked (nothing was changed)."""

    def __init__(self, path: str, link: str) -> None:
        super().__init__(errno.ELOOP, f"{link} is now a symlink", path)
        self.link = link


class NotARegularFile(OSError):
    """A FIFO, socket or device: reading it could block or never end."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.EINVAL, "not a regular file", path)


class LocalFileSystem:
    """The disk, confined to ``workspace_root`` and ``additional_dirs`` at every use.

    ``ripgrep``: the ``rg`` binary ``grep`` and ``glob`` may run on this file system: ``"auto"``
    (found on ``PATH`` or beside the interpreter), a path, or None (never: search over the seam).
    """

    __slots__ = ("_dirs", "_root", "ripgrep")

    def __init__(
        self,
        workspace_root: str,
        additional_dirs: Iterable[str] = (),
        *,
        ripgrep: str | None = "auto",
    ) -> None:
        if not isinstance(workspace_root, str) or not os.path.isabs(workspace_root):
            raise ValueError(f"workspace_root must be an absolute path, got {workspace_root!r}")
        self._root = workspace_root
        self._dirs = tuple(additional_dirs)
        self.ripgrep = find_ripgrep() if ripgrep == "auto" else ripgrep

    def __repr__(self) -> str:
        return f"LocalFileSystem({self._root!r}, {self._dirs!r})"

    @property
    def roots(self) -> tuple[str, ...]:
        """The canonical roots every path must stay inside."""
        return allowed_roots(self._root, self._dirs)

    # -- the seam ------------------------------------------------------------------------------

    async def stat(self, path: str) -> FileStat | None:
        return await _offload(self.stat_now, path)

    async def read_bytes(self, path: str) -> bytes:
        return (await _offload(self.read_now, path, None))[1]

    async def read_stat(self, path: str, limit: int | None = None) -> tuple[FileStat, bytes]:
        """The file's stat and bytes from one open descriptor (they agree); ``FileTooLarge``
        without reading when it is over ``limit`` bytes."""
        return await _offload(self.read_now, path, limit)

    async def write_bytes(self, path: str, data: bytes) -> None:
        await _offload(self.write_now, path, data)

    async def remove(self, path: str) -> None:
        await _offload(self.remove_now, path)

    async def read_checked(self, path: str, limit: int | None = None) -> tuple[FileStat, bytes]:
        """``read_stat`` of the path stage 5 checked, following no symlink: ``PathChanged`` when
        a component of ``path`` (the last included) is a symlink now, ``WorktreeEscape`` when
        that symlink leads out of the roots; ``NotARegularFile`` for a FIFO, socket or device,
        which is never opened."""
        return await _offload(self.read_checked_now, path, limit)

    async def stat_checked(self, path: str) -> FileStat | None:
        """The stat of ``path`` itself, following no symlink (``PathChanged`` for one on the
        way or at the end); None when nothing is there."""
        return await _offload(self.stat_checked_now, path)

    async def read_link(self, path: str) -> str | None:
        """The target of the symlink ``path`` names (its directories followed by none:
        ``PathChanged``); None when ``path`` is not a symlink."""
        return await _offload(self.read_link_now, path)

    async def remove_link(self, path: str, target: str) -> None:
        """Remove the symlink ``path`` (the link, never what it leads to), its directories
        followed by none; ``PathChanged`` unless it is still a symlink to ``target``."""
        await _offload(self.remove_link_now, path, target)

    async def make_link(self, path: str, target: str) -> None:
        """Create the symlink ``path`` -> ``target`` (putting back one removed), its directories
        followed by none."""
        await _offload(self.make_link_now, path, target)

    async def refuse_symlinks(self, path: str) -> None:
        """Raise ``PathChanged`` when a component of ``path`` (the last included) is a symlink,
        ``WorktreeEscape`` when ``path`` is outside the roots: what a writer checks before it
        reads the file it is about to change. Missing components are fine."""
        await _offload(self.refuse_symlinks_now, path)

    async def list_dir(self, path: str) -> list[str]:
        return await _offload(self.list_now, path)

    # -- the same, blocking (for worker threads) ---------------------------------------------

    def stat_now(self, path: str) -> FileStat | None:
        try:
            parent, name = self._parent(path, follow_last=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except _RootItself:
            fd = self._open(path, _STAT_FLAGS)
            try:
                return _file_stat(os.fstat(fd), False)
            finally:
                os.close(fd)
        try:
            try:
                own = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return None
            if not stat_.S_ISLNK(own.st_mode):
                return _file_stat(own, False)
        finally:
            os.close(parent)
        try:  # a symlink: what it leads to, as long as that stays inside the roots
            fd = self._open(path, _STAT_FLAGS)
        except (FileNotFoundError, NotADirectoryError, WorktreeEscape, OSError):
            return FileStat(0, own.st_mtime_ns, False, True)
        try:
            return _file_stat(os.fstat(fd), True)
        finally:
            os.close(fd)

    def _open_for_reading(self, path: str) -> int:
        try:
            return self._open(path, _READ_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a socket (or a device with nothing behind it)
                raise NotARegularFile(path) from None
            raise

    def read_now(self, path: str, limit: int | None) -> tuple[FileStat, bytes]:
        fd = self._open_for_reading(path)
        return _read_open(fd, path, limit)

    def read_checked_now(self, path: str, limit: int | None) -> tuple[FileStat, bytes]:
        try:
            parent, name = self._pinned_parent(path, create=False)
        except PathChanged as changed:
            raise self._changed_or_escaped(path, changed) from None
        try:
            own = os.stat(name, dir_fd=parent, follow_symlinks=False)
            _refuse_kind(own.st_mode, path)
            try:
                fd = os.open(name, _READ_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    raise NotARegularFile(path) from None
                if exc.errno in (errno.ELOOP, errno.EMLINK) and _is_symlink(parent, name):
                    raise PathChanged(path, path) from None
                raise
        except PathChanged as changed:
            raise self._changed_or_escaped(path, changed) from None
        finally:
            os.close(parent)
        return _read_open(fd, path, limit)

    def stat_checked_now(self, path: str) -> FileStat | None:
        try:
            parent, name = self._pinned_parent(path, create=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            own = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        finally:
            os.close(parent)
        if stat_.S_ISLNK(own.st_mode):
            raise PathChanged(path, path)
        return _file_stat(own, False)

    def read_link_now(self, path: str) -> str | None:
        parent, name = self._pinned_parent(path, create=False)
        try:
            return os.readlink(name, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # there, and not a symlink
                return None
            raise
        finally:
            os.close(parent)

    def remove_link_now(self, path: str, target: str) -> None:
        parent, name = self._pinned_parent(path, create=False)
        try:
            try:
                now = os.readlink(name, dir_fd=parent)
            except OSError as exc:
                if exc.errno == errno.EINVAL:
                    raise PathChanged(path, path) from None  # no longer the symlink it was
                raise
            if now != target:
                raise PathChanged(path, path)
            os.unlink(name, dir_fd=parent)
        finally:
            os.close(parent)

    def make_link_now(self, path: str, target: str) -> None:
        parent, name = self._pinned_parent(path, create=False)
        try:
            os.symlink(target, name, dir_fd=parent)
        finally:
            os.close(parent)

    def write_now(self, path: str, data: bytes) -> None:
        parent, name = self._pinned_parent(path, create=True)
        temp = None
        try:
            try:
                old = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                old = None
            if old is not None and stat_.S_ISLNK(old.st_mode):
                raise PathChanged(path, path)
            if old is not None and stat_.S_ISDIR(old.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            if old is not None and not stat_.S_ISREG(old.st_mode):
                raise NotARegularFile(path)
            temp = f".fastgate-{secrets.token_hex(6)}.tmp"
            create_mode = 0o600 if old is not None else 0o666  # a new file gets the umask
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temp, flags, create_mode, dir_fd=parent)
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                if old is not None:
                    os.fchmod(fd, stat_.S_IMODE(old.st_mode))
                    if old.st_uid != os.geteuid() or old.st_gid != os.getegid():
                        try:
                            os.fchown(fd, old.st_uid, old.st_gid)
                        except PermissionError:
                            pass  # not ours to give away: the new file stays ours
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
            temp = None
            os.fsync(parent)  # the rename itself survives a crash
        finally:
            if temp is not None:
                try:
                    os.unlink(temp, dir_fd=parent)
                except OSError:
                    pass
            os.close(parent)

    def remove_now(self, path: str) -> None:
        parent, name = self._pinned_parent(path, create=False)
        try:
            own = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat_.S_ISDIR(own.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            os.unlink(name, dir_fd=parent)
        finally:
            os.close(parent)

    def refuse_symlinks_now(self, path: str) -> None:
        try:
            parent, name = self._pinned_parent(path, create=False)
        except FileNotFoundError:
            return  # a directory on the way is missing: nothing there can be a symlink
        try:
            own = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return
        finally:
            os.close(parent)
        if stat_.S_ISLNK(own.st_mode):
            raise PathChanged(path, path)

    def list_now(self, path: str) -> list[str]:
        fd = self._open(path, _DIR_FLAGS)
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def open_regular_now(self, path: str) -> int:
        """A descriptor reading the regular file ``path``, opened beneath the roots (a symlink
        followed only while it stays inside); ``NotARegularFile`` for anything else, which is
        never read (a FIFO opened here does not block: it is opened non-blocking)."""
        fd = self._open_for_reading(path)
        try:
            if not stat_.S_ISREG(os.fstat(fd).st_mode):
                raise NotARegularFile(path)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_search_root_now(self, path: str) -> tuple[int, bool]:
        """An ``O_PATH`` descriptor of ``path`` opened beneath the roots, and whether it is a
        directory: a search pinned to it cannot be swapped elsewhere. ``NotARegularFile`` for
        a FIFO, socket or device (a search of it could block forever)."""
        fd = self._open(path, _STAT_FLAGS)
        try:
            mode = os.fstat(fd).st_mode
            if not (stat_.S_ISDIR(mode) or stat_.S_ISREG(mode)):
                raise NotARegularFile(path)
        except BaseException:
            os.close(fd)
            raise
        return fd, stat_.S_ISDIR(mode)

    # -- confinement -------------------------------------------------------------------------

    def _open(self, path: str, flags: int) -> int:
        return open_beneath(path, flags, self._root, self._dirs)

    def _changed_or_escaped(self, path: str, changed: PathChanged) -> OSError:
        """What a read refused for a symlink that appeared on ``path`` reports: the escape when
        following it now would leave the roots (the read is refused either way)."""
        try:
            fd = self._open(path, _STAT_FLAGS)
        except WorktreeEscape as escape:
            return escape
        except OSError:
            return changed
        os.close(fd)
        return changed

    def _parent(self, path: str, *, follow_last: bool) -> tuple[int, str]:
        """(a descriptor of the directory holding ``path``, opened beneath the roots; the name
        in it). ``follow_last`` follows a symlink at the end (within the roots) to the file it
        names."""
        links = 0
        while True:
            directory, name = os.path.split(os.path.normpath(path))
            if name in ("", ".", ".."):
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            try:
                parent = self._open(directory, _DIR_FLAGS)
            except WorktreeEscape:
                if self._is_root(path):
                    raise _RootItself(path) from None
                raise
            if not follow_last:
                return parent, name
            try:
                target = os.readlink(name, dir_fd=parent)
            except (FileNotFoundError, NotADirectoryError):
                return parent, name
            except OSError as exc:
                if exc.errno == errno.EINVAL:  # not a symlink
                    return parent, name
                os.close(parent)
                raise
            links += 1
            if links > MAX_SYMLINKS:
                os.close(parent)
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            base = _descriptor_path(parent) or directory
            os.close(parent)
            path = os.path.normpath(os.path.join(base, target))

    def _pinned_parent(self, path: str, *, create: bool) -> tuple[int, str]:
        """(a descriptor of the directory holding ``path``; the name in it), every directory
        opened from ``/`` down with ``O_NOFOLLOW``: the path is taken as it is, a symlink on
        it raises ``PathChanged``. ``path`` must lie inside the roots as written (it names
        what it names: no symlink is followed); ``create`` makes the missing directories
        below the root."""
        if not os.path.isabs(path):
            raise ValueError(f"expected an absolute path, got {path!r}")
        path = self._on_canonical_root(os.path.normpath(path))
        directory, name = os.path.split(path)
        if name in ("", ".", ".."):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        root = next((r for r in self.roots if is_within(path, r) and path != r), None)
        if root is None:
            if path in self.roots:
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            raise WorktreeEscape(_outside(path, self.roots))
        parts = [p for p in directory.split("/") if p]
        existing = len([p for p in root.split("/") if p])  # the root and above: never made
        fd = os.open("/", _DIR_FLAGS)
        try:
            for depth, part in enumerate(parts):
                fd = _replace(fd, _open_dir_pinned(fd, part, path, create and depth >= existing))
        except BaseException:
            os.close(fd)
            raise
        return fd, name

    def _on_canonical_root(self, path: str) -> str:
        """``path`` under a root spelt as given (a workspace reached through a symlink), moved
        to that root's canonical form, resolved when this file system was made: the roots are
        trusted, only what lies below them is taken as written."""
        for given in (self._root, *self._dirs):
            spelt = os.path.normpath(os.path.abspath(given))
            if spelt != "/" and is_within(path, spelt):
                canonical = allowed_roots(given, ())
                if canonical and canonical[0] != spelt:
                    return canonical[0] + path[len(spelt) :]
                return path
        return path

    def _is_root(self, path: str) -> bool:
        try:
            real = os.path.realpath(path)
        except (OSError, ValueError):
            return False
        return real in self.roots


class _RootItself(Exception):
    """``_parent`` of an allowed root: its directory lies outside the roots."""


def _open_dir_pinned(parent: int, name: str, path: str, create: bool) -> int:
    """The directory ``name`` in ``parent``, opened without following a symlink (made first
    when missing and ``create``)."""
    try:
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_symlink(parent, name):
            raise PathChanged(path, _descriptor_child(parent, name)) from None
        raise
    try:
        os.mkdir(name, 0o777, dir_fd=parent)
    except FileExistsError:
        pass  # made meanwhile: opened like any other, a symlink refused
    try:
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_symlink(parent, name):
            raise PathChanged(path, _descriptor_child(parent, name)) from None
        raise


def _refuse_kind(mode: int, path: str) -> None:
    """Raise unless ``mode`` (an ``lstat``'s) is a regular file's: a symlink (``PathChanged``),
    a directory, or a FIFO, socket or device (never opened: it could block, or have effects)."""
    if stat_.S_ISREG(mode):
        return
    if stat_.S_ISLNK(mode):
        raise PathChanged(path, path)
    if stat_.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", path)
    raise NotARegularFile(path)


def _read_open(fd: int, path: str, limit: int | None) -> tuple[FileStat, bytes]:
    """The stat and bytes of the file open on ``fd`` (closed here): a regular file only."""
    try:
        st = os.fstat(fd)
        if stat_.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if not stat_.S_ISREG(st.st_mode):
            raise NotARegularFile(path)
        if limit is not None and st.st_size > limit:
            raise FileTooLarge(path, st.st_size, limit)
        chunks: list[bytes] = []
        want = st.st_size + 1  # one more: a file that grew meanwhile is read to its end
        while True:
            chunk = os.read(fd, max(want, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            want = 1 << 20
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return _file_stat(st, False), data
    finally:
        os.close(fd)


def _is_symlink(parent: int, name: str) -> bool:
    try:
        return stat_.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _descriptor_child(parent: int, name: str) -> str:
    base = _descriptor_path(parent)
    return name if base is None else os.path.join(base, name)


def _replace(old: int, new: int) -> int:
    os.close(old)
    return new


def _outside(path: str, roots: tuple[str, ...]) -> WorktreeViolation:
    reason = "it is outside the workspace"
    message = f"path {path!r} is refused: {reason}. Use a path inside {describe_roots(roots)}."
    return WorktreeViolation("path", path, path, roots, reason, message)


def _file_stat(st: os.stat_result, is_symlink: bool) -> FileStat:
    mode = st.st_mode
    special = not (stat_.S_ISREG(mode) or stat_.S_ISDIR(mode))
    return FileStat(st.st_size, st.st_mtime_ns, stat_.S_ISDIR(mode), is_symlink, special)


def _descriptor_path(fd: int) -> str | None:
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return path if path.startswith("/") and not path.endswith(" (deleted)") else None


async def _offload(fn: Callable[..., T], *args: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


_RIPGREP: list[str | None] = []


def find_ripgrep() -> str | None:
    """The ``rg`` binary: ``FASTGATE_RIPGREP`` (empty: none), else on ``PATH``, else among this
    interpreter's scripts (where the ``ripgrep`` wheel puts it in a venv). Looked up once."""
    if not _RIPGREP:
        chosen = os.environ.get("FASTGATE_RIPGREP")
        if chosen is None:
            scripts = sysconfig.get_path("scripts")
            beside = os.path.dirname(sys.executable)
            path = os.pathsep.join([os.environ.get("PATH", ""), scripts, beside])
            chosen = shutil.which("rg", path=path)
        _RIPGREP.append(chosen or None)
    return _RIPGREP[0]
