"""``PermissionConfig``: rules, sensitive patterns and extra worktree roots (SPEC §5)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from fastgate.errors import FastgateConfigWarning
from fastgate.model.decision import PermissionMode
from fastgate.paths.globs import PathPattern
from fastgate.permissions.rules import (
    DEFAULT_PROTECTED,
    DEFAULT_SENSITIVE,
    Rule,
    RuleKind,
    RuleSet,
    parse_patterns,
    parse_rules,
)

if TYPE_CHECKING:
    from fastgate.tools.registry import ToolRegistry

_NO_SOURCES: Mapping[str, str] = MappingProxyType({})


class RuleTexts(tuple[str, ...]):
    """The texts of one list of a config's rules: what ``config.allow`` (``ask``, ``deny``)
    holds. It carries the parsed rules and the settings file of each, so a copy made from it
    (``dataclasses.replace(config, ...)``, ``PermissionConfig(allow=config.allow)``) keeps every
    rule's project and file."""

    parsed: tuple[Rule, ...]
    sources: Mapping[str, str]

    @classmethod
    def of(cls, rules: tuple[Rule, ...], sources: Mapping[str, str] = _NO_SOURCES) -> RuleTexts:
        texts = cls(r.text for r in rules)
        texts.parsed = rules
        texts.sources = MappingProxyType(
            {r.text: sources[r.text] for r in rules if r.text in sources}
        )
        return texts


def _rules(value: Iterable[str | Rule], kind: RuleKind) -> RuleTexts:
    if isinstance(value, RuleTexts):
        return RuleTexts.of(parse_rules(value.parsed, kind), value.sources)
    return RuleTexts.of(parse_rules(value, kind))


#: Why a host refuses ``YOLO`` mode when ``PermissionConfig.bypass_disabled`` is set.
BYPASS_DISABLED = (
    "bypassPermissions (YOLO) mode is disabled: a settings file sets "
    'permissions.disableBypassPermissionsMode to "disable"'
)


