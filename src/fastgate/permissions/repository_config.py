"""What git reads beyond the files protected by name: the files its configuration includes
(``include.path``, ``includeIf.<condition>.path``) and the hooks directory ``core.hooksPath``
names (husky's ``.husky/_``, a project's ``.githooks``). A file written there runs on the user's
next ``git commit`` or ``git status`` as a ``.git/hooks`` entry or ``.git/config`` line would,
so it is protected as they are.

Read without running git, which would itself read (and run) what is being judged. Every
include is followed whatever its condition (over-approximating costs only a question), to
git's own depth of ten.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from threading import Lock
from time import monotonic

_CONFIG_LIMIT = 1 << 20  # bytes of one configuration file read
_INCLUDE_DEPTH = 10  # git's own limit on nested includes
_FILES_LIMIT = 64  # configuration files followed for one repository
_CACHED_DIRECTORIES = 1024
_SECTION = re.compile(r'\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]')
_KEY = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]*)\s*(=?)")


# git's hooks (githooks(5)), by name: what a hooks directory that holds much else is narrowed to.
HOOK_NAMES: tuple[str, ...] = (
    "applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
    "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout",
    "post-merge", "pre-push", "pre-receive", "update", "proc-receive", "post-receive",
    "post-update", "reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite",
    "sendemail-validate", "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist",
    "p4-post-changelist", "p4-pre-submit", "post-index-change",
)  # fmt: skip


@dataclass(frozen=True, slots=True, eq=False)  # compared by identity: a cheap memo key
class GitReads:
    """``included``: configuration files an include names (absolute; they may not exist).
    ``hook_directories``: what ``core.hooksPath`` names (absolute), all of it protected (a hook
    may source its neighbours, as husky's do). ``hook_files``: the hooks, by name, of a hooks
    directory that holds the work tree or the home directory (``core.hooksPath = .``), where
    protecting all of it would protect every file of the project."""

    included: tuple[str, ...] = ()
    hook_directories: tuple[str, ...] = ()
    hook_files: tuple[str, ...] = ()


NOTHING = GitReads()


def repository_git_dir(start: str) -> tuple[str, str] | None:
    """``(work tree, git directory)`` of the repository git finds from ``start`` (walking up to
    the first ``.git``, a directory or a ``gitdir:`` file); None outside any repository."""
    current = start
    while True:
        candidate = os.path.join(current, ".git")
        if os.path.isdir(candidate):
            return current, candidate
        if os.path.isfile(candidate):
            target = gitfile_target(candidate)
            return (current, target) if target is not None else None
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def git_reads(work_tree: str | None, git_dir: str | None, home: str) -> GitReads:
    """What git reads for the repository ``git_dir`` (None: outside any) with its work tree,
    through its own configuration, the user's (``home``) and the system's."""
    sources: list[tuple[str, str]] = []  # (configuration file, what a relative hooksPath is of)
    if git_dir is not None:
        where = work_tree or git_dir
        common = read_pointer(os.path.join(git_dir, "commondir"))
        shared = os.path.normpath(os.path.join(git_dir, common)) if common else git_dir
        sources += [(os.path.join(shared, "config"), where)]
        sources += [(os.path.join(git_dir, "config.worktree"), where)]
        if shared != git_dir:
            sources += [(os.path.join(git_dir, "config"), where)]
    sources += _user_configs(home, work_tree or os.getcwd())
    included: list[str] = []
    hooks: list[str] = []
    seen: set[str] = set()
    for path, relative_to in sources:
        _read_config(path, relative_to, home, 0, seen, included, hooks)
    # compared with written paths' canonical forms: a link on the way is followed
    hooks += [os.path.realpath(h) for h in hooks]
    included += [os.path.realpath(i) for i in included]
    # A device named there (``core.hooksPath = /dev/null``, the usual way to turn hooks off)
    # holds no hook and no configuration: writing it (``2>/dev/null``) changes nothing git runs.
    hooks = [h for h in hooks if not _is_device(h)]
    included = [i for i in included if not _is_device(i)]
    holders = [p for p in (work_tree, git_dir, home) if p is not None]
    broad = [h for h in hooks if any(_holds(h, p) for p in holders)]
    files = [os.path.join(h, name) for h in broad for name in HOOK_NAMES]
    hooks = [h for h in hooks if h not in broad]
    if not included and not hooks and not files:
        return NOTHING
    return GitReads(
        tuple(dict.fromkeys(included)), tuple(dict.fromkeys(hooks)), tuple(dict.fromkeys(files))
    )


def _holds(directory: str, path: str) -> bool:
    """Whether ``path`` is ``directory`` or lies inside it."""
    for form in {path, os.path.realpath(path)}:
        if form == directory or form.startswith(directory.rstrip("/") + "/"):
            return True
    return False


def _is_device(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def _user_configs(home: str, relative_to: str = "") -> list[tuple[str, str]]:
    """The user's and the system's configuration files, each with ``relative_to``."""
    paths = [os.path.join(home, ".gitconfig"), os.path.join(home, ".config/git/config")]
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    if xdg.startswith("/"):
        paths.append(os.path.join(xdg, "git/config"))
    return [(path, relative_to) for path in [*paths, "/etc/gitconfig"]]


def _read_config(
    path: str,
    hooks_relative_to: str,
    home: str,
    depth: int,
    seen: set[str],
    included: list[str],
    hooks: list[str],
) -> None:
    if path in seen or len(seen) >= _FILES_LIMIT or depth > _INCLUDE_DEPTH:
        return
    seen.add(path)
    data = _read_regular(path, _CONFIG_LIMIT)
    if data is None:
        return
    for section, subsection, key, value in _entries(data.decode("utf-8", "surrogateescape")):
        if key == "path" and (section == "include" or (section == "includeif" and subsection)):
            target = _expand(value, home, os.path.dirname(path))
            if target is not None:
                included.append(target)
                _read_config(target, hooks_relative_to, home, depth + 1, seen, included, hooks)
        elif section == "core" and key == "hookspath" and value:
            target = _expand(value, home, hooks_relative_to)
            if target is not None:
                hooks.append(target)


def _expand(value: str, home: str, relative_to: str) -> str | None:
    """A path value as git takes it: ``~/`` is the home directory, a relative one is relative to
    ``relative_to``. ``~user`` and ``%(prefix)`` name places outside the user's reach: None."""
    if value.startswith("~/") or value == "~":
        return os.path.normpath(os.path.join(home, value[2:]))
    if value.startswith(("~", "%(")):
        return None
    return os.path.normpath(os.path.join(relative_to, value))


def _entries(text: str) -> list[tuple[str, str, str, str]]:
    """``(section, subsection, key, value)`` of each entry, section and key in lower case (as
    git compares them); a key without ``=`` is the boolean true."""
    found: list[tuple[str, str, str, str]] = []
    section = subsection = ""
    lines = text.split("\n")
    at = 0
    while at < len(lines):
        line = lines[at]
        at += 1
        header = _SECTION.match(line)
        if header:
            name = header.group(1).lower()
            if header.group(2) is not None:  # [section "subsection"]
                section, subsection = name, re.sub(r"\\(.)", r"\1", header.group(2))
            else:  # [section] or the old [section.subsection]
                section, _, subsection = name.partition(".")
            line = line[header.end() :]  # an entry may follow on the header's line
        key = _KEY.match(line)
        if key is None or not section:
            continue
        if not key.group(2):
            found.append((section, subsection, key.group(1).lower(), "true"))
            continue
        value, continued = _value(line[key.end() :])
        while continued and at < len(lines):
            more, continued = _value(lines[at], started=bool(value))
            value += more
            at += 1
        found.append((section, subsection, key.group(1).lower(), value))
    return found


def _value(text: str, started: bool = False) -> tuple[str, bool]:
    """A value's text as git reads it: quotes and escapes undone, the comment cut, each
    whitespace character outside quotes a space, those before and after the text dropped;
    True when a trailing backslash continues it on the next line. ``started``: the value
    already has text (a continued line's leading whitespace then counts)."""
    out: list[str] = []
    quoted = False
    spaces = 0
    at = 0
    while at < len(text):
        char = text[at]
        at += 1
        if char.isspace() and not quoted:
            if out or started:
                spaces += 1
            continue
        if char in "#;" and not quoted:
            break
        out.append(" " * spaces)
        spaces = 0
        if char == "\\":
            if at >= len(text):
                return "".join(out), True
            escaped = text[at]
            at += 1
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(escaped, escaped))
        elif char == '"':
            quoted = not quoted
        else:
            out.append(char)
    return "".join(out), False


