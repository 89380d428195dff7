"""What a call is about: its command, its canonical paths, or its permission key.

``Subject`` is built fresh for every decision (paths are canonicalized at decision time, never
cached, so a symlink swapped in later is seen); only the pure-text command analysis is cached.
"""

from __future__ import annotations

import glob
import itertools
import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from fastgate.paths.canonical import (
    DeclaredPathsError,
    absolute_path,
    canonical_path,
    declared_paths,
    given_paths,
)
from fastgate.permissions.commands import CommandAnalysis, CommandFacts
from fastgate.permissions.shell import Word
from fastgate.tools import ToolDefinition

SubjectKind = Literal["command", "paths", "key", "none"]
_MAX_PATH_WORDS = 512
_MAX_GLOB_MATCHES = 256
_GLOB_CHARS = frozenset("*?[")


class ResolvedPath:
    """One path argument: as given, absolute with ``..`` collapsed (``lexical``), and with every
    symlink followed (``canonical``). Equal and hashed by value: the resolver's memo keys hold
    them. A plain class, not a tuple: one is made per path per call, and a compiled class is made
    in a fraction of a named tuple's time."""

    __slots__ = ("canonical", "given", "lexical")

    def __init__(self, given: str, lexical: str, canonical: str) -> None:
        self.given = given
        self.lexical = lexical
        self.canonical = canonical

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ResolvedPath)
            and self.canonical == other.canonical
            and self.lexical == other.lexical
            and self.given == other.given
        )

    def __hash__(self) -> int:
        return hash(self.canonical)  # enough to spread them; equality compares all three

    def __repr__(self) -> str:
        return f"ResolvedPath({self.given!r}, {self.lexical!r}, {self.canonical!r})"

    @property
    def forms(self) -> tuple[str, ...]:
        return (
            (self.canonical,) if self.canonical == self.lexical else (self.canonical, self.lexical)
        )


class Subject:
    """A plain class, not a tuple: one is made per decision, and a compiled class is made in a
    fraction of a named tuple's time."""

    __slots__ = (
        "blind_writes",
        "command",
        "invalid",
        "key",
        "kind",
        "path_names",
        "paths",
        "trees",
        "unplaced",
        "writes",
    )

    def __init__(
        self,
        kind: SubjectKind,
        key: str,  # the normalized key of the permission signature
        command: CommandAnalysis | None = None,
        paths: tuple[ResolvedPath, ...] = (),
        invalid: str = "",  # why the subject could not be read (fail closed)
        found: CommandPaths | None = None,  # what a command's words name (``command_paths``)
        path_names: tuple[str | None, ...] = (),
    ) -> None:
        self.kind = kind
        self.key = key
        self.command = command
        self.paths = paths
        self.invalid = invalid
        # For a ``paths`` subject: the argument each of ``paths`` came from (None: declared by
        # the tool's ``paths``), so a signature can tell which argument named which file.
        self.path_names = path_names
        # A command's words in writing positions, resolved; its relative words in a directory
        # known only at run time; and the written words whose file is known only then.
        self.writes: tuple[ResolvedPath, ...] = ()
        self.trees: tuple[ResolvedPath, ...] = ()
        self.unplaced: tuple[str, ...] = ()
        self.blind_writes: tuple[str, ...] = ()
        if found is not None:
            self.writes = found.writes
            self.trees = found.trees
            self.unplaced = found.unplaced
            self.blind_writes = found.blind_writes


class CommandPaths:
    """What the words of a command name, resolved at decision time."""

    __slots__ = ("blind_writes", "paths", "trees", "unplaced", "writes")

    def __init__(
        self,
        paths: tuple[ResolvedPath, ...],
        writes: tuple[ResolvedPath, ...],
        trees: tuple[ResolvedPath, ...],
        unplaced: tuple[str, ...],
        blind_writes: tuple[str, ...],
    ) -> None:
        self.paths = paths  # every word that may name a file, in every directory it may be in
        self.writes = writes  # those in a writing position
        self.trees = trees  # those whose whole tree is changed (``rm -r``, ``mv``)
        self.unplaced = unplaced  # relative words, normalized, where the directory is unknown
        self.blind_writes = blind_writes  # written words naming a file known only at run time


