"""Brace expansion is expanded before matching: every word it yields meets the deny rules, the
sensitive list and the protected paths, and a word bash would expand never matches an allow rule
as written. The expansion itself is checked against real bash."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastgate import Decision
from fastgate.permissions.shell import parse_command
from tests.permissions_round3_kit import YOLO, asks_as_guarded, ruling

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not installed")


def words_of(word: str) -> list[str]:
    """What the lexer makes of ``printf %s WORD``'s last word (its values)."""
    commands, _ = parse_command("printf %s " + word)
    (command,) = [c for c in commands if c.words]
    return [w.value for w in command.words[2:]]


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        (".{env,}", [".env", "."]),
        (".fast{gate,}", [".fastgate", ".fast"]),
        ("{a,b}{1..3}", ["a1", "a2", "a3", "b1", "b2", "b3"]),
        ("x{,}", ["x", "x"]),
        ("{,}", []),  # empty results are dropped
        ("{a,{b,c}d}e", ["ae", "bde", "cde"]),  # nested
        ("{1..10..4}", ["1", "5", "9"]),
        ("{c..a}", ["c", "b", "a"]),
        ("{01..3}", ["01", "02", "03"]),
        ("{-05..5..5}", ["-05", "000", "005"]),
        ("{a}", ["{a}"]),  # a lone item is not an expansion
        ("{}", ["{}"]),
        ("{a..1}", ["{a..1}"]),  # not a sequence
        ("'{a,b}'", ["{a,b}"]),  # quoted: literal
        ('"{"a,b}', ["{a,b}"]),
        ("\\{a,b}", ["{a,b}"]),  # escaped
        ("{a\\,b}", ["{a,b}"]),
        ("${x:-{a,b}}", ["${x:-{a,b}}"]),  # a parameter expansion, not braces
        ("\\${a,b}", ["$a", "$b"]),  # an escaped dollar leaves a brace expansion
        ("{a}{b,c}", ["{a}b", "{a}c"]),
        ("{{a,b}", ["{a", "{b"]),
    ],
)
def test_brace_expansion_follows_bash(word: str, expected: list[str]) -> None:
    assert words_of(word) == expected


def test_assignments_keep_their_braces() -> None:
    (command,) = parse_command("X={a,b} env")[0]
    assert [w.value for w in command.assignments] == ["X={a,b}"]


def _bash_words(word: str) -> list[str] | None:
    assert BASH is not None
    done = subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", "printf '<%s>\\n' start " + word],
        capture_output=True,
        text=True,
        timeout=10,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )
    if done.returncode != 0 or done.stderr:
        return None
    return [line[1:-1] for line in done.stdout.splitlines()[1:]]


WORD_PIECES = st.sampled_from(["{", "}", ",", "a", "b", "..", "1", "3", "'", '"', "\\", "-", "x"])


@needs_bash
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(WORD_PIECES, min_size=1, max_size=9).map("".join))
def test_brace_expansion_matches_real_bash(word: str) -> None:
    try:
        mine = words_of(word)
    except ValueError:
        return  # unbalanced quotes: refused, never allowed
    theirs = _bash_words(word)
    if theirs is None:
        return
    assert mine == theirs, (word, mine, theirs)


# -- through the resolver -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "cat .{env,}",
        "cat .{env,nothing}",
        "cat {.,x}env",
        "cat .e{n,}v",
        "cat ./.{env,}{,}",
        "cat x{/../.env,}",
        "head -c 99 {a,.env}",
    ],
)
@pytest.mark.parametrize(
    "config",
    [{"mode": YOLO}, {"allow": ("Bash(cat:*)", "Bash(head:*)")}],
    ids=["yolo", "allowed-cat"],
)
def test_a_brace_word_naming_a_sensitive_file_asks(
    command: str, config: dict[str, object], tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text("SECRET=1")
    decided = ruling(command, tmp_path, **config)  # type: ignore[arg-type]
    assert asks_as_guarded(decided), decided


@pytest.mark.parametrize(
    "command",
    [
        "{r,}m victim.txt",
        "r{m,} victim.txt",
        "{rm,} victim.txt",
        "{'r',}m victim.txt",
        "\\rm{,}",
        "{rm,x}",
        "/bin/{r,}m x",
        "{/bin/rm,}",
    ],
)
def test_a_program_hidden_in_braces_meets_the_deny_rule(command: str, tmp_path: Path) -> None:
    decided = ruling(command, tmp_path, deny=("Bash(rm:*)",))
    assert decided.decision is Decision.DENY
    assert decided.matched_rule == "Bash(rm:*)"  # rm itself was seen, not just "unknown"
    # and only rm: the expanded program is known, so a rule on another one does not apply
    assert ruling(command, tmp_path, deny=("Bash(git:*)",)).decision is not Decision.DENY
    decided = ruling(command, tmp_path, allow=("Bash(echo:*)", "Bash(x:*)", "Bash(r:*)"))
    assert decided.decision is not Decision.ALLOW


def test_braces_bash_leaves_alone_stay_literal(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("SECRET=1")
    allow = ("Bash(cat:*)",)
    for command in ("cat '.{env,}'", "cat .\\{env,\\}", "cat .{env}", 'cat ".{env,}"'):
        assert ruling(command, tmp_path, allow=allow).decision is Decision.ALLOW, command


def test_an_allow_rule_sees_the_expanded_words(tmp_path: Path) -> None:
    assert ruling("git {status,log}", tmp_path, allow=("Bash(git status)",)).decision is (
        Decision.ASK  # it runs `git status log`
    )
    assert ruling("{git,} status", tmp_path, allow=("Bash(git status)",)).decision is (
        Decision.ALLOW
    )


@pytest.mark.parametrize(
    "command", ["cat {1..2000}", "cat .env{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}"]
)
def test_an_expansion_past_the_bound_fails_closed(command: str, tmp_path: Path) -> None:
    assert asks_as_guarded(ruling(command, tmp_path, mode=YOLO))
    assert ruling(command, tmp_path, deny=("Bash(rm:*)",)).decision is Decision.DENY
    assert ruling(command, tmp_path, allow=("Bash(cat:*)",)).decision is not Decision.ALLOW


def test_a_deep_or_huge_brace_word_is_bounded(tmp_path: Path) -> None:
    started = time.perf_counter()
    deep = "{a," * 3000 + "b" + "}" * 3000
    wide = "{" + ",".join(str(n) for n in range(5000)) + "}"
    number = "{1.." + "9" * 5000 + "}"
    braces = ("{" * 30000, "{a}" * 10000, "x{a,b}" * 5000)  # bash's own search is quadratic
    for command in (f"rm {deep}", f"rm {wide}", f"rm {number}", *(f"rm {b}" for b in braces)):
        decided = ruling(command, tmp_path, deny=("Bash(rm:*)",))
        assert decided.decision is Decision.DENY
    assert time.perf_counter() - started < 5  # bounded work, not a stall