@dataclass(frozen=True)
class PermissionConfig:
    """Every rule and pattern is parsed here: a malformed one raises ``ValueError`` naming it,
    and nothing of the configuration is used (never half-applied).

    ``additional_dirs`` are absolute (or ``~``) directories that path arguments may reach
    besides the workspace root.

    ``protected``: paths whose change alters what runs later or what policy says
    (``DEFAULT_PROTECTED``): creating, writing, moving onto, deleting or changing the mode of
    one (a writer tool's path, a bash word in a writing position) is at least ASK in every
    mode, and session approvals do not cover it. Reading them is left to the rules.

    ``case_insensitive``: whether deny and ask rules, the sensitive and the protected patterns
    match paths ignoring case (allow rules never do). ``None``, the default,
    means where the workspace's file system ignores case (macOS and Windows, or a probed
    case-insensitive volume); ``True`` forces it everywhere.

    ``default_mode``: the mode the settings ask for (``defaultMode``), or ``None``; the host
    decides whether to use it. ``bypass_disabled``: a settings file said
    ``disableBypassPermissionsMode: "disable"``; a host must then not run in ``YOLO`` mode
    (``fastgate call`` and ``fastgate serve`` refuse ``--mode yolo``). Rules may be given as
    text or as parsed ``Rule`` objects (what ``load`` does, so a ``/x`` pattern keeps the
    project of the file it came from).
    """

    allow: Iterable[str | Rule] = ()
    ask: Iterable[str | Rule] = ()
    deny: Iterable[str | Rule] = ()
    sensitive: Iterable[str] = DEFAULT_SENSITIVE
    additional_dirs: Iterable[str] = ()
    protected: Iterable[str] = DEFAULT_PROTECTED
    case_insensitive: bool | None = None
    default_mode: PermissionMode | None = None
    bypass_disabled: bool = False
    rules: RuleSet = field(init=False, repr=False, compare=False)
    sensitive_patterns: tuple[PathPattern, ...] = field(init=False, repr=False, compare=False)
    protected_patterns: tuple[PathPattern, ...] = field(init=False, repr=False, compare=False)
    # Set by ``load``: what the files said that has no effect. An init field (by ``load``, not
    # by callers), so that a copy made with ``dataclasses.replace`` keeps it.
    _notes: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        allow = _rules(self.allow, "allow")
        ask = _rules(self.ask, "ask")
        deny = _rules(self.deny, "deny")
        sensitive = parse_patterns(self.sensitive, "sensitive")
        protected = parse_patterns(self.protected, "protected")
        dirs = _parse_dirs(self.additional_dirs)
        fold = self.case_insensitive
        if fold is not None and type(fold) is not bool:
            raise ValueError(f"case_insensitive: expected True, False or None, got {fold!r}")
        mode = None if self.default_mode is None else PermissionMode.parse(self.default_mode)
        set_ = object.__setattr__
        set_(self, "default_mode", mode)
        notes = self._notes
        if not isinstance(notes, tuple) or not all(isinstance(n, str) for n in notes):
            raise TypeError("_notes: set by PermissionConfig.load, a tuple of strings")
        set_(self, "allow", allow)
        set_(self, "ask", ask)
        set_(self, "deny", deny)
        set_(self, "sensitive", tuple(p.text for p in sensitive))
        set_(self, "additional_dirs", dirs)
        set_(self, "rules", RuleSet.of(deny.parsed, ask.parsed, allow.parsed))
        set_(self, "sensitive_patterns", sensitive)
        set_(self, "protected", tuple(p.text for p in protected))
        set_(self, "protected_patterns", protected)

    @classmethod
    def load(
        cls,
        *paths: str | os.PathLike[str],
        sensitive: Iterable[str] = DEFAULT_SENSITIVE,
        case_insensitive: bool | None = None,
        protected: Iterable[str] = DEFAULT_PROTECTED,
        workspace: str | os.PathLike[str] | None = None,
    ) -> PermissionConfig:
        """The rules of Claude Code-shaped settings files, merged in order (SPEC §5): rules add
        up, ``additionalDirectories`` add up (relative ones are relative to each file's
        project), a later ``defaultMode`` wins. ``ValueError`` naming the file for a JSON error,
        an unknown key inside ``permissions`` or a malformed rule; nothing is half-applied.

        ``workspace``: the repository being worked on. Its own files (those inside it) add
        rules, but a ``defaultMode`` of ``bypassPermissions`` and ``additionalDirectories`` in
        them are ignored (each named in ``warnings()``): a cloned repository must not turn
        prompting off or open directories beyond itself. ``disableBypassPermissionsMode`` in
        any file drops a ``bypassPermissions`` default and sets ``bypass_disabled``. What
        ``warnings()`` lists then is also issued, each as a ``FastgateConfigWarning``."""
        from fastgate.permissions.settings_files import read_settings_file

        inside = _within(workspace)

        rules: dict[RuleKind, list[Rule]] = {"allow": [], "ask": [], "deny": []}
        sources: dict[RuleKind, dict[str, str]] = {"allow": {}, "ask": {}, "deny": {}}
        dirs: list[str] = []
        notes: list[str] = []
        mode: PermissionMode | None = None
        disabled = False
        for path in paths:
            loaded = read_settings_file(path)
            by_kind: tuple[tuple[RuleKind, tuple[Rule, ...]], ...] = (
                ("allow", loaded.allow),
                ("ask", loaded.ask),
                ("deny", loaded.deny),
            )
            for kind, found in by_kind:
                rules[kind].extend(found)
                for rule in found:
                    sources[kind].setdefault(rule.text, loaded.path)
            notes.extend(loaded.notes)
            repository = inside(loaded.path)
            if repository and loaded.additional_dirs:
                notes.append(
                    f"{loaded.path}: permissions.additionalDirectories is ignored in a "
                    "workspace's own settings (a repository cannot open directories beyond "
                    "itself); list them in your user settings"
                )
            else:
                dirs.extend(d for d in loaded.additional_dirs if d not in dirs)
            if repository and loaded.default_mode is PermissionMode.YOLO:
                notes.append(
                    f"{loaded.path}: defaultMode bypassPermissions is ignored in a workspace's "
                    "own settings (a repository cannot turn prompting off); set it in your "
                    "user settings or pass --mode"
                )
            elif loaded.default_mode is not None:
                mode = loaded.default_mode
            disabled = disabled or loaded.disables_bypass
        if disabled and mode is PermissionMode.YOLO:
            notes.append(
                "defaultMode bypassPermissions is dropped: disableBypassPermissionsMode is set"
            )
            mode = None

        def listed(kind: RuleKind) -> RuleTexts:
            return RuleTexts.of(parse_rules(rules[kind], kind), sources[kind])

        config = cls(
            allow=listed("allow"),
            ask=listed("ask"),
            deny=listed("deny"),
            sensitive=sensitive,
            additional_dirs=dirs,
            protected=protected,
            case_insensitive=case_insensitive,
            default_mode=mode,
            bypass_disabled=disabled,
            _notes=tuple(notes),
        )
        # What can be told without the tools (a registry names them: ``warnings(registry)``).
        for note in config.warnings():
            warnings.warn(note, FastgateConfigWarning, stacklevel=2)
        return config

    def source_of(self, rule: str) -> str | None:
        """The settings file ``rule`` (its text) was first loaded from, as a deny, else an ask,
        else an allow rule; ``None`` for a rule given in code (or not in this configuration)."""
        for texts in (self.deny, self.ask, self.allow):
            if isinstance(texts, RuleTexts) and rule in texts.sources:
                return texts.sources[rule]
        return None

    def warnings(self, registry: ToolRegistry | None = None) -> list[str]:
        """Rules that can never match, each named with its file, as Claude Code warns at start:
        with a ``registry``, names no tool answers to and specifiers the tools cannot take;
        always, empty patterns and ``/x`` patterns whose absolute reading exists on disk; and
        settings the files hold that fastgate does not act on."""
        from fastgate.permissions.dead_rules import dead_rule_warnings

        return [*dead_rule_warnings(self.all_rules, self.source_of, registry), *self._notes]

    @property
    def all_rules(self) -> tuple[Rule, ...]:
        return tuple(
            r for rules in self.rules.by_tool.values() for r in rules.deny + rules.ask + rules.allow
        )


