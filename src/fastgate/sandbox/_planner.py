"""From a policy and a call's roots to the launcher's plan (the steps it makes, in order).

The server computes everything here (paths, what exists, the Landlock rules, the seccomp
program); the launcher only makes the system calls.

- ``layout``: the call's paths: writable roots, the protected paths inside them (existing
  ones, and the first missing component of each absent one, made as a placeholder by the
  launcher), the directories pinned between a root and a protected path (a mount point cannot
  be renamed, so a protected path cannot be moved away with its parent), hidden paths (found by
  a bounded walk of the roots, cached until a directory changes, and the literal ones outside).
- ``namespace_steps``: the plan under namespaces: every mount read-only, nosuid and nodev, a
  private ``/tmp`` and ``/dev/shm``, the roots writable again, the usable device files, pins,
  protected paths read-only, hidden paths covered, a fresh ``/proc``; then Landlock (when the
  kernel has it), capabilities, limits and seccomp in the command.
- ``landlock_steps``: the plan without namespaces: Landlock grants reads everywhere but the
  hidden paths outside the roots, writes in the roots and a private temporary directory;
  seccomp, capabilities and limits as above; the launcher watches the bounds.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fastgate import ErrorCode, ToolFault
from fastgate.paths import Glob, PathPattern
from fastgate.permissions import (
    CLIENT_SETTINGS,
    GIT_INDIRECTIONS,
    HOOK_MANAGERS,
    OTHER_VCS_CONFIGS,
    git_reads,
    gitfile_target,
    read_pointer,
)
from fastgate.processes import (
    BIND_DEVICES,
    BIND_OPTIONAL,
    BIND_READONLY,
    BIND_RECURSIVE,
    Op,
    Plan,
    Step,
)
from fastgate.sandbox import _kernel, _links, _memory, _submodules
from fastgate.sandbox._policy import SandboxPolicy

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PROXY_PORT = 3128  # the proxy's port inside a network namespace of the command's own
RLIMIT_NPROC = 6
#: Device files a command may use (read and write); every other device stays closed.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
#: What stays read-only in the command's /proc (as the kernel's settings are outside).
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
#: Directories the walk for hidden and protected paths does not enter (their own copies of
#: such files are a package's, not the user's; ``.git`` is looked into one level).
SKIPPED = frozenset(
    {"node_modules", ".venv", "venv", "__pycache__", ".tox", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", ".cache"}
)  # fmt: skip
WALK_BUDGET = 20_000  # entries per root: past it, the rest of a huge tree is not searched
LINK_BUDGET = 100_000  # entries looked through for a hidden file's other names, when needed
_GLOB = re.compile(r"[*?\[\\]")
log = logging.getLogger("fastgate.sandbox")


@dataclass(frozen=True, slots=True)
class Layout:
    """The paths of one call's sandbox (canonical)."""

    roots: tuple[str, ...]  # writable
    visible: tuple[str, ...]  # under /tmp but not writable: shown read-only in a private /tmp
    read_only: tuple[str, ...]  # existing paths inside the roots bound read-only
    placeholders: tuple[tuple[str, str, str], ...]  # (directory, name, kind "f"/"d")
    pins: tuple[str, ...]
    hidden: tuple[str, ...]  # inside the roots
    hidden_outside: tuple[str, ...]  # outside every root (the home directory's secrets)
    cwd: str


