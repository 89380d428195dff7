"""Built-in tools over swappable seams (SPEC §16): ``read``, ``write``, ``edit``,
``apply_patch``, ``glob``, ``grep`` and ``bash``.

The tools touch files only through ``RunContext.fs`` (a ``FileSystem``) and run commands only
through ``RunContext.shell`` (a ``Shell``): pass your own with ``ExecutionContext(fs=...,
shell=...)`` (or in ``context_defaults``); unset, a call gets ``LocalFileSystem`` for its
workspace and ``SandboxedShell(SandboxPolicy())`` from ``fastgate.sandbox`` where the host can
confine commands (else ``LocalShell``; pass ``shell=LocalShell()`` to run them unconfined).
Needs the ``builtin`` extra (``pip install 'fastgate[builtin]'``): ``pathspec``,
``google-re2`` and the ``ripgrep`` binary.
"""

from __future__ import annotations

try:
    import pathspec  # noqa: F401
    import re2  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by installs without the extra
    raise ImportError(
        f"fastgate.builtin needs the 'builtin' extra ({exc.name} is missing): "
        "pip install 'fastgate[builtin]'"
    ) from exc

from collections.abc import Iterable
from typing import Any

from fastgate.builtin._fs import FileStat as FileStat
from fastgate.builtin._fs import FileSystem as FileSystem
from fastgate.builtin._fs import LocalFileSystem as LocalFileSystem
from fastgate.builtin._fs import find_ripgrep as find_ripgrep
from fastgate.builtin._shell import LocalShell as LocalShell
from fastgate.builtin._shell import Shell as Shell
from fastgate.builtin._shell import ShellResult as ShellResult
from fastgate.builtin._shell import check_arguments as check_shell_arguments
from fastgate.builtin._tools import ALL
from fastgate.processes import DEFAULT_ENV_DENY as DEFAULT_ENV_DENY
from fastgate.tools import ToolDefinition, ToolRegistry

__all__ = (
    "DEFAULT_ENV_DENY",
    "FileStat",
    "FileSystem",
    "LocalFileSystem",
    "LocalShell",
    "Shell",
    "ShellResult",
    "builtin_tools",
    "check_shell_arguments",
    "find_ripgrep",
    "register_builtins",
)

NAMES: tuple[str, ...] = tuple(tool.name for tool in ALL)


def builtin_tools() -> list[ToolDefinition]:
    """The built-in tools' definitions (the same frozen definitions every time)."""
    return list(ALL)


def register_builtins(
    registry: ToolRegistry, scope: str | None = None, include: Iterable[str] | None = None
) -> list[ToolDefinition]:
    """Register the built-ins (only those named in ``include``, when given) in ``registry``,
    globally or in ``scope``; returns what was registered."""
    if isinstance(include, str):
        raise TypeError("include: expected a list of tool names, not a single string")
    wanted = NAMES if include is None else tuple(include)
    unknown = [name for name in wanted if name not in NAMES]
    if unknown:
        raise ValueError(
            f"include: unknown built-in tool(s) {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(NAMES)})"
        )
    chosen = [tool for tool in ALL if tool.name in wanted]
    for tool in chosen:
        registry.register(tool, scope=scope)
    return chosen


_LOCAL: dict[tuple[str, tuple[str, ...]], LocalFileSystem] = {}


def _local_file_system(workspace_root: str, additional_dirs: tuple[str, ...]) -> LocalFileSystem:
    """One ``LocalFileSystem`` per workspace (the read records of a session live with it)."""
    key = (workspace_root, additional_dirs)
    fs = _LOCAL.get(key)
    if fs is None:
        if len(_LOCAL) >= 256:
            _LOCAL.clear()
        fs = _LOCAL[key] = LocalFileSystem(workspace_root, additional_dirs)
    return fs


_LOCAL_SHELL: LocalShell | None = None


def _local_shell() -> LocalShell:
    """One shell for every workspace (the directory and the roots are given to each ``run``):
    ``SandboxedShell(SandboxPolicy())`` where this host can confine commands (workspace-write,
    no network), else ``LocalShell``."""
    global _LOCAL_SHELL
    shell = _LOCAL_SHELL
    if shell is None:
        from fastgate.sandbox import SandboxedShell, SandboxPolicy, sandbox_support

        shell = SandboxedShell(SandboxPolicy()) if sandbox_support().available else LocalShell()
        _LOCAL_SHELL = shell
    return shell


def local_seam(name: str, workspace_root: str, additional_dirs: tuple[str, ...]) -> Any:
    """The seam ``name`` (``"fs"`` or ``"shell"``) a call gets when neither its context nor
    ``context_defaults`` sets one: the local file system of its workspace, or the local shell."""
    if name == "fs":
        return _local_file_system(workspace_root, additional_dirs)
    if name == "shell":
        return _local_shell()
    raise ValueError(f"no local seam named {name!r}")
