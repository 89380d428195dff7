"""The files a settings hook's command names, pinned as they were when first seen.

A hook from a settings file runs workspace content (``sh "$CLAUDE_PROJECT_DIR"/scripts/check.sh``).
A model allowed to edit files could rewrite that script, or create it where it was missing, and
have the next hook run its code, which its own ``bash`` calls may not run. So the files the
command names (its path words and the scripts it runs, as the bash analysis reads them,
``$CLAUDE_PROJECT_DIR`` filled in) are hashed when the hook is loaded, or the first time it runs
in a workspace, and a script with no file then is recorded as absent. A hook whose files changed
since, or where a script appeared, is not run: it fails (a PreToolUse hook's failure denies the
call).

A file the command names but does not run (``--rules rules.json``, ``--log calls.jsonl``) may
be the hook's own to write: after each run it is pinned again as the run left it, so a hook
that updates it keeps running, while a change made between runs still stops the hook. The
scripts it runs are pinned once, whatever a run does to them.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator

from fastgate.permissions.commands import CommandAnalysis, analyze_command
from fastgate.permissions.shell import Word
from fastgate.permissions.subjects import command_paths

# Every spelling the shell expands to the root: $CLAUDE_PROJECT_DIR, ${CLAUDE_PROJECT_DIR}, and
# the default forms (${CLAUDE_PROJECT_DIR:-.} and the like: the variable is always set).
_PROJECT_DIR = re.compile(r"\$\{CLAUDE_PROJECT_DIR(?::?[-=?][^{}]*)?\}|\$CLAUDE_PROJECT_DIR\b")
# Programs whose first operand is a script they run (``sh x``, ``. x``, ``python3 -u x``), and
# the options after which the code is in the command line instead.
_INTERPRETER = re.compile(
    r"(?:ba|da|z|k|mk)?sh|fish|source|\.|python[0-9.]*|pypy[0-9.]*|node(?:js)?|bun|tsx"
    r"|ruby|perl|php|lua[0-9.]*|Rscript"
)
_INLINE_CODE = frozenset({"-c", "-e", "-E", "-m", "-p", "--eval", "--print"})
_MAX_PINNED = 32  # files, and absent scripts, one hook's pins name; past that, the first ones
_MAX_HASHED = 1 << 20  # bytes hashed per file; a larger one is pinned by size, inode and mtime
_ABSENT = ""  # the fingerprint of a path where no regular file is


class ChangedScript(Exception):
    """A file a hook's command names is not what it was when the hook was pinned."""


class ScriptPins:
    """The pinned files of one hook command, per workspace root."""

    __slots__ = ("_by_root", "_data", "command")

    def __init__(self, command: str) -> None:
        self.command = command
        self._by_root: dict[str, dict[str, str]] = {}
        self._data: dict[str, tuple[str, ...]] = {}  # root -> the pinned files it does not run

    def pin(self, root: str) -> None:
        """Record the files the command names in ``root`` as they are now, absent ones too
        (once per root, however it is spelled: a trailing slash, ``.`` or a symlink name the
        same root)."""
        root = os.path.realpath(root)
        if root not in self._by_root:
            paths, data = self._paths(root)
            self._by_root[root] = {path: _fingerprint(path) for path in paths}
            self._data[root] = data

    def settle(self, root: str) -> None:
        """After a run in ``root``: the files the command names but does not run are pinned
        again as the run left them (the hook may write them)."""
        root = os.path.realpath(root)
        pinned = self._by_root.get(root)
        if pinned is not None:
            for path in self._data.get(root, ()):
                pinned[path] = _fingerprint(path)

    def check(self, root: str) -> None:
        """Raise ``ChangedScript`` when a file pinned for ``root`` changed, or appeared where
        none was; pin it first if the hook never ran there."""
        pinned = self._by_root.get(os.path.realpath(root))
        if pinned is None:
            self.pin(root)
            return
        for path, fingerprint in pinned.items():
            now = _fingerprint(path)
            if now != fingerprint:
                runs = path not in self._data.get(os.path.realpath(root), ())
                raise ChangedScript(_changed(path, fingerprint, now, runs))

    def _paths(self, root: str) -> tuple[list[str], tuple[str, ...]]:
        """The files the command names in ``root`` (but those it writes itself: a log it
        appends to changes at every run), then the scripts it runs where no file is yet (but
        those it writes itself first); and which of the files it does not run. A file it runs
        is pinned even where it also writes it."""
        named: dict[str, None] = {}
        scripts: dict[str, None] = {}
        written: set[str] = set()
        for analysis, placed in self._readings(root):
            named.update(dict.fromkeys(placed(path) for path in _named(analysis, root)))
            scripts.update(dict.fromkeys(placed(path) for path in _scripts(analysis)))
            written.update(placed(path) for path in _written(analysis))
        files = [
            path
            for path in {**named, **scripts}
            if _is_file(path) and (path in scripts or path not in written)
        ]
        missing = [path for path in scripts if path not in written and not _is_file(path)]
        kept = files[:_MAX_PINNED]
        return kept + missing[:_MAX_PINNED], tuple(path for path in kept if path not in scripts)

    def _readings(self, root: str) -> Iterator[tuple[CommandAnalysis, Callable[[str], str]]]:
        """The command analysed twice, with where each path it finds is. First with the
        variable as the root wherever it is written (a nested ``sh -c '...'`` expands it in text
        the outer shell quoted), then as written: in single quotes the shell leaves
        ``$CLAUDE_PROJECT_DIR`` as text, and runs the path as it is spelled."""
        # The variable stands for a placeholder directory made of characters no shell context
        # reads specially, mapped back to the root in what the analysis finds: the root pasted
        # in as text would be read as shell (a quote, ``$``, a backtick or ``;`` in its name hid
        # the script from the pins).
        holder = f"/fastgate-project-dir-{secrets.token_hex(8)}"

        def placed(path: str) -> str:
            if path == holder or path.startswith(holder + "/"):
                path = root + path[len(holder) :]
            return os.path.realpath(os.path.join(root, os.path.expanduser(path)))

        yield analyze_command(_PROJECT_DIR.sub(holder, self.command)), placed
        yield analyze_command(self.command), placed