def _parse_dirs(dirs: Iterable[object]) -> tuple[str, ...]:
    if isinstance(dirs, (str, bytes)):
        raise ValueError(f"additional_dirs: expected a list of directories, got {dirs!r}")
    out: list[str] = []
    for d in dirs:
        if not isinstance(d, str) or not d or "\x00" in d:
            raise ValueError(f"additional_dirs: {d!r} is not a directory path")
        expanded = os.path.expanduser(d)
        if not os.path.isabs(expanded):
            raise ValueError(f"additional_dirs: {d!r} must be absolute (or start with ~/)")
        out.append(os.path.normpath(expanded))
    return tuple(out)


def _within(workspace: str | os.PathLike[str] | None) -> Callable[[str], bool]:
    """Whether a settings file is one of ``workspace``'s own (never, without a workspace; the
    user's own file is not, even in a workspace at ``$HOME``). A file is the workspace's when
    it is found inside it or resolves inside it: a ``.claude/settings.json`` (or a ``.claude``
    folder) linking to a file outside is still what the repository put there."""
    if workspace is None:
        return lambda path: False
    roots = _spellings(os.fspath(workspace))
    home = os.environ.get("HOME")
    users = _spellings(os.path.join(home, ".claude", "settings.json")) if home else set()

    def inside(path: str) -> bool:
        found = _spellings(path)
        if found & users:
            return False
        return any(_is_under(spelling, root) for spelling in found for root in roots)

    return inside


def _spellings(path: str) -> set[str]:
    """A path as written (made absolute, ``..`` collapsed) and as resolved (links followed)."""
    return {os.path.abspath(path), os.path.realpath(path)}


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
