"""Shared pieces of the built-in tools' tests: an executor with the built-ins on a temporary
workspace, and an in-memory ``FileSystem`` (a server's own seam)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from fastgate import (
    ConcurrencyScheduler,
    ExecutionContext,
    FileLockManager,
    PermissionConfig,
    PermissionMode,
    SchedulerLimits,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
)
from fastgate.builtin import FileStat, LocalFileSystem, find_ripgrep, register_builtins

#: The routes a search takes: ripgrep, and the seam's walk over the disk and over memory.
SEARCH_ROUTES = ("ripgrep", "seam-disk", "seam-memory")


def search_fs(workspace: Path, route: str, tree: dict[str, bytes]) -> Any:
    """A file system holding ``tree`` (relative path -> content) under ``workspace``, searched
    on ``route``: in memory, or written to disk and searched by ripgrep or the seam's walk."""
    root = str(workspace)
    if route == "seam-memory":
        return MemoryFileSystem({f"{root}/{p}": data for p, data in tree.items()})
    for rel, data in tree.items():
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return LocalFileSystem(root, ripgrep=find_ripgrep() if route == "ripgrep" else None)


def builtin_executor(
    workspace: Path,
    *,
    mode: PermissionMode = PermissionMode.ACCEPT_EDITS,
    permissions: PermissionConfig | None = None,
    fs: Any = None,
    shell: Any = None,
    **options: Any,
) -> ToolExecutor:
    """The built-ins, private scheduler and locks, ``workspace`` as the root, session "s1"
    (``fs`` and ``shell``: seams for every call, in ``context_defaults``)."""
    registry = ToolRegistry()
    register_builtins(registry)
    defaults: dict[str, Any] = {"session_id": "s1", "workspace_root": str(workspace)}
    if fs is not None:
        defaults["fs"] = fs
    if shell is not None:
        defaults["shell"] = shell
    options.setdefault("scheduler", ConcurrencyScheduler(SchedulerLimits()))
    options.setdefault("locks", FileLockManager())
    return ToolExecutor(
        registry,
        permissions=permissions or PermissionConfig(),
        mode=mode,
        context_defaults=defaults,
        **options,
    )


async def call(
    ex: ToolExecutor, name: str, args: dict[str, Any], session: str = "s1", **ctx: Any
) -> ToolResult:
    return await ex.execute(name, args, ExecutionContext(session_id=session, **ctx))


def text(result: ToolResult) -> str:
    assert isinstance(result.content, str), result.content
    return result.content


def failure_code(result: ToolResult) -> str | None:
    """The tool's own code of a TOOL_FAILURE (``details["code"]``)."""
    assert not result.ok, result.content
    assert result.error is not None
    return result.error.details.get("code")


class MemoryFileSystem:
    """A whole file tree in a dict: what a server's sandbox seam looks like to the tools."""

    def __init__(self, files: dict[str, bytes] | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = {"/"}
        self.mtimes: dict[str, int] = {}
        self.clock = 1_000_000_000
        self.calls: list[tuple[str, str]] = []
        self.fail_writes: set[str] = set()  # writing these paths raises
        for path, data in (files or {}).items():
            self._put(path, data)

    def _put(self, path: str, data: bytes) -> None:
        parent = os.path.dirname(path)
        while parent not in self.dirs:
            self.dirs.add(parent)
            parent = os.path.dirname(parent)
        self.clock += 1
        self.files[path] = data
        self.mtimes[path] = self.clock

    async def stat(self, path: str) -> FileStat | None:
        self.calls.append(("stat", path))
        if path in self.files:
            return FileStat(len(self.files[path]), self.mtimes[path], False)
        if path in self.dirs:
            return FileStat(0, 0, True)
        return None

    async def read_bytes(self, path: str) -> bytes:
        self.calls.append(("read_bytes", path))
        if path in self.dirs:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if path not in self.files:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        return self.files[path]

    async def write_bytes(self, path: str, data: bytes) -> None:
        self.calls.append(("write_bytes", path))
        if path in self.fail_writes:
            raise OSError(errno.EIO, "injected write failure", path)
        if path in self.dirs:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        self._put(path, bytes(data))

    async def remove(self, path: str) -> None:
        self.calls.append(("remove", path))
        if path not in self.files:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        del self.files[path]
        del self.mtimes[path]

    async def list_dir(self, path: str) -> list[str]:
        self.calls.append(("list_dir", path))
        if path not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        prefix = path.rstrip("/") + "/"
        names = {
            p[len(prefix) :].split("/")[0]
            for p in (*self.files, *self.dirs)
            if p.startswith(prefix) and p != path
        }
        return sorted(names)


def gone(pid: int) -> bool:
    """Dead: no such process, or a zombie (an orphan's reaper may not have collected it)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def real(path: Path) -> str:
    """The canonical path (what observers and lock keys name)."""
    return os.path.realpath(path)