def resolve_path(value: str, root: str) -> ResolvedPath:
    absolute = absolute_path(root, value)
    try:
        canonical: str | None = canonical_path(absolute)
    except (OSError, ValueError):
        canonical = None
    # normpath (interpreted, slow) only when there is something to collapse; a path the kernel
    # gave back unchanged has nothing (canonical paths have no ".", ".." or "//").
    if absolute == canonical:
        lexical = absolute
    elif absolute[:1] != "/" or "/." in absolute or "//" in absolute or absolute.endswith("/"):
        lexical = os.path.normpath(absolute)
        if lexical.startswith("//"):
            lexical = "/" + lexical.lstrip("/")
    else:
        lexical = absolute
    return ResolvedPath(value, lexical, lexical if canonical is None else canonical)


def path_subject(tool: ToolDefinition, args: Mapping[str, Any], root: str) -> Subject | None:
    """The canonical paths of the call's path arguments and of the paths its tool declares
    (``ToolDefinition.paths``); None when it has none."""
    resolved: list[ResolvedPath] = []
    names: list[str | None] = []
    invalid = ""
    given = given_paths(tool.path_args, args)
    own = len(given)
    if tool.paths is not None:
        try:
            given += declared_paths(tool.paths, args)
        except DeclaredPathsError as exc:
            invalid = f"the paths of the call cannot be read: {exc}"
    for index, (name, value) in enumerate(given):
        if not isinstance(value, str) or not value or "\x00" in value:
            invalid = f"path argument {name!r} is not a usable path: {value!r}"
            continue
        resolved.append(resolve_path(value, root))
        names.append(name if index < own else None)
    if not resolved and not invalid:
        return None
    key = "\n".join(p.canonical for p in resolved) + ("\n" + invalid if invalid else "")
    return Subject("paths", key, paths=tuple(resolved), invalid=invalid, path_names=tuple(names))


def key_subject(tool: ToolDefinition, args: Mapping[str, Any]) -> Subject:
    assert tool.permission_key is not None
    try:
        key: object = tool.permission_key(args)
    except Exception as exc:
        return Subject("key", _args_key(args), invalid=f"permission_key failed: {exc!r}")
    if not isinstance(key, str):
        return Subject("key", _args_key(args), invalid="permission_key did not return a string")
    return Subject("key", key)


def none_subject(args: Mapping[str, Any]) -> Subject:
    return Subject("none", _args_key(args))


def _args_key(args: Mapping[str, Any]) -> str:
    try:
        return msgspec.json.encode(args, enc_hook=_plain, order="sorted").decode()
    except (TypeError, ValueError, OverflowError):
        return repr(args)


def canonical_bytes(value: Any) -> bytes:
    """``value`` encoded alike whatever the order of its objects' keys, at any depth
    (MessagePack keeps ``1``, ``1.0``, ``true``, ``null`` and NaN apart, where JSON writes NaN
    as ``null``). What cannot be encoded (a lone surrogate) is its ``repr``, and what has not
    even that (nesting past the interpreter's limit) is random bytes: never the same twice, so
    nothing else is ever taken for it."""
    try:
        return msgspec.msgpack.encode(value, enc_hook=_plain, order="sorted")
    except (TypeError, ValueError, OverflowError, RecursionError):
        pass
    try:
        return repr(value).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        return os.urandom(32)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    raise TypeError(f"unsupported {type(value).__name__}")


