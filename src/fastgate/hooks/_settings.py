"""The ``hooks`` key of Claude Code settings files, read for ``Hooks.load`` (SPEC §6.5).

``{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "...",
"timeout": 60}]}], "PostToolUse": [...], "PostToolUseFailure": [...]}}``. Every other top-level
key is ignored. Events and hook types fastgate does not run, and keys of a hook it does not act
on, are warnings naming the file; anything malformed is a ``ValueError`` naming the file.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from fastgate.errors import FastgateConfigWarning
from fastgate.hooks._command import CommandHook
from fastgate.hooks._pins import ScriptPins
from fastgate.hooks._registry import parse_matcher
from fastgate.processes import without_secrets

SUPPORTED_EVENTS: Final = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
DEFAULT_SETTINGS_TIMEOUT: Final = 60.0  # Claude Code's default, in seconds
_GROUP_KEYS: Final = frozenset({"matcher", "hooks"})
_COMMAND_KEYS: Final = frozenset({"type", "command", "timeout"})
_NAME_LIMIT: Final = 60  # characters of a command quoted in the hook's name


@dataclass(frozen=True, slots=True)
class SettingsHook:
    """One command hook of a settings file, ready to register."""

    event: str
    matcher: str
    hook: CommandHook
    name: str


@dataclass(frozen=True, slots=True)
class LoadedHooks:
    hooks: tuple[SettingsHook, ...]
    warnings: tuple[str, ...]


def load_settings_hooks(
    paths: Iterable[str | os.PathLike[str]], workspace: str | os.PathLike[str] | None = None
) -> LoadedHooks:
    """Read every file, pin every hook in ``workspace`` and in the workspace of every file,
    then warn (each note once, as a ``FastgateConfigWarning``)."""
    hooks: list[SettingsHook] = []
    notes: list[str] = []
    files = [os.fspath(path) for path in paths]
    for path in files:
        found, said = _read(path)
        hooks.extend(found)
        notes.extend(said)
    # Every hook is pinned now, in every workspace known now (a user's hook naming
    # "$CLAUDE_PROJECT_DIR"/scripts/check.sh runs the project's script, and a workspace with
    # no settings of its own is known only as ``workspace``): a hook first pinned when it
    # first runs would pin what the model may have rewritten by then.
    roots = dict.fromkeys(_project_of(path) for path in files)
    if workspace is not None:
        roots[os.path.abspath(workspace)] = None
    for setting in hooks:
        assert setting.hook.pins is not None
        for root in roots:
            setting.hook.pins.pin(root)
    for note in notes:
        warnings.warn(note, FastgateConfigWarning, stacklevel=3)
    return LoadedHooks(tuple(hooks), tuple(notes))


def _read(path: str) -> tuple[list[SettingsHook], list[str]]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read hook settings: {exc}") from None
    try:
        document = msgspec.json.decode(data)
        return _parse(document, path)
    except (msgspec.DecodeError, ValueError, RecursionError) as exc:  # nested too deeply
        raise ValueError(f"{path}: invalid hook settings: {exc}") from None


def _parse(document: Any, path: str) -> tuple[list[SettingsHook], list[str]]:
    if not isinstance(document, dict):
        raise ValueError("the top level must be a JSON object")
    notes: list[str] = []
    if document.get("disableAllHooks") is True:
        notes.append(
            f"{path}: disableAllHooks is not acted on: the hooks of every settings file still "
            "run (a settings file never turns policy off)"
        )
    if document.get("allowManagedHooksOnly") is True:
        notes.append(
            f"{path}: allowManagedHooksOnly is not acted on: the hooks of every settings file "
            "still run (hooks only tighten; a settings file never turns policy off)"
        )
    section = document.get("hooks")
    if section is None:
        return [], notes
    if not isinstance(section, dict):
        raise ValueError("'hooks' must be an object mapping event names to lists of matchers")
    hooks: list[SettingsHook] = []
    for event, groups in section.items():
        if event not in SUPPORTED_EVENTS:
            notes.append(
                f"{path}: hooks.{event}: fastgate does not run {event} hooks (it runs "
                f"{', '.join(SUPPORTED_EVENTS)}); they are ignored"
            )
            continue
        if not isinstance(groups, list):
            raise ValueError(f"'hooks.{event}' must be a list of matcher groups")
        for index, group in enumerate(groups):
            hooks.extend(_group(group, f"hooks.{event}[{index}]", event, path, notes))
    return hooks, notes


def _group(group: Any, where: str, event: str, path: str, notes: list[str]) -> list[SettingsHook]:
    if not isinstance(group, dict):
        raise ValueError(f"{where} must be an object with 'matcher' and 'hooks'")
    notes.extend(
        f"{path}: {where}.{key} is not read by fastgate and is ignored"
        for key in sorted(set(group) - _GROUP_KEYS)
    )
    matcher = group.get("matcher")
    if matcher is None:
        matcher = "*"
    if not isinstance(matcher, str):
        raise ValueError(f"{where}.matcher must be a string")
    try:
        parse_matcher(matcher)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    entries = group.get("hooks")
    if not isinstance(entries, list):
        raise ValueError(f"{where}.hooks must be a list of hooks")
    found: list[SettingsHook] = []
    for index, entry in enumerate(entries):
        hook = _hook(entry, f"{where}.hooks[{index}]", path, notes)
        if hook is not None:
            command = hook.argv[-1]
            short = command if len(command) <= _NAME_LIMIT else command[: _NAME_LIMIT - 3] + "..."
            found.append(SettingsHook(event, matcher, hook, f"{short} ({path})"))
    return found


def _hook(entry: Any, where: str, path: str, notes: list[str]) -> CommandHook | None:
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be an object with 'type' and 'command'")
    kind = entry.get("type")
    if not isinstance(kind, str):
        raise ValueError(f"{where}.type must be a string such as 'command'")
    if kind != "command":
        notes.append(
            f"{path}: {where}: fastgate does not run hooks of type {kind!r} (only 'command'); "
            "it is ignored"
        )
        return None
    notes.extend(
        f"{path}: {where}.{key} is not acted on by fastgate and is ignored"
        for key in sorted(set(entry) - _COMMAND_KEYS)
    )
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"{where}.command must be a non-empty string")
    if "\x00" in command:
        raise ValueError(f"{where}.command contains a NUL character")
    timeout = entry.get("timeout")
    if timeout is None:
        timeout = DEFAULT_SETTINGS_TIMEOUT
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not (math.isfinite(timeout) and timeout > 0)
    ):
        raise ValueError(f"{where}.timeout must be a positive number of seconds")
    # As Claude Code runs it: through sh -c, speaking its protocol, from the workspace root;
    # confined by the command sandbox where this host has one (fastgate.sandbox), with the
    # server's environment but its secrets, and only while the files it names are what they
    # were (a model that may edit files must not rewrite what the hook runs).
    pins = ScriptPins(command)  # pinned by load_settings_hooks, in every workspace it read
    return CommandHook(
        ["sh", "-c", command],
        timeout=float(timeout),
        env=without_secrets(os.environ),
        protocol="claude",
        sandbox=_sandbox(),
        pins=pins,
    )


def _project_of(path: str) -> str:
    """The workspace a settings file belongs to: the directory holding its ``.claude`` (or
    ``.fastgate``) directory."""
    return os.path.dirname(os.path.dirname(os.path.abspath(path)))


def _sandbox() -> Any:
    from fastgate.sandbox import SandboxPolicy, sandbox_support

    return SandboxPolicy() if sandbox_support().available else None