def _named(analysis: CommandAnalysis, root: str) -> Iterator[str]:
    """Every word of the command that may name a file, as the analysis resolves it (before
    the placeholder is mapped back)."""
    paths = command_paths(analysis, root)
    for resolved in paths.paths if paths is not None else ():
        yield resolved.canonical


def _scripts(analysis: CommandAnalysis) -> Iterator[str]:
    """The files the command runs as code, in every directory it may run in: a program named
    by path (``./lint.sh``) and the script a shell or an interpreter is given (``sh check.sh``,
    ``/usr/bin/python3 -u guard.py``). Other words may name data the hook itself creates."""
    for facts in analysis.commands:
        for form in facts.forms:  # as written, then each command a wrapper (env, timeout) runs
            for word in _script_words(form):
                for base in facts.bases:
                    yield os.path.join(base, word.value)


def _script_words(form: tuple[Word, ...]) -> Iterator[Word]:
    if not form or form[0].dynamic:
        return
    program = form[0]
    if "/" in program.value:
        yield program
    if not _INTERPRETER.fullmatch(os.path.basename(program.value)):
        return
    for word in form[1:]:
        if word.value in _INLINE_CODE:
            return  # the code is in the command line itself
        if not word.value.startswith("-"):
            if not word.dynamic:
                yield word
            return


def _written(analysis: CommandAnalysis) -> Iterator[str]:
    """The paths the command writes for certain (redirections, copies), in every directory it
    may run in."""
    for facts in analysis.commands:
        for word in facts.write_words:
            for base in facts.bases:
                yield os.path.join(base, word.value)


def _changed(path: str, then: str, now: str, runs: bool) -> str:
    if then == _ABSENT:
        return (
            f"{path}, which the hook's command names, did not exist when the hook was loaded "
            "and exists now: not run. Reload the settings to run it"
        )
    since = (
        "runs, changed since the hook was loaded" if runs else "names, changed since it last ran"
    )
    return (
        f"{path}, which the hook's command {since} "
        f"({'it is gone' if now == _ABSENT else 'its content differs'}): not run. Reload "
        "the settings to run the new version"
    )


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _fingerprint(path: str) -> str:
    """What a file is now: its content's hash (its size, inode and mtime when it is large);
    ``_ABSENT`` when it is gone or not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return _ABSENT
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return _ABSENT
        if info.st_size > _MAX_HASHED:
            return f"large:{info.st_size}:{info.st_ino}:{info.st_mtime_ns}"
        digest = hashlib.sha256()
        while chunk := os.read(fd, 65536):
            digest.update(chunk)
        return digest.hexdigest()
    except OSError:
        return _ABSENT
    finally:
        os.close(fd)