def command_paths(analysis: CommandAnalysis, root: str) -> CommandPaths | None:
    """Every word of every command that may name a file, resolved now in each directory the
    command may run in; None when there are too many to check (callers fail closed)."""
    if analysis.too_large:
        return None
    budget = _MAX_PATH_WORDS
    counted: set[tuple[str, tuple[str, ...]]] = set()
    resolved: dict[str, ResolvedPath] = {}
    paths: dict[ResolvedPath, None] = {}
    writes: dict[ResolvedPath, None] = {}
    trees: dict[ResolvedPath, None] = {}
    unplaced: dict[str, None] = {}
    blind: dict[str, None] = {}
    for facts in analysis.commands:
        words = [*facts.path_words, *(w for form in facts.forms[1:] for w in form[1:])]
        whole = set(facts.tree_words)
        groups: tuple[tuple[Sequence[Word], bool, bool], ...] = (
            (words, False, False),
            (facts.write_words, True, False),
            (facts.guessed_write_words, True, True),  # where they resolve; else as reads
        )
        for group, written, guessed in groups:
            for word in group:
                value = _path_value(word)
                if value is None:
                    continue
                relative = not value.startswith("/")
                bases = facts.bases if relative else ("",)
                if (value, bases) not in counted:  # a word read and written counts once
                    counted.add((value, bases))
                    budget -= max(1, len(bases))
                    if budget < 0:
                        return None
                if written and _known_only_when_run(word, value):
                    blind[word.text] = None
                if relative and facts.base_unknown:
                    where = _below(value)
                    if written and not guessed:
                        blind[word.text] = None
                    elif where:
                        unplaced[where] = None
                for located in _placed(value, bases):
                    for candidate in _candidates(located, word.dynamic, root):
                        found, elsewhere = _as_run(candidate, facts, root, resolved)
                        for where in elsewhere:  # in a directory known only when it runs
                            if written:
                                blind[word.text] = None
                            elif where:
                                unplaced[where] = None
                        for path in found:
                            paths[path] = None
                            if written:
                                writes[path] = None
                                if word in whole:
                                    trees[path] = None
    return CommandPaths(tuple(paths), tuple(writes), tuple(trees), tuple(unplaced), tuple(blind))


_MAX_PROCESS_LINKS = 4


def _as_run(
    candidate: str, facts: CommandFacts, root: str, resolved: dict[str, ResolvedPath]
) -> tuple[list[ResolvedPath], list[str]]:
    """What ``candidate`` names for the command, not for this process: a path through
    ``/proc/self/cwd`` (or ``/dev/fd/..``, a symlink to one, ...) is resolved by the kernel
    for the process that opens it, so its ``cwd`` is where the command runs and a descriptor
    or another process's directory is known only then. The resolved paths, and the paths
    below a directory known only when it runs (``_below`` form)."""
    found: list[ResolvedPath] = []
    elsewhere: list[str] = []
    pending = [candidate]
    for _ in range(_MAX_PROCESS_LINKS):
        if not pending:
            break
        again: list[str] = []
        for value in pending:
            path = resolved.get(value)
            if path is None:
                path = resolved[value] = _resolve_word(value, root)
            absolute = absolute_path(root, value)
            through = None
            follow = path.canonical != path.lexical
            if follow or "/proc" in absolute or "/dev/" in absolute:
                through = process_link(absolute, follow)
            if through is None:
                found.append(path)
                continue
            kind, rest = through
            if kind == "root":
                again.append("/" + rest)
            elif kind == "cwd" and not facts.base_unknown:
                again += _placed(rest or ".", facts.bases)
            else:
                elsewhere.append(_below(rest))
        pending = again
    else:
        elsewhere += [_below(value) for value in pending]  # links within links: unknown
    return found, elsewhere


# ``/dev`` entries that are links to the opening process's descriptors.
_DEVICE_LINKS = {"fd": ("fd",), "stdin": ("fd", "0"), "stdout": ("fd", "1"), "stderr": ("fd", "2")}
_OWN_PROCESS = frozenset({"self", "thread-self"})
_MAX_LINKS = 40


def process_link(absolute: str, follow: bool) -> tuple[str, str] | None:
    """Where ``absolute`` passes through a process's own links, as the process that opens it
    sees them: ``("cwd", rest)`` for its working directory (``/proc/self/cwd/rest``),
    ``("root", rest)`` for its root, ``("unknown", rest)`` below a directory known only when
    it runs (a descriptor, ``/dev/fd/3/rest``; another process's ``cwd`` or ``root``); None
    when it passes through none. ``..`` before the link is collapsed as the kernel would;
    with ``follow``, symlinks before it are followed (a workspace link to ``/proc/self/cwd``),
    never ``/proc/self`` itself, which would name this process."""
    pending = absolute.split("/")[::-1]
    parts: list[str] = []
    links = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            if parts:
                parts.pop()
            continue
        parts.append(name)
        if len(parts) == 2 and parts[0] == "dev" and name in _DEVICE_LINKS:
            parts = ["proc", "self", *_DEVICE_LINKS[name]]
        if parts[0] == "proc":
            found = _process_entry(parts, pending)
            if found is not None:
                return found
            continue
        if not follow:
            continue
        path = "/" + "/".join(parts)
        try:
            info = os.lstat(path)
        except (OSError, ValueError):
            follow = False  # nothing below a missing name is a link
            continue
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if links > _MAX_LINKS:
                return None
            try:
                target = os.readlink(path)
            except OSError:
                return None
            parts.pop()
            if target.startswith("/"):
                parts = []
            pending += target.split("/")[::-1]
    return None


