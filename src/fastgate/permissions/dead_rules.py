"""Rules that can never match, found the way Claude Code warns at start-up (SPEC §5
``PermissionConfig.warnings()``): a name no tool answers to, a specifier the tools of that name
cannot take, an empty pattern, and a ``/x`` pattern whose absolute reading exists on disk (``/x``
is relative to the project; ``//x`` is the absolute path)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from fastgate.permissions.rules import Rule

if TYPE_CHECKING:
    from fastgate.tools import ToolDefinition
    from fastgate.tools.registry import ToolRegistry

_GLOB_CHARACTERS = "*?["


def dead_rule_warnings(
    rules: Iterable[Rule],
    source_of: Callable[[str], str | None],
    registry: ToolRegistry | None = None,
) -> list[str]:
    """One sentence per problem, naming the rule and the file it came from."""
    definitions = registry.definitions() if registry is not None else None
    out: list[str] = []
    for rule in rules:
        source = source_of(rule.text)
        where = f" ({source})" if source else ""
        named = f"{rule.kind} rule {rule.text}{where}"
        problem = _pattern_problem(rule)
        if problem:
            out.append(f"{named}: {problem}")
        if definitions is not None:
            problem = _tool_problem(rule, definitions)
            if problem:
                out.append(f"{named}: {problem}")
    return out


def _pattern_problem(rule: Rule) -> str:
    spec = rule.specifier
    if spec is None:
        return ""
    tokens = rule.tokens
    if rule.wildcard is None and tokens is not None and all(not w.value for w in tokens):
        return "its pattern is empty, so it can never match"
    if rule.path is not None and spec.startswith("/") and not spec.startswith("//"):
        absolute = _literal_head(spec)
        if absolute not in ("", "/") and os.path.exists(absolute):
            base = rule.project or "the workspace root"
            return (
                f"`{spec}` is relative to the project ({base}), as in Claude Code; the absolute "
                f"path {absolute} exists: write `/{spec}` if that is what the rule means"
            )
    return ""


def _literal_head(pattern: str) -> str:
    """The directories of ``pattern`` before its first glob character."""
    cut = min((pattern.find(c) for c in _GLOB_CHARACTERS if c in pattern), default=len(pattern))
    head = pattern[:cut]
    return head if cut == len(pattern) else os.path.dirname(head)


def _tool_problem(rule: Rule, definitions: list[ToolDefinition]) -> str:
    answering = [d for d in definitions if _answers(d, rule.tool)]
    if not answering:
        return f"no registered tool answers to the name {rule.tool}, so it can never match"
    if rule.specifier is None or any(d.permission_key is not None for d in answering):
        return ""
    commands = any(_has_command(d) for d in answering)
    paths = any(_has_paths(d) for d in answering)
    names = ", ".join(sorted({d.name for d in answering}))
    if not commands and not paths:
        return (
            f"{names} take no specifier (no path, command or permission key), so it can never "
            f"match; write {rule.tool} alone to mean every call"
        )
    spec = rule.specifier
    # (``Bash(./run.sh)`` names a program; a ``**`` glob never does)
    if not paths and "**" in spec:
        return f"a path specifier, and {names} have no path arguments, so it can never match"
    if not commands and " " in spec and not _looks_like_path(spec):  # words, not a path
        return f"a command specifier, and {names} have no command argument, so it can never match"
    return ""


def _answers(definition: ToolDefinition, name: str) -> bool:
    if definition.name == name or name in definition.rule_names:
        return True
    return name.startswith("mcp__") and definition.name.startswith(name + "__")


def _has_command(definition: ToolDefinition) -> bool:
    properties = definition.input_schema.get("properties")
    return isinstance(properties, dict) and "command" in properties


def _has_paths(definition: ToolDefinition) -> bool:
    if definition.paths is not None:
        return True
    properties = definition.input_schema.get("properties")
    return isinstance(properties, dict) and any(p in properties for p in definition.path_args)


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "~/", "../")) or "**" in spec or "/" in spec
