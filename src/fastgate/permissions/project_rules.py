"""The allow rules a ``project`` approval writes: exactly the approved call, or none (SPEC §7).

A rule in the project's settings outlives the session and covers every later session, so it
must match the call the user saw and nothing else. ``exact_rules_for`` builds the rules
(``matching.project_rules_for``), reads each one back with the rule grammar, and refuses, with
the reason, any call whose rules would be read wider than the call:

- a command: one simple command only, nothing around it but descriptor duplications
  (``2>&1``): a compound, a pipeline, a substitution, a nested shell, a heredoc or here-string,
  a file redirection or an assignment would need several rules, or a rule blind to part of it.
  No word may be expanded when it runs (a glob, a variable, braces, ``~``: the same text names
  other files or arguments elsewhere), nor hold, quoted, a character that makes a word such an
  expansion (rules compare words by text: ``'*'`` and ``*`` would compare equal). The rule read
  back must be exact (no ``*`` wildcard, no ``:*`` or `` *`` prefix) and hold the very words
  of the command.
- paths: each rule read back is a literal pattern of its canonical path (glob characters
  escaped). A path rule names its path and anything that is ever below it (the grammar has no
  narrower form); the path of a file written or edited has nothing below it.
- a permission key: read back exact (not a prefix, not ``*``).
- a tool none of these describes: only a tool that takes no arguments (its bare rule covers
  every call, whatever its arguments).

A rule sees only the command, the path or the key: whatever else a call says is invisible to it,
and a rule would allow it with any value. So the call may give no argument beyond the one the
rule names (less those its signature leaves out, the built-in ``bash``'s ``description``), and
its tool may declare none either: an argument left out of the approved call would be allowed,
with any value, in the next one. The one exception is the built-in ``bash``'s ``timeout`` when
the call leaves it out: it only bounds how long the approved command may run. A ``permission_key``
names no argument (the key is the tool's own reading of them), so a keyed tool that takes
arguments is refused too.

Refusals are ``ValueError``: the caller keeps the approval for the session instead.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any, Final

from fastgate.permissions.matching import project_rules_for
from fastgate.permissions.rules import Rule, parse_rule
from fastgate.permissions.shell import ShellSyntaxError, Word, parse_command
from fastgate.permissions.subjects import Subject
from fastgate.tools import ToolDefinition

# Characters that make an unquoted word expand at run time (globs, braces, parameters,
# substitutions, the home directory); a quoted one would compare equal to the expanding word.
_EXPANDING = frozenset("*?[]{}$`~")
# Redirections that only join the command's own descriptors (``2>&1``, ``>&2``, ``<&-``).
_DUPLICATIONS = frozenset((">&", "<&"))
_BUILTIN_BASH: Final = "fastgate.builtin._bash"
# Schema keywords through which an object admits arguments its ``properties`` do not list.
_OTHER_ARGUMENTS: Final = (
    "patternProperties",
    "dependentSchemas",
    "anyOf",
    "oneOf",
    "allOf",
    "if",
    "$ref",
    "$dynamicRef",
)


def exact_rules_for(
    tool: ToolDefinition, args: Mapping[str, Any], subject: Subject, ignored: frozenset[str]
) -> list[str]:
    """Allow rules that match this call and nothing else; ``ValueError`` saying why there are
    none. ``ignored``: the arguments the tool is known never to read."""
    tool_name = tool.name
    rules = project_rules_for(tool_name, subject)  # refuses what no rule can describe
    if subject.kind == "command":
        _check_command(rules, subject)
    elif subject.kind == "paths":
        canonical = dict.fromkeys(p.canonical for p in subject.paths)  # as the rules are made
        for rule, path in zip(rules, canonical, strict=True):
            _check_path(rule, path)
    elif subject.kind == "key":
        parsed = parse_rule(rules[0], "allow")
        if parsed.prefix or parsed.specifier != subject.key:
            raise ValueError(
                f"the permission key {subject.key!r} reads as a pattern in a rule, so no rule "
                "can name only this call"
            )
    elif subject.key != "{}":
        raise ValueError(
            f"a rule for {tool_name} cannot name its arguments: it would cover every call of "
            "the tool"
        )
    _check_arguments(tool, args, subject, ignored)
    return rules


def _check_command(rules: list[str], subject: Subject) -> None:
    analysis = subject.command
    assert analysis is not None  # a command subject always has its analysis
    if len(rules) != 1 or len(analysis.commands) != 1 or analysis.commands[0].delegated:
        raise ValueError(
            "the command runs more than one command (a compound, a pipeline, a substitution or "
            "a nested shell): no single rule names only it"
        )
    _check_single_command(subject.key)
    form = analysis.commands[0].allow_forms[0]
    for word in form:
        _check_word(word)
    parsed = parse_rule(rules[0], "allow")
    tokens = parsed.tokens
    if (
        parsed.wildcard is not None
        or parsed.prefix
        or tokens is None
        or [(t.text, t.dynamic) for t in tokens] != [(w.text, False) for w in form]
    ):
        raise ValueError(f"the rule {rules[0]} would not read back as exactly this command")


def _check_single_command(command: str) -> None:
    """One simple command with no assignment and no redirection but descriptor duplications."""
    try:
        commands, _ = parse_command(command)
    except ShellSyntaxError as exc:
        raise ValueError(f"the command cannot be read again: {exc}") from None
    if len(commands) != 1:
        raise ValueError("the command runs more than one command: no single rule names only it")
    simple = commands[0]
    if simple.assignments or simple.hazard:
        raise ValueError("the command sets variables for what it runs: a rule would not name them")
    for redirect in simple.redirects:
        target = redirect.target
        if redirect.op not in _DUPLICATIONS or target is None or not _is_descriptor(target):
            raise ValueError(
                f"the command redirects its input or output ({redirect.op}): a rule would not "
                "name where to"
            )


def _is_descriptor(word: Word) -> bool:
    return not word.dynamic and (word.value == "-" or word.value.isdigit())


def _check_word(word: Word) -> None:
    if word.dynamic:
        raise ValueError(
            f"{word.raw} is expanded when the command runs (a glob, a variable, braces, ~ or a "
            "substitution): no rule names only this command"
        )
    held = sorted(_EXPANDING.intersection(word.value))
    if held or _reads_as_expansion(word.value):
        shown = " ".join(held) or word.value
        raise ValueError(
            f"the word {word.value!r} holds {shown}, which a rule would read like the same "
            "characters unquoted (an expansion): no rule names only this command"
        )


def _reads_as_expansion(value: str) -> bool:
    """Whether ``value``, written unquoted, is a word the shell expands (the parser's view)."""
    try:
        commands, _ = parse_command(value)
    except ShellSyntaxError:
        return False
    words = [w for c in commands for w in c.words]
    return len(words) == 1 and words[0].dynamic and words[0].raw == value


def _check_path(rule_text: str, path: str) -> None:
    parsed: Rule = parse_rule(rule_text, "allow")
    pattern = parsed.path
    literal = "/".join(re.escape(part) for part in path.strip("/").split("/"))
    if (
        pattern is None
        or parsed.prefix
        or pattern.anchor != "absolute"
        or pattern.prefix != "/"
        or pattern.body != literal
    ):
        raise ValueError(
            f"the path {path!r} cannot be written as a rule naming only it: the rule grammar "
            "reads part of it as a pattern"
        )


def _check_arguments(
    tool: ToolDefinition, args: Mapping[str, Any], subject: Subject, ignored: frozenset[str]
) -> None:
    """Refuse a call with, or a tool taking, an argument its rule would not name."""
    named: tuple[str, ...] = ()
    if subject.kind == "command":
        named = ("command",)
    elif subject.kind == "paths":
        primary = tool.path_args[0] if tool.path_args else None
        # One path, in the tool's first path argument: two paths (or one in another argument,
        # or read from the tool's ``paths``) would each be allowed in any role.
        if primary is None or subject.path_names != (primary,):
            raise ValueError(
                f"a rule for {tool.name} names paths, not which argument gives which path: it "
                "would allow them in any role"
            )
        named = (primary,)
    what = _WHAT_RULES_NAME.get(subject.kind, "no argument")
    given = [name for name in args if name not in named and name not in ignored]
    if subject.kind == "key" and (given or _declared_arguments(tool) != []):
        raise ValueError(
            f"a rule for {tool.name} names its permission key, not the arguments it is read "
            "from: it would allow every call with that key, whatever its other arguments say"
        )
    if given:
        raise ValueError(
            f"a rule for {tool.name} names {what} only, not {_listed(given)}: it would allow "
            "any value there"
        )
    declared = _declared_arguments(tool)
    if declared is None:
        raise ValueError(
            f"{tool.name} takes arguments its schema does not list by name: a rule would allow "
            "them with any value"
        )
    open_ = _bounds_only(tool)
    left_out = [n for n in declared if n not in named and n not in ignored and n not in open_]
    if left_out:
        raise ValueError(
            f"{tool.name} also takes {_listed(left_out)}, which a rule cannot name: it would "
            "allow the next call any value there"
        )


_WHAT_RULES_NAME: Final = {"command": "the command", "paths": "the path"}


def _listed(names: list[str]) -> str:
    return ", ".join(repr(name) for name in names)


def _declared_arguments(tool: ToolDefinition) -> list[str] | None:
    """The argument names the tool's input schema declares; None when it admits more than a
    list of names says (a schema for other properties, combinators, a reference)."""
    schema = tool.input_schema
    extra = (schema.get("additionalProperties"), schema.get("unevaluatedProperties"))
    if any(isinstance(e, dict) for e in extra) or any(key in schema for key in _OTHER_ARGUMENTS):
        return None
    properties = schema.get("properties") or {}
    return list(properties) if isinstance(properties, dict) else None


def _bounds_only(tool: ToolDefinition) -> frozenset[str]:
    """Arguments that, left out of the approved call, the rule may leave open: the built-in
    ``bash``'s ``timeout`` only bounds how long the same command runs. Told by its function,
    as its signature tells it."""
    module = sys.modules.get(_BUILTIN_BASH)
    if module is not None and tool.execute is getattr(module, "bash", None):
        return _BASH_BOUNDS
    return frozenset()


_BASH_BOUNDS: Final = frozenset({"timeout"})
