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
- a tool none of these describes: only a call without arguments (its bare rule covers every
  call, whatever its arguments).

Refusals are ``ValueError``: the caller keeps the approval for the session instead.
"""

from __future__ import annotations

import re

from fastgate.permissions.matching import project_rules_for
from fastgate.permissions.rules import Rule, parse_rule
from fastgate.permissions.shell import ShellSyntaxError, Word, parse_command
from fastgate.permissions.subjects import Subject

# Characters that make an unquoted word expand at run time (globs, braces, parameters,
# substitutions, the home directory); a quoted one would compare equal to the expanding word.
_EXPANDING = frozenset("*?[]{}$`~")
# Redirections that only join the command's own descriptors (``2>&1``, ``>&2``, ``<&-``).
_DUPLICATIONS = frozenset((">&", "<&"))


def exact_rules_for(tool_name: str, subject: Subject) -> list[str]:
    """Allow rules that match this call and nothing else; ``ValueError`` saying why there are
    none."""
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
