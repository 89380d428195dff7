"""``SandboxPolicy``, the default protected and hidden paths (SPEC §22 *Files*)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastgate.paths import PathPattern, compile_path_pattern
from fastgate.permissions import DEFAULT_PROTECTED as _PERMISSIONS_PROTECTED
from fastgate.permissions import DEFAULT_SENSITIVE
from fastgate.sandbox._network import NetworkPolicy

#: The server's home directory as it was when fastgate.sandbox was first imported: a program
#: that changes ``HOME`` does not move what is hidden.
HOME_AT_START = os.path.expanduser("~")

#: Paths that stay read-only inside the writable roots, existing or not: the rules' own list.
#: Of it, git's indirections are the planner's to place (``GIT_INDIRECTIONS``): it finds every
#: git directory of a root and protects them as git needs (an absent ``commondir`` becomes a
#: placeholder git reads as none, where a plain one would break git).
DEFAULT_PROTECTED: tuple[str, ...] = _PERMISSIONS_PROTECTED

#: What a sandboxed program cannot read: the secret files of §5's sensitive list inside the
#: roots (not ``.git/config`` nor git's hooks, which git must read; they stay protected), and
#: the secrets of the server's home directory.
DEFAULT_HIDDEN: tuple[str, ...] = (
    *(p for p in DEFAULT_SENSITIVE if p not in ("**/.git/config", "**/.git/hooks/**")),
    "~/.ssh",
    "~/.aws",
    "~/.gnupg",
    "~/.netrc",
    "~/.config/gcloud",
    "~/.docker/config.json",
    "~/.kube",
)


def _compile(patterns: Iterable[str], what: str) -> tuple[tuple[str, ...], tuple[PathPattern, ...]]:
    if isinstance(patterns, str | bytes):
        raise TypeError(f"{what}: expected a sequence of path patterns, not one string")
    texts: list[str] = []
    compiled: list[PathPattern] = []
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(f"{what}: patterns are strings, got {pattern!r}")
        # ``~/`` is the server's home as it was at start, whatever HOME says now.
        spelled = (
            "/" + HOME_AT_START.rstrip("/") + pattern[1:] if pattern.startswith("~/") else pattern
        )
        try:
            compiled.append(compile_path_pattern(spelled))
        except ValueError as exc:
            raise ValueError(f"{what}: {pattern!r}: {exc}") from None
        texts.append(pattern)
    return tuple(texts), tuple(compiled)


def _paths(paths: Iterable[str], what: str) -> tuple[str, ...]:
    if isinstance(paths, str | bytes):
        raise TypeError(f"{what}: expected a sequence of paths, not one string")
    out = []
    for path in paths:
        if not isinstance(path, str) or not path or "\x00" in path:
            raise ValueError(f"{what}: not a usable path: {path!r}")
        out.append(path)
    return tuple(out)


@dataclass(frozen=True)
class SandboxPolicy:
    """What a sandboxed command may do (SPEC §22).

    ``writable``: directories it may write besides the roots of each call (``Shell.run(...,
    roots=...)``) and its private temporary directory. ``read_only``: paths that stay read-only
    (a root listed here, or inside one, is not writable at all). ``protected``: path patterns
    (§5's syntax) that stay read-only inside the writable roots, existing or not (an absent one
    cannot be created). ``hidden``: path patterns it cannot read (``~/`` is the server's home
    as it was at start). ``network``: ``None`` for no network at all, or a ``NetworkPolicy``
    (only through fastgate's proxy). ``require``: fail every call where the OS cannot confine
    it, instead of running it unconfined with a warning. ``max_processes``: processes and
    threads alive at once; ``max_tmp_bytes``: the private temporary directory's size.
    """

    writable: Iterable[str] = ()
    read_only: Iterable[str] = ()
    protected: Iterable[str] = DEFAULT_PROTECTED
    hidden: Iterable[str] = DEFAULT_HIDDEN
    network: NetworkPolicy | None = None
    require: bool = False
    max_processes: int = 256
    max_tmp_bytes: int = 1 << 30
    protected_patterns: tuple[PathPattern, ...] = field(init=False, repr=False, compare=False)
    hidden_patterns: tuple[PathPattern, ...] = field(init=False, repr=False, compare=False)

    async def confinement(self, *, roots: Sequence[str] | None, cwd: str) -> Any:
        """The confinement of one command under this policy, for a spawner other than the
        shell (a command hook): ``None`` where this host cannot confine it and ``require`` is
        false; ``OSError`` when it is required but cannot be. (Spawners below the sandbox in
        the layout call this method rather than importing the sandbox.)"""
        from fastgate.sandbox._launch import confinement_for

        return await confinement_for(self, roots=roots, cwd=cwd)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "writable", _paths(self.writable, "writable"))
        set_(self, "read_only", _paths(self.read_only, "read_only"))
        protected, protected_patterns = _compile(self.protected, "protected")
        hidden, hidden_patterns = _compile(self.hidden, "hidden")
        set_(self, "protected", protected)
        set_(self, "hidden", hidden)
        set_(self, "protected_patterns", protected_patterns)
        set_(self, "hidden_patterns", hidden_patterns)
        if self.network is not None and not isinstance(self.network, NetworkPolicy):
            raise TypeError(f"network: expected a NetworkPolicy or None, got {self.network!r}")
        if type(self.require) is not bool:
            raise ValueError(f"require: expected True or False, got {self.require!r}")
        for name, low in (("max_processes", 8), ("max_tmp_bytes", 1 << 20)):
            value = getattr(self, name)
            if type(value) is not int or value < low or value > (1 << 62):
                raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
