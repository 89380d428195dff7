"""Project settings: ``<workspace>/.fastgate/settings.local.json``.

``{"permissions": {"allow": [...], "ask": [...], "deny": [...]}}``. The resolver re-reads the
file whenever its identity (inode, size, mtime, ctime) changes, so a rule written by one process
is honoured by every resolver. Writes are atomic (temporary file in the same directory, fsync,
``os.replace``, fsync of the directory) and serialized across processes with ``flock``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from fastgate.model.decision import PermissionMode
from fastgate.permissions.rules import RuleKind, RuleSet, parse_rules

SETTINGS_DIR = ".fastgate"
SETTINGS_FILE = "settings.local.json"
_KINDS: tuple[RuleKind, ...] = ("allow", "ask", "deny")
_KNOWN_KEYS = frozenset({*_KINDS, "defaultMode"})

_fcntl: Any
try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows: in-process lock only
    _fcntl = None


def settings_path(workspace_root: str) -> str:
    return os.path.join(workspace_root, SETTINGS_DIR, SETTINGS_FILE)


def parse_settings(data: bytes, path: str) -> RuleSet:
    """The rules of a settings file; ``ValueError`` naming the file for anything malformed."""
    try:
        document = msgspec.json.decode(data)
        return _rules_of(document)
    except (msgspec.DecodeError, ValueError) as exc:
        raise ValueError(f"{path}: invalid permission settings: {exc}") from None


def _rules_of(document: Any) -> RuleSet:
    if not isinstance(document, dict):
        raise ValueError("the top level must be a JSON object")
    permissions = document.get("permissions", {})
    if not isinstance(permissions, dict):
        raise ValueError("'permissions' must be an object")
    unknown = set(permissions) - _KNOWN_KEYS
    if unknown:
        raise ValueError(f"unknown key(s) in 'permissions': {', '.join(sorted(unknown))}")
    if "defaultMode" in permissions:  # checked, not applied: the host sets the mode
        PermissionMode.parse(permissions["defaultMode"], field="permissions.defaultMode")
    groups = []
    for kind in _KINDS:
        rules = permissions.get(kind, [])
        if not isinstance(rules, list):
            raise ValueError(f"'permissions.{kind}' must be a list of rules")
        groups.append(parse_rules(rules, kind))
    deny, ask, allow = groups[2], groups[1], groups[0]
    return RuleSet.of(deny, ask, allow)


RECHECK_SECONDS = 0.25
_monotonic: Final = time.monotonic  # compiled, a C static: no lookups per call


class SettingsCache:
    """The parsed rules of each workspace's settings file, reloaded when the file changes.

    The file is looked at (one ``stat``) at most every ``RECHECK_SECONDS`` per workspace: a
    decision per call must not cost a system call and an exception when the file does not
    exist. Edits made by another process are seen within that delay; this process's own writes
    (project approvals) are seen at once (``forget``).
    """

    __slots__ = ("_checked", "_entries", "_lock", "_paths")

    def __init__(self) -> None:
        self._entries: dict[str, tuple[tuple[int, ...], RuleSet]] = {}
        self._paths: dict[str, str] = {}
        self._checked: dict[str, tuple[float, RuleSet | None]] = {}
        self._lock = threading.Lock()

    def forget(self, workspace_root: str) -> None:
        """Look at the file again on the next call (after this process wrote it)."""
        self._checked.pop(workspace_root, None)

    def rules(self, workspace_root: str) -> RuleSet | None:
        """None when there is no settings file; ``ValueError`` when it is malformed."""
        now = _monotonic()
        checked = self._checked.get(workspace_root)
        if checked is not None and now - checked[0] < RECHECK_SECONDS:
            return checked[1]
        rules = self._load(workspace_root)
        if len(self._checked) > 1024:
            self._checked.clear()
        self._checked[workspace_root] = (now, rules)
        return rules

    def _load(self, workspace_root: str) -> RuleSet | None:
        path = self._paths.get(workspace_root)
        if path is None:
            path = settings_path(workspace_root)
            if len(self._paths) > 1024:
                self._paths.clear()
            self._paths[workspace_root] = path
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        identity = (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        entry = self._entries.get(path)
        if entry is not None and entry[0] == identity:
            return entry[1]
        try:
            with open(path, "rb") as f:
                data = f.read()
                st = os.fstat(f.fileno())
        except OSError as exc:
            raise ValueError(f"{path}: cannot read permission settings: {exc}") from None
        rules = parse_settings(data, path)
        identity = (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with self._lock:
            if len(self._entries) > 1024:
                self._entries.clear()
            self._entries[path] = (identity, rules)
        return rules


_write_lock = threading.Lock()


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    with _write_lock:
        if _fcntl is None:
            yield
            return
        fd = os.open(
            os.path.join(directory, SETTINGS_FILE + ".lock"), os.O_RDWR | os.O_CREAT, 0o600
        )
        try:
            _fcntl.flock(fd, _fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def append_rules(workspace_root: str, kind: RuleKind, rules: list[str]) -> None:
    """Append ``rules`` (those not already present) to the settings file, atomically, keeping
    every other key. A malformed existing file is left alone and reported (``ValueError``)."""
    parse_rules(rules, kind)  # never write a rule the reader would refuse
    directory = os.path.join(workspace_root, SETTINGS_DIR)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, SETTINGS_FILE)
    with _locked(directory):
        document: dict[str, Any] = {}
        mode = 0o644
        try:
            with open(path, "rb") as f:
                data = f.read()
                mode = os.fstat(f.fileno()).st_mode & 0o777
        except FileNotFoundError:
            data = b""
        if data.strip():
            parse_settings(data, path)
            document = msgspec.json.decode(data)
        permissions = document.setdefault("permissions", {})
        existing = permissions.setdefault(kind, [])
        existing.extend(r for r in dict.fromkeys(rules) if r not in existing)
        _write_atomically(path, msgspec.json.format(msgspec.json.encode(document)) + b"\n", mode)


def _write_atomically(path: str, data: bytes, mode: int) -> None:
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=SETTINGS_FILE + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
