"""An allow rule covers a word bash expands only where the rule spells the same expansion:
a quoted or escaped ``*``, ``?``, ``[``, ``~``, ``$`` or brace in a rule names that character
itself, so it never allows the command in which bash expands it (``Bash(rm '*')``, a file named
``*``, does not allow ``rm *``, every file). Rules that spell the expansion still allow it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastgate import Decision, DecisionSource, PermissionConfig
from tests.permissions_round3_kit import ruling


@pytest.mark.parametrize(
    ("rule", "command"),
    [
        ("Bash(rm '*')", "rm *"),
        ('Bash(rm "*")', "rm *"),
        ("Bash(rm \\*)", "rm *"),
        ("Bash(rm '*.txt')", "rm *.txt"),
        ("Bash(rm '?')", "rm ?"),
        ("Bash(rm '[ab]')", "rm [ab]"),
        ("Bash(cat '~/x')", "cat ~/x"),
        ("Bash(cat \\~)", "cat ~"),
        ("Bash(echo '$HOME')", "echo $HOME"),
        ("Bash(cat '~/x':*)", "cat ~/x y"),  # a prefix rule
        ("Bash(rm '*'x*)", "rm *x1"),  # a wildcard rule: its literal * is not the glob
        ("Bash(git log '*' *)", "git log * x"),
    ],
)
def test_a_quoted_expansion_in_a_rule_does_not_allow_the_expanding_word(
    tmp_path: Path, rule: str, command: str
) -> None:
    decided = ruling(command, tmp_path, allow=[rule])
    assert decided.decision is Decision.ASK and decided.source is DecisionSource.MODE, decided


@pytest.mark.parametrize(
    ("rule", "command"),
    [
        ("Bash(rm '*')", "rm '*'"),  # the file named *, as the rule says
        ("Bash(rm '*')", "rm \\*"),
        ("Bash(cat ~/x)", "cat ~/x"),
        ("Bash(cat ~/x:*)", "cat ~/x y"),
        ('Bash(cat "$HOME"/x)', 'cat "$HOME"/x'),
        ("Bash(ls *.py)", "ls a.py"),
        ("Bash(ls *.py)", "ls *.py"),
        ("Bash(cat ~/notes/*)", "cat ~/notes/a"),
        ("Bash(rm '*'x*)", "rm '*x1'"),
        ("Bash(rm a.txt)", "rm 'a.txt'"),
    ],
)
def test_a_rule_that_spells_the_word_as_the_command_does_allows_it(
    tmp_path: Path, rule: str, command: str
) -> None:
    decided = ruling(command, tmp_path, allow=[rule])
    assert decided.decision is Decision.ALLOW and decided.source is DecisionSource.RULE, decided


@pytest.mark.parametrize(
    ("rule", "command"),
    [("Bash(cat ~/x)", "cat '~/x'"), ("Bash(ls ~root)", "ls '~root'")],
)
def test_an_expanding_rule_word_does_not_allow_the_literal_one(
    tmp_path: Path, rule: str, command: str
) -> None:
    # ``~/x`` is a file in the home directory; ``'~/x'`` one in a directory named ``~``.
    assert ruling(command, tmp_path, allow=[rule]).decision is Decision.ASK


def test_a_rule_may_not_hold_the_marker_byte() -> None:
    with pytest.raises(ValueError, match="x01"):
        PermissionConfig(allow=["Bash(rm '\x01*')"])
