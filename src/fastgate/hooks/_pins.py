"""The files a settings hook's command names, pinned as they were when first seen.

A hook from a settings file runs workspace content (``sh "$CLAUDE_PROJECT_DIR"/scripts/check.sh``).
A model allowed to edit files could rewrite that script and have the next hook run its code,
which its own ``bash`` calls may not run. So the files the command names (its path words and a
program named by path, as the bash analysis reads them, ``$CLAUDE_PROJECT_DIR`` filled in) are
hashed when the hook is loaded, or the first time it runs in a workspace, and a hook whose files
changed since is not run: it fails (a PreToolUse hook's failure denies the call).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat

from fastgate.permissions.commands import analyze_command
from fastgate.permissions.subjects import command_paths

_PROJECT_DIR = re.compile(r"\$\{CLAUDE_PROJECT_DIR\}|\$CLAUDE_PROJECT_DIR\b")
_MAX_PINNED = 32  # files one hook's pins name; a command naming more is pinned on its first
_MAX_HASHED = 1 << 20  # bytes hashed per file; a larger one is pinned by size, inode and mtime


class ChangedScript(Exception):
    """A file a hook's command names is not what it was when the hook was pinned."""


class ScriptPins:
    """The pinned files of one hook command, per workspace root."""

    __slots__ = ("_by_root", "command")

    def __init__(self, command: str) -> None:
        self.command = command
        self._by_root: dict[str, dict[str, str]] = {}

    def pin(self, root: str) -> None:
        """Record the files the command names in ``root`` as they are now (once per root,
        however it is spelled: a trailing slash, ``.`` or a symlink name the same root)."""
        root = os.path.realpath(root)
        if root not in self._by_root:
            self._by_root[root] = {path: _fingerprint(path) for path in self._files(root)}

    def check(self, root: str) -> None:
        """Raise ``ChangedScript`` when a file pinned for ``root`` changed; pin it first if
        the hook never ran there."""
        pinned = self._by_root.get(os.path.realpath(root))
        if pinned is None:
            self.pin(root)
            return
        for path, fingerprint in pinned.items():
            now = _fingerprint(path)
            if now != fingerprint:
                raise ChangedScript(
                    f"{path}, which the hook's command runs, changed since the hook was loaded "
                    f"({'it is gone' if not now else 'its content differs'}): not run. Reload "
                    "the settings to run the new version"
                )

    def _files(self, root: str) -> list[str]:
        # The variable stands for a placeholder directory made of characters no shell context
        # reads specially, mapped back to the root in what the analysis finds: the root pasted
        # in as text would be read as shell (a quote, ``$``, a backtick or ``;`` in its name hid
        # the script from the pins).
        holder = f"/fastgate-project-dir-{secrets.token_hex(8)}"
        analysis = analyze_command(_PROJECT_DIR.sub(holder, self.command))

        def placed(path: str) -> str:
            if path == holder or path.startswith(holder + "/"):
                path = root + path[len(holder) :]
            return os.path.realpath(os.path.join(root, os.path.expanduser(path)))

        found: dict[str, None] = {}
        programs = [
            form[0].value
            for facts in analysis.commands
            for form in facts.forms[:1]
            if form and not form[0].dynamic and "/" in form[0].value
        ]
        for program in programs:
            found[placed(program)] = None
        paths = command_paths(analysis, root)
        for resolved in paths.paths if paths is not None else ():
            found[placed(resolved.canonical)] = None
        files = [path for path in found if _is_file(path)]
        return files[:_MAX_PINNED]


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _fingerprint(path: str) -> str:
    """What a file is now: its content's hash (its size, inode and mtime when it is large);
    "" when it is gone or not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return ""
        if info.st_size > _MAX_HASHED:
            return f"large:{info.st_size}:{info.st_ino}:{info.st_mtime_ns}"
        digest = hashlib.sha256()
        while chunk := os.read(fd, 65536):
            digest.update(chunk)
        return digest.hexdigest()
    except OSError:
        return ""
    finally:
        os.close(fd)