def _canonical(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _outermost(paths: Iterable[str]) -> tuple[str, ...]:
    """``paths`` without those inside another (sorted, so parents come first)."""
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(_within(path, parent) for parent in kept):
            kept.append(path)
    return tuple(kept)


def _literal(pattern: PathPattern) -> tuple[str, ...] | None:
    """The fixed path a pattern names (``.git/hooks`` for ``**/.git/hooks/**``), or ``None``
    when it has a wildcard of its own."""
    segments = list(pattern.segments)
    while segments and segments[-1] == "**":
        segments.pop()  # everything below a directory: the directory itself
    if not segments or any(_GLOB.search(s) for s in segments):
        return None
    return tuple(segments)


def _names_directory(pattern: PathPattern, text: str) -> bool:
    return text.endswith("/") or (bool(pattern.segments) and pattern.segments[-1] == "**")


@dataclass(slots=True)
class _Known:
    policy: SandboxPolicy
    layout: Layout
    watched: Watched  # the layout holds while none of these directories changes
    unlistable: tuple[str, ...]  # ... and none of these can be listed again


_LAYOUTS: dict[tuple[int, tuple[str, ...] | None, str], _Known] = {}
_SETTLED_NS = 100_000_000  # an mtime this recent may hide a change in the same clock tick


# The caches below are shared by every call: one layout is computed at a time (off the event
# loop, in a worker thread), so that two calls never interleave their updates.
_LAYOUT_LOCK = threading.Lock()


def layout(policy: SandboxPolicy, roots: Sequence[str] | None, cwd: str) -> Layout:
    """The paths of a call with ``roots`` (``None``: ``cwd`` alone) under ``policy``; reused
    while no directory it was read from has changed. Blocking (it lists and reads the roots):
    call it from a worker thread, as ``Confinement.open`` does."""
    with _LAYOUT_LOCK:
        return _layout_locked(policy, roots, cwd)


def _layout_locked(policy: SandboxPolicy, roots: Sequence[str] | None, cwd: str) -> Layout:
    key = (id(policy), None if roots is None else tuple(roots), cwd)
    known = _LAYOUTS.get(key)
    if (
        known is not None
        and known.policy is policy
        and _unchanged(known.watched)
        and not _listable_again(known.unlistable)
    ):
        return known.layout
    watched: Watched = {}
    unlistable: list[str] = []
    found = _layout(policy, roots, cwd, watched, unlistable)
    if _settled(watched):
        if len(_LAYOUTS) >= 256:
            _LAYOUTS.clear()
        _LAYOUTS[key] = _Known(policy, found, watched, tuple(unlistable))
    else:
        _LAYOUTS.pop(key, None)
    return found


Watched = dict[str, tuple[int, frozenset[str] | None]]  # directory -> (mtime_ns, entries)
# Where placeholders come and go (a root, its .git), a changed mtime may be only theirs: such a
# directory is kept with its entries, and is unchanged while they are, but for the names a
# placeholder may take.
_PLACEHOLDER_NAMES = frozenset(
    {".claude", ".fastgate", ".mcp.json", ".git", "hooks", "config", "commondir", "config.worktree"}
)


def _watch(watched: Watched, directory: str, listed: bool = False) -> None:
    if directory in watched and (watched[directory][1] is not None or not listed):
        return
    try:
        mtime = os.stat(directory).st_mtime_ns
    except OSError:
        watched[directory] = (-1, None)
        return
    watched[directory] = (mtime, _entries(directory) if listed else None)


def _entries(directory: str) -> frozenset[str] | None:
    try:
        return frozenset(os.listdir(directory)) - _PLACEHOLDER_NAMES
    except OSError:
        return None


def _settled(watched: Watched) -> bool:
    """Whether every mtime is old enough that a later change gives another one (a directory
    kept with its entries is compared by them instead)."""
    now = time.time_ns()
    return all(
        mtime < 0 or entries is not None or now - mtime > _SETTLED_NS
        for mtime, entries in watched.values()
    )


def _unchanged(watched: Watched) -> bool:
    for path, (mtime, entries) in watched.items():
        try:
            now = os.stat(path).st_mtime_ns
        except OSError:
            if mtime >= 0:
                return False
            continue
        if now == mtime:
            continue
        if entries is None or _entries(path) != entries:
            return False
        watched[path] = (now, entries)  # the same entries under a new mtime
    return True


def _layout(
    policy: SandboxPolicy,
    roots: Sequence[str] | None,
    cwd: str,
    watched: Watched,
    unlistable: list[str],
) -> Layout:
    cwd = _canonical(cwd)
    asked = [cwd] if roots is None else [_canonical(r) for r in roots]
    asked += [_canonical(w) for w in policy.writable]
    read_only = [_canonical(p) for p in policy.read_only]
    writable = _outermost(
        r for r in asked if os.path.isdir(r) and not any(_within(r, ro) for ro in read_only)
    )
    visible = _outermost(
        p for p in [cwd, *asked] if _within(p, "/tmp") and not any(_within(p, w) for w in writable)
    )
    protected: set[str] = set()
    placeholders: dict[str, tuple[str, str, str]] = {}
    hidden: set[str] = set()
    for directory in {os.path.dirname(p) for p in [cwd, *asked, *read_only]}:
        _watch(watched, directory)
    # Every root asked inside a writable one (the workspace inside an additional directory
    # that holds it) gets its own literal protected paths, placeholders included, as the
    # outermost one does.
    inner = sorted(r for r in set(asked) if os.path.isdir(r))
    walked: list[_Walked] = []
    for root in writable:
        tops = tuple(r for r in inner if _within(r, root) and r != root)
        found = _search(root, policy, tops)
        walked.append(found)
        unlistable += found.unlistable
        hidden.update(found.hidden)
        protected.update(found.protected)
        for directory, state in found.directories.items():
            watched.setdefault(directory, state)
        for pattern, text in zip(policy.protected_patterns, policy.protected, strict=True):
            if text in GIT_INDIRECTIONS or text in OTHER_VCS_CONFIGS:
                continue  # placed below, in each repository found, as its tool reads them
            if text in CLIENT_SETTINGS or text in HOOK_MANAGERS:
                # Read-only where the search found them, not covered where absent: a placeholder
                # ``.vscode`` or ``.husky`` made for each call would be read, and found
                # unreadable, by the editor the user has open on the workspace or by the hook
                # manager. The rules still ask for every write that names one.
                continue
            for top in (root, *tops):
                if any(_within(top, ro) for ro in read_only):
                    continue  # read-only as a whole
                for target in _literal_targets(pattern, top):
                    _protect(target, _names_directory(pattern, text), root, protected, placeholders)
                    _watch_along(watched, top, target)
        # git takes its configuration and hooks from whatever its control files name: a ``.git``
        # file, ``commondir``, a submodule's or worktree's own git directory. Each is protected
        # as its configuration is, so that no command can point the user's git elsewhere.
        protected.update(p for p in found.git_files if _within(p, root))
        for git_dir in found.git_dirs:
            home = next((w for w in writable if _within(git_dir, w)), None)
            if home is None:
                continue  # outside every root: read-only as it is
            for name, is_dir, cover in _GIT_CONTROL:
                path = os.path.join(git_dir, name)
                if cover == _KEPT_EMPTY:
                    _make_empty_config(path)
                    cover = None
                if is_dir or cover is not None or os.path.lexists(path):
                    _protect(path, is_dir, home, protected, placeholders, cover)
                _watch_along(watched, home, path)
        for work_tree, git_dir in _checkouts(found):
            _protect_submodules(work_tree, git_dir, writable, protected, placeholders, watched)
            _protect_git_reads(work_tree, git_dir, writable, protected, placeholders, watched)
        wanted = [text for text in policy.protected if text in OTHER_VCS_CONFIGS]
        if wanted:
            _protect_other_repositories(root, found, wanted, protected, placeholders, watched)
    for root in _outermost(r for r in asked if os.path.isdir(r) and r not in writable):
        if any(_within(root, w) for w in writable):
            continue  # searched with its writable root
        tops = tuple(sorted(r for r in asked if _within(r, root) and r != root))
        found = _search(root, policy, tops)  # a read-only root hides the same secrets
        unlistable += found.unlistable
        hidden.update(found.hidden)
        for directory, state in found.directories.items():
            watched.setdefault(directory, state)
    # A read-only path inside a writable root is protected as a protected path is: an absent
    # one gets a placeholder (a file, or a directory where it was written with a final "/").
    for path, text in zip(read_only, policy.read_only, strict=True):
        home = next((w for w in writable if _within(path, w) and path != w), None)
        if home is not None:
            _protect(path, text.endswith("/"), home, protected, placeholders)
            _watch_along(watched, home, path)
    protected.update(_memory_inside(writable))
    _coarsen(placeholders, protected, set(inner) | set(writable))
    hosts = {directory for directory, _, _ in placeholders.values()}
    for states in (watched, *(found.directories for found in walked)):
        _list_hosts(states, hosts)
    hidden_outside = set()
    for pattern in policy.hidden_patterns:
        segments = _literal(pattern) if pattern.anchor == "absolute" else None
        if segments is None:
            continue
        path = os.path.join(pattern.prefix, *segments)
        _watch_along(watched, pattern.prefix, path)
        path = _canonical(path)
        if os.path.lexists(path) and not any(_within(path, w) for w in writable):
            hidden_outside.add(path)
    # Pinned: every directory between a root and a guarded path, so that none can be renamed
    # (a protected path moved away, a hidden one moved where the search does not look).
    guarded = [
        *protected,
        *(os.path.join(d, n) for d, n, _ in placeholders.values()),
        *hidden,
    ]
    pins = {
        ancestor
        for path in guarded
        for root in writable
        if _within(path, root) and path != root
        for ancestor in _between(root, path)
    }
    return Layout(
        roots=writable,
        visible=visible,
        read_only=tuple(sorted(protected)),
        placeholders=tuple(sorted(placeholders.values())),
        pins=tuple(sorted(pins)),
        hidden=tuple(sorted(hidden)),
        hidden_outside=tuple(sorted(hidden_outside)),
        cwd=cwd,
    )


#: Placeholders the launcher makes for one call at most (a fixed table in ``fastgate-launcher``).
MAX_PLACEHOLDERS = 64
_COARSENED_TOLD: set[str] = set()


def _coarsen(
    placeholders: dict[str, tuple[str, str, str]], protected: set[str], roots: set[str]
) -> None:
    """Past ``MAX_PLACEHOLDERS``, the directories that would hold the most placeholders are
    made read-only as a whole instead (nothing can be created in them, so every absent path
    they stood for stays uncreatable), until the rest fit. Roots come last, deeper directories
    first: a vendored repository's ``.git`` loses its writes before the workspace does."""
    if len(placeholders) <= MAX_PLACEHOLDERS:
        return
    held: dict[str, int] = {}
    for directory, _, _ in placeholders.values():
        held[directory] = held.get(directory, 0) + 1
    order = sorted(held, key=lambda d: (d in roots, -held[d], -d.count("/"), d))
    coarse: list[str] = []
    for directory in order:
        if len(placeholders) <= MAX_PLACEHOLDERS:
            break
        if any(_within(directory, c) for c in coarse):
            continue  # read-only already with a directory above it
        coarse.append(directory)
        protected.add(directory)
        for component in [c for c in placeholders if _within(c, directory)]:
            del placeholders[component]
    fresh = [d for d in coarse if d not in _COARSENED_TOLD]
    if fresh:
        _COARSENED_TOLD.update(fresh)
        log.warning(
            "the sandbox covers at most %d absent protected paths per call: %s read-only as a "
            "whole instead (commands cannot write there)",
            MAX_PLACEHOLDERS,
            ", ".join(fresh[:5]) + (f" and {len(fresh) - 5} more" if len(fresh) > 5 else ""),
        )


def _memory_inside(writable: Sequence[str]) -> list[str]:
    """The directory where searches are kept, when a writable root holds it: read-only, so
    that no command can make the sandbox forget what it found."""
    memory = _canonical(_memory.directory())
    if not any(_within(memory, w) for w in writable):
        return []
    try:
        os.makedirs(memory, mode=0o700, exist_ok=True)
    except OSError:
        return []
    return [memory]


def _list_hosts(watched: Watched, hosts: Iterable[str]) -> None:
    """Keep the entries of each directory of ``hosts`` that ``watched`` holds by its mtime
    alone: a placeholder made there and removed at each call changes its mtime, not them."""
    for directory in hosts:
        state = watched.get(directory)
        if state is None or state[1] is not None or state[0] < 0:
            continue
        try:
            if os.stat(directory).st_mtime_ns != state[0]:
                continue  # changed since: the next call looks again
            entries = _entries(directory)
            if entries is None or os.stat(directory).st_mtime_ns != state[0]:
                continue
        except OSError:
            continue
        watched[directory] = (state[0], entries)


def _watch_along(watched: Watched, top: str, path: str) -> None:
    """Watch the directories from ``top`` down to ``path``'s parent: an entry made or removed
    in any of them changes what exists along the way (where placeholders may be made, by its
    entries)."""
    _watch(watched, top, listed=True)
    for directory in _between(top, path):
        _watch(watched, directory, listed=os.path.basename(directory) == ".git")


def _between(root: str, path: str) -> list[str]:
    """The directories strictly between ``root`` and ``path``."""
    parts = os.path.relpath(path, root).split(os.sep)[:-1]
    return [os.path.join(root, *parts[: i + 1]) for i in range(len(parts))]


def _literal_targets(pattern: PathPattern, root: str) -> list[str]:
    """Where an absent protected path of ``pattern`` would be created in ``root``."""
    segments = _literal(pattern)
    if segments is None:
        return []
    if pattern.anchor == "absolute":
        path = os.path.join(pattern.prefix, *segments)
        return [path] if _within(path, root) else []
    return [os.path.join(root, *segments)]


def _protect(
    path: str,
    is_dir: bool,
    root: str,
    protected: set[str],
    placeholders: dict[str, tuple[str, str, str]],
    leaf: str | None = None,
) -> None:
    """``path`` read-only if it exists; else its first missing component becomes a placeholder
    (a directory when it is not the last one; the last one of kind ``leaf`` when given).
    Another call's placeholder counts as missing: its launcher removes it when its command
    ends."""
    if os.path.lexists(path) and not _is_placeholder(path):
        protected.add(_canonical(path))
        return
    for component in [*_between(root, path), path]:
        if not os.path.lexists(component) or _is_placeholder(component):
            kind = "d" if is_dir or component != path else (leaf or "f")
            directory, name = os.path.split(component)
            placeholders.setdefault(component, (directory, name, kind))
            return
        if not os.path.isdir(component) or os.path.islink(component):
            return  # a file (or a link) in the way: nothing can be created below it


def _is_placeholder(path: str) -> bool:
    """Made by a launcher for an absent protected path: empty, and nobody's (mode 0); or a git
    directory's ``commondir`` naming the directory itself."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if os.path.basename(path) == "commondir" and stat.S_IMODE(st.st_mode) == _COMMONDIR_MODE:
        return stat.S_ISREG(st.st_mode) and st.st_size == 2 and read_pointer(path) == "."
    if stat.S_IMODE(st.st_mode) != 0:
        return False
    if stat.S_ISREG(st.st_mode):
        return st.st_size == 0
    if stat.S_ISDIR(st.st_mode):
        try:
            return not os.listdir(path)
        except OSError:
            return True  # unreadable: as made
    return False


# git's control files in a git directory, what it reads its configuration and hooks from, and
# what covers each while it is absent: an empty directory for hooks, an unreadable file for the
# configuration, and a commondir naming the directory itself (git cannot read an empty or
# unreadable one). ``config.worktree`` is read where the configuration enables it (which the
# user's own git may do later: ``git sparse-checkout init``), and git cannot read an unreadable
# one: an absent one is made, empty and kept (``_KEPT_EMPTY``), which git reads as none.
_KEPT_EMPTY = "kept-empty"
_GIT_CONTROL: tuple[tuple[str, bool, str | None], ...] = (
    ("hooks", True, None),
    ("config", False, "f"),
    ("commondir", False, "c"),
    ("config.worktree", False, _KEPT_EMPTY),
)
_EMPTY_CONFIG_MODE = 0o444


def _make_empty_config(path: str) -> None:
    """An empty configuration file at ``path`` where there is none, to be protected as an
    existing one is (an empty config is no configuration to git, whatever reads it)."""
    if os.path.lexists(path):
        return
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        os.close(os.open(path, flags, _EMPTY_CONFIG_MODE))
        os.chmod(path, _EMPTY_CONFIG_MODE, follow_symlinks=False)  # whatever the umask
    except OSError:
        pass  # not ours to write: then no command of this user can write it either


def _repository_files(patterns: Iterable[str]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Per repository directory the search may walk (``.hg``, ``.jj``): where in it the
    repository lies and the files of ``patterns`` (of ``OTHER_VCS_CONFIGS``, spelled
    ``**/<directory>/[<inner>/]<file>``) it reads there."""
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    for text in patterns:
        control, *inner, name = text.removeprefix("**/").split("/")
        _, names = found.get(control, ("", ()))
        found[control] = ("/".join(inner), (*names, name))
    return found


def _protect_other_repositories(
    root: str,
    found: _Walked,
    wanted: Iterable[str],
    protected: set[str],
    placeholders: dict[str, tuple[str, str, str]],
    watched: Watched,
) -> None:
    """The configuration files (of the patterns ``wanted``) of every Mercurial and Jujutsu
    repository the search walked in ``root``, covered only where a repository exists (a
    placeholder ``.hg`` would make every workspace a repository to Mercurial): an absent one
    is made empty and kept, which each tool reads as no configuration, as git's
    ``config.worktree``. A Jujutsu workspace's ``.jj/repo`` that is a file (naming the
    repository it shares) is protected as a ``.git`` file is."""
    repositories = _repository_files(wanted)
    for directory in found.directories:
        known = repositories.get(os.path.basename(directory))
        if known is None:
            continue
        inner, names = known
        repository = os.path.join(directory, inner) if inner else directory
        if os.path.islink(repository) or not os.path.lexists(repository):
            continue
        if not os.path.isdir(repository):
            protected.add(_canonical(repository))
            continue
        for name in names:
            path = os.path.join(repository, name)
            _make_empty_config(path)
            _protect(path, False, root, protected, placeholders)
            _watch_along(watched, root, path)


def _checkouts(found: _Walked) -> list[tuple[str, str]]:
    """``(work tree, git directory)`` of each ``.git`` the search found (a directory, or a file
    naming its git directory)."""
    pairs = [(os.path.dirname(d), d) for d in found.git_dirs if os.path.basename(d) == ".git"]
    for git_file in found.git_files:
        target = _gitfile_target(git_file)
        if target is not None:
            pairs.append((os.path.dirname(git_file), target))
    return pairs


def _protect_submodules(
    work_tree: str,
    git_dir: str,
    writable: Sequence[str],
    protected: set[str],
    placeholders: dict[str, tuple[str, str, str]],
    watched: Watched,
) -> None:
    """What git would enter for each submodule the repository knows, initialised or not:
    ``<path>/.git`` and ``<git dir>/modules/<name>``, protected whether they exist or not (a
    command must not initialise one with a configuration of its own)."""
    for path in (os.path.join(git_dir, "index"), os.path.join(work_tree, ".gitmodules")):
        _watch(watched, path)
    paths, names = _submodules.known_submodules(work_tree, git_dir)
    for relative in sorted(paths):
        checkout = os.path.join(work_tree, relative)
        home = _home(checkout, writable)
        if home is not None:
            _protect_checkout(checkout, home, protected, placeholders)
            _watch_along(watched, home, os.path.join(checkout, ".git"))
    for name in sorted(names):
        module = os.path.join(git_dir, "modules", name)
        home = _home(module, writable)
        if home is not None:
            _protect_module(module, home, protected, placeholders)
            _watch_along(watched, home, module)


def _protect_git_reads(
    work_tree: str,
    git_dir: str,
    writable: Sequence[str],
    protected: set[str],
    placeholders: dict[str, tuple[str, str, str]],
    watched: Watched,
) -> None:
    """The hooks directory ``core.hooksPath`` names (a placeholder where absent: git then finds
    no hook in it), the hooks by name of one that holds the work tree, and the files the
    configuration includes (these two where they exist: git stops on an include it cannot read,
    and placeholders for each hook name would fill the project's top), inside a writable
    root."""
    reads = git_reads(work_tree, git_dir, os.path.expanduser("~"))
    for path, is_dir in [
        *((d, True) for d in reads.hook_directories),
        *((f, False) for f in (*reads.hook_files, *reads.included)),
    ]:
        home = _home(path, writable)
        if home is None:
            continue
        if is_dir or os.path.lexists(path):
            _protect(path, is_dir, home, protected, placeholders)
        _watch_along(watched, home, path)


def _home(path: str, writable: Sequence[str]) -> str | None:
    return next((w for w in writable if _within(path, w) and path != w), None)


def _protect_checkout(
    checkout: str, home: str, protected: set[str], placeholders: dict[str, tuple[str, str, str]]
) -> None:
    """A submodule's checkout: its ``.git`` (a file, or absent) read-only; an empty checkout,
    as git leaves an uninitialised one, read-only as a whole (no cover needed)."""
    dot_git = os.path.join(checkout, ".git")
    if _is_directory(dot_git):
        return  # a git directory of its own: found by the search, its control files protected
    if os.path.lexists(dot_git) and not _is_placeholder(dot_git):
        protected.add(_canonical(dot_git))
    elif _is_directory(checkout) and not os.path.islink(checkout) and _is_empty(checkout):
        protected.add(_canonical(checkout))
    else:
        _protect(dot_git, False, home, protected, placeholders)


def _protect_module(
    module: str, home: str, protected: set[str], placeholders: dict[str, tuple[str, str, str]]
) -> None:
    """A submodule's git directory: absent, covered for the call; present but not a git
    directory (no ``HEAD``), read-only as a whole. A real one is found with its repository and
    has its control files protected."""
    if os.path.lexists(module) and not _is_placeholder(module):
        if not os.path.lexists(os.path.join(module, "HEAD")):
            protected.add(_canonical(module))
        return
    _protect(module, True, home, protected, placeholders)


def _is_empty(directory: str) -> bool:
    try:
        with os.scandir(directory) as entries:
            return next(entries, None) is None
    except OSError:
        return False


_COMMONDIR_MODE = 0o444  # the launcher's commondir placeholder (it holds ".\n")
_GIT_NESTED_LIMIT = 256  # submodule and worktree git directories looked at per repository


def _gitfile_target(path: str) -> str | None:
    """The git directory a ``.git`` file names, its links followed."""
    target = gitfile_target(path)
    return _canonical(target) if target is not None else None


def _repository_dirs(git_dir: str, found: list[str]) -> None:
    """``git_dir``, the common directory it names, and the git directories of its submodules
    (``modules/**``) and worktrees (``worktrees/*``), into ``found``."""
    pending = [git_dir]
    while pending and len(found) < _GIT_NESTED_LIMIT:
        current = pending.pop()
        if current in found or not os.path.isdir(current):
            continue
        found.append(current)
        common = read_pointer(os.path.join(current, "commondir"))
        if common:
            pending.append(_canonical(os.path.join(current, common)))
        for nested in ("modules", "worktrees"):
            pending += _git_dirs_below(os.path.join(current, nested))


def _git_dirs_below(directory: str) -> list[str]:
    """The git directories (they hold ``HEAD``) under ``directory``: a submodule's name may hold
    slashes, so its git directory may lie several levels down."""
    found: list[str] = []
    todo = [directory]
    while todo and len(found) < _GIT_NESTED_LIMIT:
        current = todo.pop()
        try:
            entries = [e for e in os.scandir(current) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for entry in entries:
            if os.path.lexists(os.path.join(entry.path, "HEAD")):
                found.append(entry.path)
            else:
                todo.append(entry.path)
    return found


# -- the walk -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Walked:
    key: tuple[str, ...]
    directories: Watched
    hidden: tuple[str, ...]
    protected: tuple[str, ...]
    git_dirs: tuple[str, ...]  # git directories whose control files are protected
    git_files: tuple[str, ...]  # ``.git`` files (a worktree's or submodule's checkout)
    complete: bool  # the walk saw the whole tree within its budget
    unlistable: tuple[str, ...] = ()  # directories it could not list (hidden as a whole)


_WALKED: dict[str, _Walked] = {}
# The latest search of each root, settled or not: what a search cut short still holds to.
_LAST_FOUND: dict[str, _Walked] = {}
_CUT_SHORT_TOLD: set[str] = set()


# Mercurial's and Jujutsu's directories are searched only as deep as their configuration lies
# (``.hg/hgrc``: one level; ``.jj/repo/config.toml``: two), as a ``.git`` is: their stores hold
# a file or more per tracked file.
_REPOSITORY_LEVELS = {
    control: 1 + (inner.count("/") + 1 if inner else 0)
    for control, (inner, _) in _repository_files(OTHER_VCS_CONFIGS).items()
}


def _search(root: str, policy: SandboxPolicy, tops: tuple[str, ...] = ()) -> _Walked:
    """The existing paths inside ``root`` that match ``policy``'s hidden and protected
    patterns (relative ones at ``root`` and at each root asked inside it, ``tops``), its git
    directories and ``.git`` files, and the directories walked (with their mtimes); reused
    while none has changed. A directory below ``root`` that cannot be listed is hidden and
    read-only as a whole (what it holds is not known); ``root`` or one of ``tops``,
    ``RootUnlistable``."""
    key = (*policy.hidden, "\0", *policy.protected, "\0", *tops)
    cached = _WALKED.get(root)
    if (
        cached is not None
        and cached.key == key
        and _unchanged(cached.directories)
        and not _listable_again(cached.unlistable)
    ):
        return cached
    hide = _union(policy.hidden_patterns, (root, *tops))
    protect = _union(policy.protected_patterns, (root, *tops))
    directories: Watched = {}
    hidden: list[str] = []
    protected: list[str] = []
    git_dirs: list[str] = []
    git_files: list[str] = []
    unlistable: list[str] = []
    met: dict[int, list[str]] = {}  # inode number -> the names listed with it
    budget = WALK_BUDGET
    todo = [(root, 0)]
    while todo and budget > 0:
        directory, depth = todo.pop()
        _watch(directories, directory, listed=depth <= 0)
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:
            if not _is_directory(directory):
                continue  # gone, or replaced, meanwhile: nothing below it to hide
            # Its mode may be only the last command's doing (``chmod 300``): what it holds
            # stays out of reach until the search can list it again.
            if directory == root or directory in tops:
                raise RootUnlistable(directory, exc) from None
            hidden.append(directory)
            protected.append(directory)
            unlistable.append(directory)
            continue
        for entry in entries:
            budget -= 1
            path = entry.path
            if hide is not None and hide.matches(path):
                hidden.append(path)
                continue
            if protect is not None and protect.matches(path):
                protected.append(path)
                continue
            met.setdefault(entry.inode(), []).append(path)
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = not is_dir and entry.is_file(follow_symlinks=False)
            except OSError:
                continue
            if entry.name == ".git" and is_file:
                git_files.append(path)
                target = _gitfile_target(path)
                if target is not None:
                    git_dirs.append(target)
            if not is_dir or entry.name in SKIPPED:
                continue
            if entry.name == ".git":
                git_dirs.append(path)
                todo.append((path, -1))  # one level: its config and hooks
            elif entry.name in _REPOSITORY_LEVELS and depth >= 0:
                # Only as deep as the configuration lies: a large store would spend the budget.
                todo.append((path, -_REPOSITORY_LEVELS[entry.name]))
            elif depth >= 0:
                todo.append((path, depth + 1))
            elif depth < -1:  # inside a repository's directory, one level nearer its bottom
                todo.append((path, depth + 1))
    hidden += _hard_links(root, hidden, met)
    repositories: list[str] = []
    for git_dir in git_dirs:
        _repository_dirs(git_dir, repositories)
    for git_dir in repositories:
        for nested in ("", "modules", "worktrees"):
            _watch(directories, os.path.join(git_dir, nested) if nested else git_dir)
    found = _Walked(
        key,
        directories,
        tuple(hidden),
        tuple(protected),
        tuple(repositories),
        tuple(git_files),
        complete=not todo,
        unlistable=tuple(unlistable),
    )
    if not found.complete:
        earlier = _earlier_search(root, key)
        if earlier is not None:
            found = _keep_earlier(found, earlier)
    if not found.complete:
        if root not in _CUT_SHORT_TOLD:
            _CUT_SHORT_TOLD.add(root)
            log.warning(
                "the sandbox's search of %s stopped after %d entries: hidden and protected "
                "paths below the part searched are found only where an earlier search saw them",
                root,
                WALK_BUDGET,
            )
    if len(_LAST_FOUND) >= 64 and root not in _LAST_FOUND:
        _LAST_FOUND.pop(next(iter(_LAST_FOUND)))
    _LAST_FOUND[root] = found
    _memory.save(root, key, _kept_fields(found))
    if _settled(directories):
        if len(_WALKED) >= 64:
            _WALKED.clear()
        _WALKED[root] = found
    return found


def _earlier_search(root: str, key: tuple[str, ...]) -> _Walked | None:
    """What an earlier search of ``root`` under ``key`` found: this process's, else the one
    kept on disk by an earlier process (a restart must not forget it)."""
    earlier = _LAST_FOUND.get(root)
    if earlier is not None and earlier.key == key:
        return earlier
    kept = _memory.load(root, key)
    if kept is None:
        return None
    return _Walked(key, {}, kept["hidden"], kept["protected"], kept["git_dirs"], kept["git_files"],
                   complete=False)  # fmt: skip


def _kept_fields(found: _Walked) -> dict[str, Sequence[str]]:
    return {
        "hidden": found.hidden,
        "protected": found.protected,
        "git_dirs": found.git_dirs,
        "git_files": found.git_files,
    }


def _hard_links(root: str, hidden: Sequence[str], met: dict[int, list[str]]) -> list[str]:
    """The other names in ``root`` of hidden files with several (outside hidden directories,
    which are covered whole)."""
    linked = _links.linked_files(hidden)
    if not linked:
        return []
    names = _links.other_names(root, linked, met, LINK_BUDGET)
    return [p for p in names if not any(_within(p, h) for h in hidden)]


def _keep_earlier(found: _Walked, earlier: _Walked) -> _Walked:
    """A search cut short by its budget keeps what an earlier search of the root found and
    still exists: filling the tree with entries does not uncover them."""

    def union(now: tuple[str, ...], before: tuple[str, ...]) -> tuple[str, ...]:
        kept = set(now)
        return now + tuple(p for p in before if p not in kept and os.path.lexists(p))

    return _Walked(
        found.key,
        found.directories,
        union(found.hidden, earlier.hidden),
        union(found.protected, earlier.protected),
        union(found.git_dirs, earlier.git_dirs),
        union(found.git_files, earlier.git_files),
        complete=False,
        unlistable=found.unlistable,
    )


def _listable_again(directories: Iterable[str]) -> bool:
    """Whether a directory the search could not list can be now (its mode changes its ctime,
    not the mtime the search is cached by): then it is searched again rather than hidden."""
    for directory in directories:
        try:
            with os.scandir(directory):
                return True
        except OSError:
            continue
    return False


def _union(patterns: Sequence[PathPattern], roots: str | Sequence[str]) -> Glob | None:
    """The patterns over absolute paths for ``roots`` (one, or several), as one full match in
    time linear in the path (RE2): the walk matches every name in the root, and a backtracking
    engine would stall it, and the event loop, on a pattern such as ``**/*a*a*a*a*a*b`` and one
    long name.
    ``GlobError`` (a ``ValueError``) when they are too large for RE2's memory bound."""
    if not patterns:
        return None
    if isinstance(roots, str):
        roots = (roots,)
    regexes = dict.fromkeys(p.regex(root) for root in roots for p in patterns)
    return Glob("|".join(f"(?:{r})" for r in regexes), fold=False)


def _is_directory(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


class RootUnlistable(ToolFault, OSError):
    """A root the search for hidden and protected paths cannot list: the call is not run (what
    the root holds is not known). A ``ToolFault`` for the shell, an ``OSError`` for other
    spawners."""

    def __init__(self, root: str, exc: OSError) -> None:
        why = exc.strerror or str(exc)
        super().__init__(
            f"The command was not run: the sandbox cannot list {root} ({why}) to find the "
            "hidden and protected paths in it; give it its read permission back "
            f"(chmod u+r {root}).",
            code=ErrorCode.TOOL_ERROR,
            details={"reason": "sandbox_failed", "step": None, "unlistable": root},
        )


# -- the plans ------------------------------------------------------------------------------


def namespace_steps(
    where: Layout,
    policy: SandboxPolicy,
    *,
    arch: str,
    landlock_abi: int,
    proxy_channel: int | None,
) -> list[Step]:
    """The plan under user, mount, pid and ipc namespaces (and a network namespace whose only
    way out is the proxy's listener, sent over ``proxy_channel``)."""
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC
    if proxy_channel is not None:
        flags |= CLONE_NEWNET
    steps = [*_placeholder_steps(where), Step(Op.NAMESPACES, (flags,))]
    steps += _mount_steps(where, policy)
    steps.append(Step(Op.PROC, ("/proc",)))
    # The kernel's settings under the fresh /proc check the writer's uid, not its capabilities:
    # a server running as root maps the command to root, so they are bound read-only.
    read_only = BIND_READONLY | BIND_RECURSIVE | BIND_OPTIONAL
    steps += [Step(Op.BIND, (path, path, read_only)) for path in PROC_READ_ONLY]
    if proxy_channel is not None:
        steps += [Step(Op.LOOPBACK), Step(Op.LISTEN, (PROXY_PORT, proxy_channel))]
    steps.append(Step(Op.WATCH, (policy.max_processes, "/tmp")))
    steps += _command_steps(
        where,
        policy,
        arch=arch,
        landlock_abi=landlock_abi,
        temporary="/tmp",
        proxy_port=PROXY_PORT if proxy_channel is not None else None,
        namespaced=True,
    )
    return steps


@functools.lru_cache(maxsize=64)
def namespace_plan(where: Layout, policy: SandboxPolicy, *, arch: str, landlock_abi: int) -> Plan:
    """``namespace_steps`` without a network, as a ``Plan`` (made and encoded once per layout
    and policy)."""
    return Plan(
        namespace_steps(where, policy, arch=arch, landlock_abi=landlock_abi, proxy_channel=None)
    )


def _placeholder_steps(where: Layout) -> list[Step]:
    directories = sorted({d for d, _, _ in where.placeholders})
    index = {d: i for i, d in enumerate(directories)}
    return [Step(Op.LOCK, (d,)) for d in directories] + [
        Step(Op.PLACEHOLDER, (kind, index[directory], name))
        for directory, name, kind in where.placeholders
    ]


def _mount_steps(where: Layout, policy: SandboxPolicy) -> list[Step]:
    """Every mount read-only, nosuid and nodev; a private /tmp and /dev/shm; the roots writable
    again (and what lies under /tmp but must stay visible, read-only); the usable devices;
    pins, protected and read-only paths, hidden ones covered."""
    attached = sorted([(path, False) for path in where.roots] + [(p, True) for p in where.visible])
    steps = [Step(Op.PRIVATE)]
    steps += [Step(Op.HOLD, (path,)) for path, _ in attached]
    steps.append(Step(Op.SEAL, ("/",)))
    tmp_inodes = max(1024, policy.max_tmp_bytes // 4096)
    steps.append(Step(Op.TMPFS, ("/tmp", policy.max_tmp_bytes, tmp_inodes, 0o1777)))
    shm = min(policy.max_tmp_bytes, 64 << 20)
    steps.append(Step(Op.TMPFS, ("/dev/shm", shm, 1024, 0o1777)))
    steps += [
        Step(Op.ATTACH, (index, path, int(read_only)))
        for index, (path, read_only) in enumerate(attached)
    ]
    steps += [Step(Op.BIND, (dev, dev, BIND_DEVICES | BIND_OPTIONAL)) for dev in DEVICES]
    steps += [Step(Op.BIND, (d, d, BIND_RECURSIVE | BIND_OPTIONAL)) for d in where.pins]
    covered = [os.path.join(directory, name) for directory, name, _ in where.placeholders]
    steps += [Step(Op.BIND, (p, p, BIND_READONLY | BIND_OPTIONAL)) for p in covered]
    read_only = BIND_READONLY | BIND_RECURSIVE | BIND_OPTIONAL
    steps += [Step(Op.BIND, (p, p, read_only)) for p in where.read_only]
    steps += [
        Step(Op.MASK, ("d" if os.path.isdir(path) else "f", path))
        for path in (*where.hidden, *where.hidden_outside)
    ]
    return steps


def landlock_steps(
    where: Layout,
    policy: SandboxPolicy,
    *,
    arch: str,
    landlock_abi: int,
    temporary: str,
    proxy_port: int | None,
) -> list[Step]:
    """The plan without namespaces: Landlock, seccomp, capabilities and limits; the launcher
    watches the bounds and removes ``temporary`` at the end."""
    steps = [
        Step(Op.REMOVE_AFTER, (temporary,)),
        Step(Op.WATCH_TASKS, (policy.max_processes,)),
        Step(Op.WATCH_TREE, (temporary, policy.max_tmp_bytes)),
        Step(Op.NPROC_ABOVE, (policy.max_processes,)),
    ]
    steps += _command_steps(
        where,
        policy,
        arch=arch,
        landlock_abi=landlock_abi,
        temporary=temporary,
        proxy_port=proxy_port,
        namespaced=False,
    )
    return steps


def _command_steps(
    where: Layout,
    policy: SandboxPolicy,
    *,
    arch: str,
    landlock_abi: int,
    temporary: str,
    proxy_port: int | None,
    namespaced: bool,
) -> list[Step]:
    steps = [Step(Op.CHDIR, (where.cwd,))]
    if namespaced:
        steps.append(Step(Op.RLIMIT, (RLIMIT_NPROC, policy.max_processes, policy.max_processes)))
    if landlock_abi:
        steps += _landlock(where, landlock_abi, temporary, proxy_port, namespaced)
    steps.append(Step(Op.CAPS))
    scoped = landlock_abi >= 6
    protect: tuple[int, ...] = () if namespaced or scoped else (os.getpid(), -os.getpgrp())
    program = _kernel.command_filter(
        arch, tcp=proxy_port is not None, namespaced=namespaced, protect_pids=protect
    )
    steps.append(Step(Op.SECCOMP, (program,)))
    return steps


def _landlock(
    where: Layout, abi: int, temporary: str, proxy_port: int | None, namespaced: bool
) -> list[Step]:
    handled = _kernel.fs_handled(abi)
    net = _kernel.NET_BIND_TCP | _kernel.NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _kernel.SCOPE_ABSTRACT_UNIX_SOCKET | _kernel.SCOPE_SIGNAL if abi >= 6 else 0
    steps = [Step(Op.LANDLOCK, (handled, net, scoped))]
    read = _kernel.FS_READ & handled
    if namespaced:
        steps.append(Step(Op.LANDLOCK_PATH, (read, "/")))
    else:
        # Without namespaces /dev is the host's (the user's terminals in /dev/pts, the shared
        # memory of the user's processes in /dev/shm): it is listed, and only the usable
        # devices below are granted, as under namespaces (nodev but for those). The parent of
        # the calls' temporary directories is not granted either: each call reads its own
        # (writable, below), never another call's.
        grants, listed = _read_grants((*where.hidden_outside, "/dev", os.path.dirname(temporary)))
        steps += [Step(Op.LANDLOCK_PATH, (_kernel.FS_READ_DIR, d)) for d in (*listed, "/dev")]
        steps += [Step(Op.LANDLOCK_PATH, (read, path)) for path in grants]
    write = _kernel.fs_writable(abi)
    writable = [*where.roots, temporary] + (["/dev/shm"] if namespaced else [])
    steps += [Step(Op.LANDLOCK_PATH, (write, path)) for path in writable]
    device = (_kernel.FS_READ_FILE | _kernel.FS_WRITE_FILE | _kernel.FS_IOCTL_DEV) & handled
    steps += [Step(Op.LANDLOCK_PATH, (device, path)) for path in DEVICES]
    if net and proxy_port is not None:
        steps.append(Step(Op.LANDLOCK_PORT, (_kernel.NET_CONNECT_TCP, proxy_port)))
    steps.append(Step(Op.RESTRICT))
    return steps


def _read_grants(hidden: Sequence[str]) -> tuple[list[str], list[str]]:
    """Landlock only grants: to read everything but ``hidden``, grant each entry of every
    directory on the way to a hidden path except that path (``grants``), and let those
    directories be listed (``listed``)."""
    grants: list[str] = []
    listed: list[str] = []
    hidden_set = set(hidden)

    def visit(directory: str) -> None:
        listed.append(directory)
        try:
            names = os.listdir(directory)
        except OSError:
            return
        for name in names:
            path = os.path.join(directory, name)
            if path in hidden_set:
                continue
            if any(h.startswith(path.rstrip("/") + "/") for h in hidden_set):
                try:
                    if stat.S_ISDIR(os.lstat(path).st_mode):
                        visit(path)
                        continue
                except OSError:
                    continue
            grants.append(path)

    visit("/")
    return grants, listed