def _process_entry(parts: list[str], pending: list[str]) -> tuple[str, str] | None:
    """``parts`` (``proc``, a process, ...) as ``process_link`` answers, when it is the
    process's ``cwd``, ``root`` or a descriptor (``task/N/`` ones too)."""
    if len(parts) == 3:
        who, entry = parts[1], parts[2]
    elif len(parts) == 5 and parts[2] == "task":
        who, entry = parts[1], parts[4]
    elif (len(parts) == 4 and parts[2] == "fd") or (len(parts) == 6 and parts[4] == "fd"):
        rest = "/".join(pending[::-1])
        # a descriptor alone is a file opened earlier; below one, a directory's entry
        return ("unknown", rest) if rest.strip("/") else None
    else:
        return None
    if entry not in ("cwd", "root"):
        return None
    rest = "/".join(pending[::-1])
    if who in _OWN_PROCESS:
        return (entry, rest)
    return ("unknown", rest)


def _known_only_when_run(word: Word, value: str) -> bool:
    """A word whose value comes from running the command (a variable, a substitution, a
    placeholder ``find -exec`` or ``xargs`` fill in), not a glob expanded now."""
    if not word.dynamic or word.raw.startswith(("<(", ">(")):
        return False
    return "$" in value or "`" in value or not any(c in _GLOB_CHARS for c in value)


def _path_value(word: Word) -> str | None:
    """The path a word may name (``~`` and, best effort, ``$VARS`` expanded), or None."""
    value = word.value
    if value.startswith("-"):
        _, eq, value = value.partition("=")
        if not eq:
            return None
    if not value or "\x00" in value or len(value) > 4096:
        return None
    if value.startswith("~"):
        value = os.path.expanduser(value)
    if word.dynamic:
        value = os.path.expandvars(value)  # best effort: the environment of this process
    return value


def _located(value: str, base: str) -> str:
    """``value`` in the directory ``base`` (relative to the root, absolute, or under ``~``)."""
    if not base or value.startswith("/"):
        return value
    if base.startswith("~"):
        base = os.path.expanduser(base)
    return base.rstrip("/") + "/" + value


def _placed(value: str, bases: tuple[str, ...]) -> list[str]:
    """``value`` in each directory a command may start in. A base that climbs (``l/..``) is
    two directories: the text with ``..`` collapsed (a logical ``cd`` got there) and with
    each symlink followed first (``cd -P``, or a logical one that fell back)."""
    placed = []
    for base in bases:
        placed.append(_located(value, base))
        if ".." in base.split("/"):
            placed.append(_located(value, os.path.normpath(base)))
    return placed


def _below(value: str) -> str:
    """A relative path as the components below an unknown directory (``..`` at its start
    stays in the unknown)."""
    parts = [p for p in os.path.normpath(value).split("/") if p not in ("", ".")]
    while parts and parts[0] == "..":
        parts.pop(0)
    return "/".join(parts)


def _candidates(value: str, dynamic: bool, root: str) -> list[str]:
    if not dynamic or not any(c in _GLOB_CHARS for c in value):
        return [value]
    pattern = value if os.path.isabs(value) else os.path.join(root, value)
    try:
        matches = glob.iglob(pattern, recursive=False, include_hidden=True)
        return [value, *itertools.islice(matches, _MAX_GLOB_MATCHES)]
    except (OSError, ValueError):
        return [value]


def _resolve_word(value: str, root: str) -> ResolvedPath:
    absolute = absolute_path(root, value)
    lexical = os.path.normpath(absolute)
    # A word that names nothing on disk cannot be a symlink; only its directories may be.
    if os.path.lexists(absolute) or "/" in value:
        return resolve_path(value, root)
    return ResolvedPath(value, lexical, lexical)
