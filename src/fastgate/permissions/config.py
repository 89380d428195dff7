"""``PermissionConfig``: rules, sensitive patterns and extra worktree roots (SPEC §5)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from fastgate.permissions.globs import PathPattern
from fastgate.permissions.rules import (
    DEFAULT_SENSITIVE,
    Rule,
    RuleSet,
    parse_patterns,
    parse_rules,
)


@dataclass(frozen=True)
class PermissionConfig:
    """Every rule and pattern is parsed here: a malformed one raises ``ValueError`` naming it,
    and nothing of the configuration is used (never half-applied).

    ``additional_dirs`` are absolute (or ``~``) directories that path arguments may reach
    besides the workspace root.

    ``case_insensitive``: whether deny and ask rules, the sensitive patterns and the protected
    settings directory match paths ignoring case (allow rules never do). ``None``, the default,
    means where the workspace's file system ignores case (macOS and Windows, or a probed
    case-insensitive volume); ``True`` forces it everywhere.
    """

    allow: Iterable[str] = ()
    ask: Iterable[str] = ()
    deny: Iterable[str] = ()
    sensitive: Iterable[str] = DEFAULT_SENSITIVE
    additional_dirs: Iterable[str] = ()
    case_insensitive: bool | None = None
    rules: RuleSet = field(init=False, repr=False, compare=False)
    sensitive_patterns: tuple[PathPattern, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        allow = parse_rules(self.allow, "allow")
        ask = parse_rules(self.ask, "ask")
        deny = parse_rules(self.deny, "deny")
        sensitive = parse_patterns(self.sensitive, "sensitive")
        dirs = _parse_dirs(self.additional_dirs)
        fold = self.case_insensitive
        if fold is not None and type(fold) is not bool:
            raise ValueError(f"case_insensitive: expected True, False or None, got {fold!r}")
        set_ = object.__setattr__
        set_(self, "allow", tuple(r.text for r in allow))
        set_(self, "ask", tuple(r.text for r in ask))
        set_(self, "deny", tuple(r.text for r in deny))
        set_(self, "sensitive", tuple(p.text for p in sensitive))
        set_(self, "additional_dirs", dirs)
        set_(self, "rules", RuleSet.of(deny, ask, allow))
        set_(self, "sensitive_patterns", sensitive)

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
