"""Settings files in Claude Code's shape, read for ``PermissionConfig.load`` (SPEC §5).

``{"permissions": {"allow": [...], "ask": [...], "deny": [...], "additionalDirectories": [...],
"defaultMode": "..."}}``; every other top-level key (hooks, env, model, ...) is ignored. Inside
``permissions`` an unknown key is an error, except the few Claude Code keys fastgate reads and
does not act on, which are named in ``warnings()``.

The *project* of a file is what ``/x`` patterns and relative ``additionalDirectories`` are
relative to: the directory holding its ``.claude`` or ``.fastgate`` folder
(``<workspace>/.claude/settings.json`` stands for ``<workspace>``), else the file's own directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import msgspec

from fastgate.model.decision import PermissionMode
from fastgate.permissions.rules import Rule, RuleKind, parse_rules

SETTINGS_FOLDERS = (".claude", ".fastgate")
_KINDS: tuple[RuleKind, ...] = ("allow", "ask", "deny")
_KNOWN_KEYS = frozenset(
    {*_KINDS, "additionalDirectories", "defaultMode", "disableBypassPermissionsMode"}
)
# Claude Code keys that are accepted and have no effect here (named in warnings()).
_INERT_KEYS = frozenset(
    {
        "disableAutoMode",
        "denyInsteadOfPrompting",
        "blockReadsOutsideWorkingDirectories",
        "blockWritesOutsideWorkingDirectories",
    }
)


@dataclass(frozen=True, slots=True)
class SettingsFile:
    """One settings file, parsed: its rules (each knows its project), its extra directories
    (absolute), its ``defaultMode`` and notes for ``warnings()``."""

    path: str
    project: str
    allow: tuple[Rule, ...]
    ask: tuple[Rule, ...]
    deny: tuple[Rule, ...]
    additional_dirs: tuple[str, ...]
    default_mode: PermissionMode | None
    notes: tuple[str, ...]
    disables_bypass: bool = False  # ``disableBypassPermissionsMode: "disable"``


def project_of(path: str) -> str:
    """The canonical project directory of the settings file ``path`` (see the module docs).
    The folder it is found in decides first: ``<dir>/.claude/settings.json`` stands for
    ``<dir>`` even when it (or ``.claude``) links to a file elsewhere."""
    found = os.path.dirname(os.path.abspath(path))
    if os.path.basename(found) in SETTINGS_FOLDERS:
        return os.path.realpath(os.path.dirname(found))
    folder = os.path.dirname(os.path.realpath(path))
    if os.path.basename(folder) in SETTINGS_FOLDERS:
        return os.path.dirname(folder)
    return folder


def read_settings_file(path: str | os.PathLike[str]) -> SettingsFile:
    """Parse one settings file; ``ValueError`` naming the file for anything malformed."""
    text = os.fspath(path)
    try:
        with open(text, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ValueError(f"{text}: cannot read permission settings: {exc}") from None
    project = project_of(text)
    try:
        document = msgspec.json.decode(data)
        return _parse(document, text, project)
    except (msgspec.DecodeError, ValueError, RecursionError) as exc:  # nested too deeply
        raise ValueError(f"{text}: invalid permission settings: {exc}") from None


def _parse(document: Any, path: str, project: str) -> SettingsFile:
    if not isinstance(document, dict):
        raise ValueError("the top level must be a JSON object")
    permissions = document.get("permissions", {})
    if not isinstance(permissions, dict):
        raise ValueError("'permissions' must be an object")
    unknown = set(permissions) - _KNOWN_KEYS - _INERT_KEYS
    if unknown:
        raise ValueError(f"unknown key(s) in 'permissions': {', '.join(sorted(unknown))}")
    groups: dict[str, tuple[Rule, ...]] = {}
    for kind in _KINDS:
        rules = permissions.get(kind, [])
        if not isinstance(rules, list):
            raise ValueError(f"'permissions.{kind}' must be a list of rules")
        groups[kind] = parse_rules(rules, kind, project)
    mode = None
    if permissions.get("defaultMode") is not None:
        mode = PermissionMode.parse(permissions["defaultMode"], field="permissions.defaultMode")
    notes = tuple(
        f"{path}: permissions.{key} is read but has no effect in fastgate"
        for key in sorted(set(permissions) & _INERT_KEYS)
    )
    disables = permissions.get("disableBypassPermissionsMode")
    if disables is not None and disables != "disable":
        raise ValueError("'permissions.disableBypassPermissionsMode' must be \"disable\"")
    return SettingsFile(
        path,
        project,
        groups["allow"],
        groups["ask"],
        groups["deny"],
        _directories(permissions.get("additionalDirectories", []), project),
        mode,
        notes,
        disables == "disable",
    )


def _directories(value: Any, project: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError("'permissions.additionalDirectories' must be a list of directories")
    out: list[str] = []
    for entry in value:
        if not isinstance(entry, str) or not entry or "\x00" in entry:
            raise ValueError(f"additionalDirectories: {entry!r} is not a directory path")
        expanded = os.path.expanduser(entry)
        if not os.path.isabs(expanded):
            expanded = os.path.join(project, expanded)
        out.append("/" + os.path.normpath(expanded).lstrip("/"))  # ``//x`` is ``/x`` too
    return tuple(out)