def _read_regular(path: str, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of a regular file (links followed, as git does). Anything else
    planted under the name is not opened (a device may act on an open), and a FIFO swapped in
    since is not waited on."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_pointer(path: str) -> str | None:
    """The first line of a small regular file git reads as a pointer (a ``.git`` file,
    ``commondir``), or None (absent, empty, or not a regular file: nothing blocks on it)."""
    data = _read_regular(path, 4096)
    if data is None:
        return None
    return data.decode("utf-8", "replace").split("\n", 1)[0].strip() or None


def gitfile_target(path: str) -> str | None:
    """The git directory a ``.git`` file names (``gitdir: <path>``, relative to the file),
    normalized but with its links not followed; None when it names none."""
    first = read_pointer(path)
    if first is None or not first.startswith("gitdir:"):
        return None
    target = first[len("gitdir:") :].strip()
    return os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else None


class GitReadsCache:
    """``git_reads`` of the repository a directory lies in, per directory. Looked at again, one
    ``stat`` per file it read (or found absent), when ``fresh_for`` seconds have passed since
    the last look, and read again when one changed: a configuration changed outside is seen
    within that time, as a file changed between a decision and the write it allows would be,
    at a cost per decision of a clock read instead of some ten ``stat`` calls."""

    __slots__ = ("_entries", "_lock", "fresh_for")

    def __init__(self, fresh_for: float = 0.05) -> None:
        # per (directory, home): (when last looked at, the files it read, what git reads)
        self._entries: dict[tuple[str, str], tuple[float, _Stamps, GitReads]] = {}
        self._lock = Lock()
        self.fresh_for = fresh_for

    def get(self, directory: str, home: str) -> GitReads:
        key = (directory, home)
        entry = self._entries.get(key)
        now = monotonic()
        if entry is not None:
            looked, stamps, reads = entry
            if now - looked < self.fresh_for:
                return reads
            if all(_stamp(path) == stamp for path, stamp in stamps):
                self._entries[key] = (now, stamps, reads)
                return reads
        found = repository_git_dir(directory)
        work_tree, git_dir = found if found is not None else (None, None)
        reads = git_reads(work_tree, git_dir, home)
        watched = [os.path.join(d, ".git") for d in _upward(directory, work_tree)]
        if git_dir is not None:
            names = ("commondir", "config", "config.worktree")
            watched += [os.path.join(git_dir, name) for name in names]
        watched += [path for path, _ in _user_configs(home)]
        watched += reads.included
        stamps = tuple((p, _stamp(p)) for p in dict.fromkeys(watched))
        with self._lock:
            if len(self._entries) >= _CACHED_DIRECTORIES:
                self._entries.clear()
            self._entries[key] = (now, stamps, reads)
        return reads


_Stamps = tuple[tuple[str, tuple[int, int, int]], ...]


def _upward(start: str, stop: str | None) -> list[str]:
    """``start`` and the directories above it, up to ``stop`` (None: the file system's root)."""
    found = [start]
    while found[-1] != stop:
        parent = os.path.dirname(found[-1])
        if parent == found[-1]:
            break
        found.append(parent)
    return found


def _stamp(path: str) -> tuple[int, int, int]:
    """What changes when a file is written or replaced (an mtime alone may not: the kernel
    stamps it from a clock that ticks every few milliseconds)."""
    try:
        info = os.stat(path)
    except OSError:
        return (-1, -1, -1)
    return (info.st_mtime_ns, info.st_ino, info.st_size)
