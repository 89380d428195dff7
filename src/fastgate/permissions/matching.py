"""Matching rules against commands and permission keys, and the rules a project approval writes.

DENY and ASK rules *may* match: any form of any sub-command (wrappers unwrapped), the program
compared by basename, and a word whose value is unknown (``$x``, a glob) matches anything from
there on. ALLOW rules *must* match: every sub-command needs an allow rule that matches one of its
allow forms word for word, and nothing else about it (redirections, assignments to ``PATH``…)
may be unaccounted for.

Wildcard rules (``git * main``) match a simple command's words joined by ``WORD_SEPARATOR``
against their regex: an allow form must match it whole, as written. A deny or ask rule may match
through that regex (the program by basename too) or word by word, options skipped, a ``*`` word
standing for any run of words and a word known only at run time for anything.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fastgate.paths.linear import LinearRegex, linear
from fastgate.permissions.commands import CommandAnalysis, CommandFacts, program_name
from fastgate.permissions.rules import (
    WORD_SEPARATOR,
    Rule,
    allow_text,
    has_star,
    is_star,
    parse_rule,
    word_regex,
)
from fastgate.permissions.shell import Word

if TYPE_CHECKING:
    from fastgate.permissions.subjects import Subject

_GLOB_SPECIALS = re.compile(r"([*?\[\]\\])")
_MAX_SKIP_SEARCH = 256


def command_matches(rule: Rule, analysis: CommandAnalysis) -> bool:
    """Whether a DENY/ASK rule may apply to any sub-command of ``analysis``."""
    if rule.specifier is None:
        return True
    tokens = rule.tokens
    if tokens is None:
        return False
    wildcard = rule.wildcard
    if wildcard is None:
        return any(
            _may_match(tokens, rule.prefix, form)
            for facts in analysis.commands
            for form in facts.forms
        )
    return any(
        _wildcard_may_match(wildcard, form) or _starred_may_match(tokens, rule.prefix, form)
        for facts in analysis.commands
        for form in facts.forms
    )


def _may_match(tokens: tuple[Word, ...], prefix: bool, form: tuple[Word, ...]) -> bool:
    """Whether the command ``form`` may be what the rule ``tokens`` names. Options (and what
    may be their arguments) between the rule's words are skipped, so ``git -C dir push`` is
    still ``git push``."""
    if not form:
        return False
    program = form[0]
    if program.dynamic:
        return True  # could expand to the rule's program
    if program.value != tokens[0].value and program_name(program) != program_name(tokens[0]):
        return False
    if len(form) > _MAX_SKIP_SEARCH:
        return True  # too long to search: assume the worst
    return _rest_may_match(tokens, 1, form, 1, prefix, {})


def _rest_may_match(
    tokens: tuple[Word, ...],
    ti: int,
    form: tuple[Word, ...],
    fi: int,
    prefix: bool,
    memo: dict[tuple[int, int], bool],
) -> bool:
    if ti == len(tokens):
        return prefix or fi == len(form) or any(w.dynamic for w in form[fi:])
    known = memo.get((ti, fi))
    if known is not None:
        return known
    result = False
    wanted = tokens[ti].value
    for j in range(fi, len(form)):
        word = form[j]
        if word.dynamic:
            result = True  # could expand to the rest of the rule
            break
        if word.value == wanted and _rest_may_match(tokens, ti + 1, form, j + 1, prefix, memo):
            result = True
            break
        if not (_is_option(word) or (j > fi and _takes_argument(form[j - 1]))):
            break
    memo[(ti, fi)] = result
    return result


def _wildcard_may_match(wildcard: LinearRegex, form: tuple[Word, ...]) -> bool:
    """The wildcard's regex over the command's words (its program as written or by basename);
    a form holding a word known only at run time is left to the word-by-word match."""
    if not form or any(w.dynamic for w in form):
        return False
    rest = [w.value for w in form[1:]]
    for program in {form[0].value, program_name(form[0])}:
        if wildcard.fullmatch(WORD_SEPARATOR.join([program, *rest])):
            return True
    return False


def _starred_may_match(tokens: tuple[Word, ...], prefix: bool, form: tuple[Word, ...]) -> bool:
    """``_may_match`` for a wildcard rule: a ``*`` word stands for any run of words, a word
    with a ``*`` in it for the words its pattern matches."""
    if not form:
        return False
    program = form[0]
    if program.dynamic:
        return True
    first = tokens[0]
    if len(form) > _MAX_SKIP_SEARCH:
        return True
    if is_star(first):  # any program, then the rest of the rule anywhere after it
        memo: dict[tuple[int, int], bool] = {}
        return any(_starred_rest(tokens, 1, form, j, prefix, memo) for j in range(len(form) + 1))
    named = Word(program_name(program), program.raw)
    if not (_token_matches(first, program) or _token_matches(first, named)):
        if has_star(first) or program_name(program) != program_name(first):
            return False
    return _starred_rest(tokens, 1, form, 1, prefix, {})


def _starred_rest(
    tokens: tuple[Word, ...],
    ti: int,
    form: tuple[Word, ...],
    fi: int,
    prefix: bool,
    memo: dict[tuple[int, int], bool],
) -> bool:
    if ti == len(tokens):
        return prefix or fi == len(form) or any(w.dynamic for w in form[fi:])
    known = memo.get((ti, fi))
    if known is not None:
        return known
    result = False
    wanted = tokens[ti]
    if is_star(wanted):  # any run of words, none included
        result = any(
            _starred_rest(tokens, ti + 1, form, j, prefix, memo) for j in range(fi, len(form) + 1)
        )
    else:
        for j in range(fi, len(form)):
            word = form[j]
            if word.dynamic:
                result = True  # could expand to the rest of the rule
                break
            if _token_matches(wanted, word) and _starred_rest(
                tokens, ti + 1, form, j + 1, prefix, memo
            ):
                result = True
                break
            if not (_is_option(word) or (j > fi and _takes_argument(form[j - 1]))):
                break
    memo[(ti, fi)] = result
    return result


def _token_matches(token: Word, word: Word) -> bool:
    """One rule word against one command word: equal, or matched by its ``*`` pattern."""
    if not has_star(token):
        return word.value == token.value
    pattern = _word_patterns.get(token.raw)
    if pattern is None:
        if len(_word_patterns) >= 256:
            _word_patterns.clear()
        pattern = _word_patterns[token.raw] = linear(word_regex(token))
    return pattern.fullmatch(word.value)


_word_patterns: dict[str, LinearRegex] = {}


def _is_option(word: Word) -> bool:
    return len(word.value) > 1 and word.value.startswith("-")


def _takes_argument(word: Word) -> bool:
    return _is_option(word) and "=" not in word.value


def _must_match(rule: Rule, tokens: tuple[Word, ...], form: tuple[Word, ...]) -> bool:
    """Word for word as written: a character bash expands matches only the same character
    unquoted in the rule (``allow_text``)."""
    wildcard = rule.allow_wildcard
    if wildcard is not None:
        return wildcard.fullmatch(WORD_SEPARATOR.join(allow_text(w) for w in form))
    if len(form) < len(tokens) or (not rule.prefix and len(form) != len(tokens)):
        return False
    return all(allow_text(form[i]) == allow_text(token) for i, token in enumerate(tokens))


def _facts_allowed_by(rules: Sequence[Rule], facts: CommandFacts) -> str | None:
    if not facts.allowable or facts.unknown:
        return None
    if facts.delegated:
        return ""  # its nested commands are checked on their own
    for rule in rules:
        tokens = rule.tokens
        if tokens is not None and any(_must_match(rule, tokens, f) for f in facts.allow_forms):
            return rule.text
    return None


def command_allowed_by(rules: Sequence[Rule], analysis: CommandAnalysis) -> str | None:
    """The allow rules covering every sub-command (comma-separated), or None."""
    if analysis.error is not None or not analysis.commands:
        return None
    used: list[str] = []
    for facts in analysis.commands:
        rule = _facts_allowed_by(rules, facts)
        if rule is None:
            return None
        if rule:
            used.append(rule)
    return ", ".join(dict.fromkeys(used)) or None


def key_matches(rule: Rule, key: str) -> bool:
    if rule.specifier is None:
        return True
    return key.startswith(rule.specifier) if rule.prefix else key == rule.specifier


def project_rules_for(tool_name: str, subject: Subject) -> list[str]:
    """Allow rules that cover exactly this call; ``ValueError`` if it cannot be expressed."""
    if subject.invalid:
        raise ValueError(f"cannot write a rule for this call: {subject.invalid}")
    if subject.kind == "command":
        analysis = subject.command
        assert analysis is not None
        if analysis.error is not None:
            raise ValueError(f"cannot write a rule for an unparseable command: {analysis.error}")
        rules: list[str] = []
        for facts in analysis.commands:
            if facts.delegated:
                continue
            if facts.unknown or not facts.allowable or not facts.allow_forms:
                why = facts.why_not_allowable or "it runs a program not known in advance"
                raise ValueError(f"cannot write an allow rule for this command: {why}")
            rules.append(f"{tool_name}({_spell(facts.allow_forms[0])})")
        if not rules:
            raise ValueError("the command runs nothing a rule could describe")
    elif subject.kind == "paths":
        # ``//`` + the canonical path: absolute (a single ``/`` is relative to the project)
        rules = [f"{tool_name}(/{_escape_glob(p.canonical)})" for p in subject.paths]
    elif subject.kind == "key":
        rules = [f"{tool_name}({subject.key})"]
    else:
        rules = [tool_name]
    rules = list(dict.fromkeys(rules))
    for text in rules:  # never write what the reader would refuse or read differently
        parse_rule(text, "allow")
    return rules


def _spell(form: tuple[Word, ...]) -> str:
    return " ".join(w.raw if w.dynamic else shlex.quote(w.value) for w in form)


def _escape_glob(path: str) -> str:
    return _GLOB_SPECIALS.sub(r"\\\1", path) if os.sep == "/" else path
