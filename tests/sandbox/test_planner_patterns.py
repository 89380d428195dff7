"""The planner matches the policy's hidden and protected patterns against every entry its walk
of a root finds, names anything in the workspace may have chosen, so they are matched in linear
time (RE2): a pattern written to backtrack cannot stall planning (and the event loop) on one
long name. Each such case runs in a child process with a time limit, so
a regression fails instead of hanging the suite. The matches are those of Python's ``re`` with
``re.DOTALL`` on the same regexes (what the planner used before)."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from fastgate.paths import compile_path_pattern
from fastgate.sandbox import _planner
from fastgate.sandbox._policy import DEFAULT_HIDDEN, DEFAULT_PROTECTED
from tests.child_kit import run_python

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from fastgate.sandbox import SandboxPolicy, _planner

    root, kind, pattern = json.loads(sys.argv[1])
    policy = SandboxPolicy(
        hidden=[pattern] if kind == "hidden" else [],
        protected=[pattern] if kind == "protected" else [],
    )
    started = time.monotonic()
    where = _planner.layout(policy, [root], root)
    seconds = time.monotonic() - started
    print(json.dumps([list(where.hidden), list(where.read_only), seconds]))
    """
)

LONG = "a" * 200  # a name well within NAME_MAX; Python's re takes hours on it


@pytest.mark.parametrize(
    ("kind", "pattern", "matched"),
    [
        ("hidden", "**/*a*a*a*a*a*a*a*b", False),
        ("hidden", "*a*a*a*a*a*a*a*b", False),
        ("hidden", "/*a*a*a*a*a*a*a*b", False),
        ("hidden", "{root}/*a*a*a*a*a*a*a*b", False),
        ("hidden", "**/*[a]*[a]*[a]*[a]*[a]*[a]*[a]*[b]", False),
        ("hidden", "**/*a*a*a*a*a*a*a*a", True),
        ("protected", "**/*a*a*a*a*a*a*a*b/**", False),
        ("protected", "*a?*a?*a?*a?*a?*a?*a?*b", False),
    ],
)
def test_a_pattern_written_to_backtrack_is_planned_at_once(
    tmp_path: Path, kind: str, pattern: str, matched: bool
) -> None:
    root = str(tmp_path.resolve())
    (tmp_path / LONG).write_text("")
    pattern = pattern.replace("{root}", "/" + root)  # "//<root>/...": an absolute pattern
    payload = json.dumps([root, kind, pattern])
    out = run_python(CHILD, payload, timeout=30, stalled=f"{pattern} backtracked on a long name")
    hidden, read_only, seconds = json.loads(out)
    found = hidden if kind == "hidden" else read_only
    assert found == ([f"{root}/{LONG}"] if matched else [])
    assert seconds < 2.0


PATTERNS = [
    *DEFAULT_HIDDEN,
    *DEFAULT_PROTECTED,
    "*.pem",
    "**/secrets/**",
    "/build/*.log",
    "./conf/[a-c]?.ini",
    "**/x[!q]y",
    "**/[+-0]z",
    "a\\*b",
    "dir/",
    "//etc/passwd",
    "**/ünï/**",
    "**/a\nb",
    "**/*\udc80*",
    "**/sp ace/[-]x",
]

RELATIVE = [
    ".env",
    ".env.local",
    "id_rsa",
    "sub/.ssh/id_ed25519",
    ".git/hooks/pre-commit",
    ".claude/settings.json",
    "x.pem",
    "x.pem\n",
    "d/x.pem",
    "secrets",
    "secrets/a",
    "d/secrets/a/b",
    "build/a.log",
    "build/sub/a.log",
    "conf/ab.ini",
    "conf/db.ini",
    "x/y",
    "xzy",
    "x\ny",
    "xqy",
    "+z",
    "0z",
    "dz",
    "a*b",
    "aXb",
    "dir",
    "dir/f",
    "ünï/f",
    "UNI/f",
    "a\nb",
    "a\nb/c",
    "n\udc80n",
    "sp ace/-x",
    "sp ace/ax",
]


@pytest.mark.parametrize("root", ["/tmp/plain", "/tmp/r o+o(t)[x]{1}.$^|\\", "/tmp/é\udc80\n"])
def test_the_planner_matches_as_the_backtracking_engine_did(root: str) -> None:
    patterns = [compile_path_pattern(text) for text in PATTERNS]
    paths = [f"{root}/{r}" for r in RELATIVE]
    paths += [root, "/etc/passwd", "/etc/passwd/x", "/other/.env", "/other/x.pem", "/other/y"]
    for pattern in patterns:
        expected = re.compile(pattern.regex(root), re.DOTALL)
        matcher = _planner._union([pattern], root)
        assert matcher is not None
        for path in paths:
            assert matcher.matches(path) == bool(expected.fullmatch(path)), (pattern.text, path)
    union = _planner._union(patterns, root)
    assert union is not None
    either = re.compile("|".join(f"(?:{p.regex(root)})" for p in patterns), re.DOTALL)
    assert [union.matches(p) for p in paths] == [bool(either.fullmatch(p)) for p in paths]
    assert union.matches("/other/x.pem")
    assert not union.matches("/other/y")


def test_no_patterns_match_nothing() -> None:
    assert _planner._union([], "/tmp") is None
