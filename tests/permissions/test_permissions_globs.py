"""Path patterns agree with git's wildmatch (as implemented by ``pathspec``), with one deliberate
difference: ``x/**`` also matches ``x`` itself, so a sensitive directory copied whole
(``cp -r ~/.ssh``) is caught."""

from __future__ import annotations

import re
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastgate.permissions.globs import compile_path_pattern

pathspec = pytest.importorskip("pathspec")

PATTERN_SEGMENTS = ["a", "b", "*", "?", "**", "[ab]", "[!a]", "a*", ".x", "*b", "[a-b]", "\\*"]
PATH_SEGMENTS = ["a", "b", "ab", ".x", "ba", "bb", "*", "a b"]


def ours(pattern: str, path: str) -> bool:
    regex = compile_path_pattern(pattern).regex("/")
    return re.fullmatch(regex, "/" + path, re.DOTALL) is not None


def git(pattern: str, path: str) -> bool:
    # "gitwildmatch": a pattern matching a directory matches everything below it, like ours
    # (pathspec 1.x deprecates the name in favour of styles that match files only).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        spec = pathspec.PathSpec.from_lines("gitwildmatch", [pattern])
    return bool(spec.match_file(path))


@settings(max_examples=800, deadline=None)
@given(
    st.lists(st.sampled_from(PATTERN_SEGMENTS), min_size=1, max_size=4).map("/".join),
    st.lists(st.sampled_from(PATH_SEGMENTS), min_size=1, max_size=4).map("/".join),
)
def test_patterns_agree_with_git_wildmatch(pattern: str, path: str) -> None:
    expected = git(pattern, path)
    if not expected and pattern.endswith("/**") and git(pattern, path + "/z"):
        expected = True  # the deliberate difference: ``x/**`` matches ``x``
    assert ours(pattern, path) is expected


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("**/.ssh/**", "home/u/.ssh", True),
        ("**/.ssh/**", "home/u/.ssh/id_rsa", True),
        ("**/.ssh/**", "home/u/.sshx", False),
        ("*/x", "x", False),
        ("*/x", "a/x", True),
        ("a/**/**", "a/b/c", True),
    ],
)
def test_examples(pattern: str, path: str, matches: bool) -> None:
    assert ours(pattern, path) is matches
